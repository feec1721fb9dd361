"""RunPod: the serverless handler through RunPod's own local worker API, pod mode as a real process,
and ``deploy.py`` driving the real ``runpod`` SDK against a local stand-in of RunPod's GraphQL API.

The local worker API and pod mode are checked on the wire (what RunPod hands back, who is let in), so
their servers run the fake runtime (``KOKORO_BACKEND=fake``); the production worker runs exactly as the
image starts it, on the real model.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deploy.runpod import deploy as rp_deploy
from deploy.runpod import handler as rp_handler
from deploy.runpod import start as rp_start
from deploy.smoke import websocket_smoke
from tests.support.live import REPO, ServerProcess, free_port

pytestmark = [pytest.mark.cloud, pytest.mark.subprocess]

HANDLER = REPO / "deploy" / "runpod" / "handler.py"
START = [sys.executable, "-m", "deploy.runpod.start"]  # as the image starts a container


# -- input parsing ----------------------------------------------------------------------------
def test_job_input_accepts_text_or_texts_and_passes_options():
    assert rp_handler.parse_input({"text": "Hi.", "voice": "jm_kumo", "speed": 1.2}) == (
        ["Hi."], {"voice": "jm_kumo", "speed": 1.2})
    assert rp_handler.parse_input({"texts": ["A.", "B."]})[0] == ["A.", "B."]
    for bad in (None, {}, {"text": ""}, {"texts": []}, {"texts": ["ok", 3]}, "text"):
        with pytest.raises(ValueError):
            rp_handler.parse_input(bad)


# -- the serverless worker, as RunPod's local test API runs it --------------------------------
def _post(url, body, timeout=180):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """``python handler.py --rp_serve_api``: RunPod's FastAPI worker; the handler starts the server
    (its own process group: the handler's server child goes down with it)."""
    port = free_port()
    argv = [sys.executable, str(HANDLER), "--rp_serve_api", "--rp_api_port", str(port), "--rp_api_host", "127.0.0.1"]
    proc = ServerProcess(tmp_path_factory.mktemp("logs") / "worker.log", argv=argv, port=port, own_group=True,
                         KOKORO_BACKEND="fake", KOKORO_MODE="concurrent", RUNPOD_DEBUG_LEVEL="ERROR")
    try:
        yield proc.wait_ready("/").url  # the worker API's docs page (/docs redirects there)
    finally:
        proc.stop(30)


def test_runsync_streams_base64_pcm_per_segment_then_completion_per_request(worker):
    result = _post(f"{worker}/runsync", {"input": {"texts": ["Hello there.", "Good bye."]}})
    assert result["status"] == "COMPLETED", result
    outputs = result["output"]
    chunks = [o for o in outputs if "audio" in o]
    completes = [o for o in outputs if "complete" in o]
    assert [c["request"] for c in completes] == [0, 1]
    assert {c["request"] for c in chunks} == {0, 1}
    # in order: all of request 0's audio, its completion, then request 1
    assert outputs.index(completes[0]) < min(i for i, o in enumerate(outputs) if o.get("request") == 1)
    for chunk in chunks:
        pcm = base64.b64decode(chunk["audio"])
        assert chunk["sample_rate"] == 24000 and chunk["encoding"] == "pcm_s16le"
        assert len(pcm) % 2 == 0 and len(pcm) > 2400 and any(pcm)
    for c in completes:
        assert c["complete"]["audio_duration_s"] > 0.3


def test_stream_endpoint_returns_the_same_chunks(worker):
    job = _post(f"{worker}/run", {"input": {"text": "Hello there."}})
    streamed = _post(f"{worker}/stream/{job['id']}", {})
    assert streamed["status"] == "COMPLETED"
    assert any("audio" in item["output"] for item in streamed["stream"])


def test_a_refused_text_is_reported_and_the_jobs_later_texts_still_finish(worker):
    """The session stays open after an error event (the contract): the handler reports the refused
    text in its place, without the ``error`` key that makes RunPod's worker stop reading the job."""
    result = _post(f"{worker}/runsync", {"input": {"texts": ["Hello there.", "...", "Good bye."]}})
    assert result["status"] == "COMPLETED", result
    outputs = result["output"]
    assert not any("error" in o for o in outputs)
    (failed,) = [o for o in outputs if "failed" in o]
    assert failed["request"] == 1 and failed["failed"]["code"] and failed["failed"]["message"]
    assert [o["request"] for o in outputs if "complete" in o] == [0, 2]
    later = [o for o in outputs if o.get("request") == 2 and "audio" in o]
    assert later and all(len(base64.b64decode(o["audio"])) > 2400 for o in later)
    # in order: request 0's completion, the failure, then request 2's audio
    assert outputs.index(failed) < outputs.index(later[0])


def test_a_job_whose_texts_all_fail_ends_with_the_servers_error_code(worker):
    """The handler then yields ``{"error": ...}`` last; RunPod's worker (rp_job.handle_job) fails the
    job on such an item. The local simulator only collects it, so that is what is checked here."""
    bad_voice = _post(f"{worker}/runsync", {"input": {"text": "Hello.", "voice": "no_such_voice"}})
    assert [list(o) for o in bad_voice["output"]] == [["request", "failed"], ["error"]]
    assert bad_voice["output"][0]["failed"]["code"] == "unknown_voice"
    assert bad_voice["output"][-1]["error"].startswith("unknown_voice:")
    empty = _post(f"{worker}/runsync", {"input": {"text": "  "}})
    assert [list(o) for o in empty["output"]] == [["error"]]
    assert empty["output"][0]["error"].startswith("invalid_request:")


# -- pod mode -----------------------------------------------------------------------------------
def test_pod_mode_requires_an_api_key_and_runs_concurrent_mode_on_8080():
    with pytest.raises(SystemExit, match="KOKORO_API_KEY"):
        rp_start.plan({"KOKORO_RUNPOD_MODE": "pod"})
    with pytest.raises(SystemExit, match="runpod_mode"):
        rp_start.plan({"KOKORO_RUNPOD_MODE": "both"})
    assert rp_start.plan({"KOKORO_RUNPOD_MODE": "pod", "KOKORO_ALLOW_NO_AUTH": "1", "KOKORO_PORT": "9000"})[0][5] == "9000"
    argv, env = rp_start.plan({"KOKORO_RUNPOD_MODE": "pod", "KOKORO_API_KEY": "k"})
    assert argv[1:] == ["serve", "--host", "0.0.0.0", "--port", "8080", "--mode", "concurrent"]
    assert env["HF_HUB_OFFLINE"] == "1"
    assert rp_start.mode_of({"RUNPOD_WEBHOOK_GET_JOB": "https://api.runpod.ai/v2/x/job-take"}) == "serverless"
    assert rp_start.plan({"RUNPOD_WEBHOOK_GET_JOB": "u"})[0][-1].endswith("handler.py")


def test_pod_mode_process_serves_behind_the_api_key(tmp_path):
    port = free_port()
    proc = ServerProcess(tmp_path / "pod.log", argv=START, port=port, KOKORO_RUNPOD_MODE="pod",
                         KOKORO_API_KEY="pod-secret", KOKORO_PORT=str(port), KOKORO_BACKEND="fake")
    try:
        proc.wait_ready()  # /ping stays open for health checks
        with pytest.raises(urllib.error.HTTPError) as denied:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5)
        assert denied.value.code == 401
        ws = f"ws://127.0.0.1:{port}/invocations-bidirectional-stream"
        with pytest.raises(Exception, match="401"):
            websocket_smoke(ws, texts=("Hi.",), timeout_s=30)
        report = websocket_smoke(ws, api_key="pod-secret", texts=("Hello there.", "Good bye."))
        assert len(report.results) == 2
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5) as r:
            assert json.loads(r.read())["mode"] == "concurrent"
    finally:
        assert proc.stop() == 0, proc.log()


# -- deploy.py against a stand-in of RunPod's GraphQL API -------------------------------------------
class GraphQLStandIn:
    """Answers the operations the deploy uses the way api.runpod.io does; records every query.

    ``GpuTypes`` knows the GPUs in ``gpus`` (the SDK checks the pod's GPU type exists first)."""

    gpus = ("NVIDIA RTX A5000", "NVIDIA GeForce RTX 4090")

    def __init__(self):
        self.queries: list[tuple[str, str]] = []
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                query = body["query"]
                standin.queries.append((self.headers.get("Authorization", ""), query))
                gpu = next((g for g in standin.gpus if f'gpuTypes(input: {{id: "{g}"}})' in query), None)
                for mutation, data in (("gpuTypes", [{"id": gpu, "displayName": gpu, "memoryInGb": 24}] if gpu else []),
                                       ("saveTemplate", {"id": "tpl-123", "name": "kokoro-tts-template"}),
                                       ("saveEndpoint", {"id": "ep-456", "name": "kokoro-tts", "templateId": "tpl-123"}),
                                       ("podFindAndDeployOnDemand", {"id": "pod-789", "imageName": "img",
                                                                     "machineId": "m1"})):
                    if mutation in query:
                        answer = {"data": {mutation: data}}
                        break
                else:
                    answer = {"errors": [{"message": "unknown operation"}]}
                raw = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def runpod_api(monkeypatch):
    standin = GraphQLStandIn()
    monkeypatch.setenv("RUNPOD_API_BASE_URL", standin.url)
    monkeypatch.setenv("RUNPOD_API_KEY", "rp-test-key")
    yield standin
    standin.server.shutdown()


IMAGE = "docker.io/example/kokoro-serve:runpod"


def test_dry_run_prints_the_plan_and_calls_nothing(runpod_api, monkeypatch, capsys):
    monkeypatch.delenv("RUNPOD_API_KEY")
    assert rp_deploy.main(["endpoint", "--image", IMAGE, "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [c["call"] for c in plan] == ["runpod.create_template", "runpod.create_endpoint"]
    assert plan[0]["kwargs"]["is_serverless"] is True and plan[0]["kwargs"]["env"]["KOKORO_RUNPOD_MODE"] == "serverless"
    assert rp_deploy.main(["pod", "--image", IMAGE, "--dry-run"]) == 0
    pod = json.loads(capsys.readouterr().out)[0]["kwargs"]
    assert pod["ports"] == "8080/http" and pod["env"]["KOKORO_API_KEY"] == "<generated at deploy time>"
    assert runpod_api.queries == []


def test_endpoint_creates_the_serverless_template_then_the_endpoint_on_it(runpod_api, capsys):
    assert rp_deploy.main(["endpoint", "--image", IMAGE, "--workers-max", "2"]) == 0
    (auth1, template), (auth2, endpoint) = runpod_api.queries
    assert auth1 == auth2 == "Bearer rp-test-key"
    assert "saveTemplate" in template and "isServerless: true" in template and f'imageName: "{IMAGE}"' in template
    assert '{ key: "KOKORO_RUNPOD_MODE", value: "serverless" }' in template
    assert "saveEndpoint" in endpoint and 'templateId: "tpl-123"' in endpoint and "workersMax: 2" in endpoint
    assert "ep-456" in capsys.readouterr().out


def test_pod_gets_the_port_concurrent_mode_and_a_generated_api_key(runpod_api, capsys):
    assert rp_deploy.main(["pod", "--image", IMAGE]) == 0
    (_, gpu_check), (_, query) = runpod_api.queries
    assert 'gpuTypes(input: {id: "NVIDIA RTX A5000"})' in gpu_check
    assert "podFindAndDeployOnDemand" in query and 'ports: "8080/http"' in query
    assert '{ key: "KOKORO_MODE", value: "concurrent" }' in query
    out = capsys.readouterr()
    key = out.err.split("API key (shown once): ")[1].strip()
    assert len(key) >= 32 and f'{{ key: "KOKORO_API_KEY", value: "{key}" }}' in query
    assert "pod-789" in out.out and "terminate" in out.out


def test_an_unknown_gpu_type_is_refused_before_anything_is_created(runpod_api):
    with pytest.raises(ValueError, match="No GPU found"):
        rp_deploy.main(["pod", "--image", IMAGE, "--gpu-type", "NVIDIA Imaginary 9000"])
    assert not any("podFindAndDeployOnDemand" in q for _, q in runpod_api.queries)


def test_pod_api_key_can_come_from_a_runpod_secret(runpod_api, capsys):
    assert rp_deploy.main(["pod", "--image", IMAGE, "--api-key-secret", "kokoro_key"]) == 0
    query = runpod_api.queries[-1][1]
    assert "{{ RUNPOD_SECRET_kokoro_key }}" in query
    assert "API key" not in capsys.readouterr().err


# -- the production worker loop (runpod.serverless.worker) against a stand-in job queue ------------
class JobQueueStandIn:
    """RunPod's job API as a worker sees it: job-take hands out queued jobs (then 204), job-stream and
    job-done receive the worker's posts (a JSON body), job-stop returns no stop signals."""

    def __init__(self, jobs):
        self.jobs, self.streamed, self.done = list(jobs), {}, {}
        self.finished = threading.Event()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status, body=None):
                raw = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                if "/job-take/" in self.path and standin.jobs:
                    return self._reply(200, standin.jobs.pop(0))
                if "/job-stop/" in self.path:
                    return self._reply(200, [])
                return self._reply(204)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                job_id = self.path.split("?")[0].rsplit("/", 1)[1]
                if "/job-stream/" in self.path:
                    standin.streamed.setdefault(job_id, []).append(body)
                elif "/job-done/" in self.path:
                    standin.done[job_id] = body
                    if len(standin.done) == 2:
                        standin.finished.set()
                self._reply(200, {})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_production_worker_streams_each_chunk_and_fails_a_refused_job(model_dir, tmp_path):
    queue = JobQueueStandIn([{"id": "job-ok", "input": {"texts": ["Hello there.", "Good bye."]}},
                             {"id": "job-bad", "input": {"text": "Hello.", "voice": "no_such_voice"}}])
    base = f"{queue.url}/v2/kokoro-endpoint"
    # exactly as the image starts a serverless worker (KOKORO_RUNPOD_MODE unset: detected from the env)
    proc = ServerProcess(
        tmp_path / "worker.log", argv=START, own_group=True,
        KOKORO_MODEL_DIR=str(model_dir), KOKORO_THREADS="1", RUNPOD_POD_ID="worker-1",
        RUNPOD_WEBHOOK_GET_JOB=f"{base}/job-take/$RUNPOD_POD_ID?gpu=none",
        RUNPOD_WEBHOOK_POST_OUTPUT=f"{base}/job-done/$RUNPOD_POD_ID/$ID?gpu=none",
        RUNPOD_WEBHOOK_POST_STREAM=f"{base}/job-stream/$RUNPOD_POD_ID/$ID?gpu=none",
        RUNPOD_SKIP_GPU_CHECK="true")
    try:
        assert queue.finished.wait(240), (queue.done, proc.log())
    finally:
        proc.stop(30)
        queue.server.shutdown()

    chunks = [item["output"] for item in queue.streamed["job-ok"]]
    assert [c["request"] for c in chunks if "complete" in c] == [0, 1]
    assert all(len(base64.b64decode(c["audio"])) > 2400 for c in chunks if "audio" in c)
    assert "error" not in queue.done["job-ok"]
    assert "unknown_voice" in queue.done["job-bad"]["error"]  # RunPod reports this job FAILED


# -- settings -------------------------------------------------------------------------------------
def test_every_kokoro_variable_the_runpod_code_reads_is_declared():
    import re

    from deploy.runpod.settings import RunPodSettings

    declared = {e for name in RunPodSettings.model_fields for e in RunPodSettings.env_names(name)}
    used = set()
    for path in (REPO / "deploy" / "runpod").glob("*.py"):
        if path.name != "deploy.py":  # deploy.py writes variables into templates; it reads none
            used |= set(re.findall(r"KOKORO_[A-Z_]+[A-Z]", path.read_text()))
    assert used <= declared, used - declared
    rows = "\n".join(RunPodSettings.markdown_rows())
    for own in ("KOKORO_RUNPOD_MODE", "KOKORO_SERVER_URL", "KOKORO_SERVER_API_KEY", "KOKORO_ALLOW_NO_AUTH"):
        assert f"| `{own}` |" in rows
    assert "KOKORO_PORT" not in rows  # the server's table lists its own variables
