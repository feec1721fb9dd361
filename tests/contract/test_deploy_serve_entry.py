"""The SageMaker ``serve`` entry as SageMaker runs it, minus Docker: a real process, a real server.

``deploy/sagemaker/serve serve`` with SageMaker's conventions (SAGEMAKER_BIND_TO_PORT, a populated
model directory standing in for /opt/ml/model) must: answer /ping, synthesise over the
bidirectional WebSocket when requests arrive as *binary* frames (what SageMaker delivers), pass the
deploy smoke test through the agent's SageMaker transport (with the SDK stand-in that routes
payload parts to the container as SageMaker does), and drain on SIGTERM. The same smoke test then
gates a moto deploy end to end.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import signal
import sys
import urllib.request
from pathlib import Path

import pytest

from deploy.smoke import SmokeTestFailed, sagemaker_smoke, websocket_smoke
from tests.support.live import REPO, ServerProcess, ThreadServer, free_port

pytestmark = pytest.mark.cloud

SERVE = REPO / "deploy" / "sagemaker" / "serve"
SHORT = ("Hello there.", "Good bye.")  # two requests, kept short: this machine synthesises on CPU


def _load_serve_module():
    loader = importlib.machinery.SourceFileLoader("sagemaker_serve_entry", str(SERVE))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


serve_entry = _load_serve_module()


def test_populated_opt_ml_model_is_the_model_dir(tmp_path):
    (tmp_path / "kokoro-v1.0.onnx").write_bytes(b"x")
    cmd, env, summary = serve_entry.plan(["serve", "serve"], {"KOKORO_SM_MODEL_DIR": str(tmp_path),
                                                              "KOKORO_IMAGE_MODEL_DIR": "/opt/kokoro/model"})
    assert env["KOKORO_MODEL_DIR"] == str(tmp_path) and "unpacked by SageMaker" in summary
    assert cmd[:6] == ["kokoro-serve", "serve", "--host", "0.0.0.0", "--port", "8080"]
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"


def test_empty_opt_ml_model_falls_back_to_the_baked_assets_and_explicit_dir_wins(tmp_path):
    (tmp_path / ".hidden").write_text("")
    base = {"KOKORO_SM_MODEL_DIR": str(tmp_path), "KOKORO_IMAGE_MODEL_DIR": "/opt/kokoro/model"}
    assert serve_entry.plan(["serve"], base)[1]["KOKORO_MODEL_DIR"] == "/opt/kokoro/model"
    explicit = serve_entry.plan(["serve"], {**base, "KOKORO_MODEL_DIR": "/models/x"})
    assert explicit[1]["KOKORO_MODEL_DIR"] == "/models/x"


def test_sagemaker_port_and_kokoro_flags_are_passed_on():
    cmd, env, _ = serve_entry.plan(["serve", "serve"], {"SAGEMAKER_BIND_TO_PORT": "9001", "KOKORO_BACKEND": "torch",
                                                        "KOKORO_DEVICE": "cuda", "KOKORO_SM_MODEL_DIR": "/nonexistent"})
    assert cmd[cmd.index("--port") + 1] == "9001" and env["KOKORO_PORT"] == "9001"
    assert cmd[cmd.index("--backend") + 1] == "torch" and cmd[cmd.index("--device") + 1] == "cuda"


def test_train_is_refused():
    with pytest.raises(SystemExit, match="only serves"):
        serve_entry.plan(["serve", "train"], {})


@pytest.fixture(scope="module")
def served(model_dir, tmp_path_factory):
    """``serve serve`` as SageMaker runs it; the model dir stands in for /opt/ml/model."""
    opt_ml_model = tmp_path_factory.mktemp("opt_ml_model")
    for f in model_dir.iterdir():
        if f.is_file():
            (opt_ml_model / f.name).symlink_to(f)
    port = free_port()
    server = ServerProcess(tmp_path_factory.mktemp("logs") / "serve.log", argv=[sys.executable, str(SERVE), "serve"],
                           port=port, SAGEMAKER_BIND_TO_PORT=str(port), KOKORO_SM_MODEL_DIR=str(opt_ml_model),
                           KOKORO_IMAGE_MODEL_DIR="/nonexistent/baked", KOKORO_THREADS="1")
    try:
        server.wait_ready()
        yield {"url": server.url, "proc": server.proc, "log": server.log_path, "model_dir": opt_ml_model}
    finally:
        server.stop()


def test_serve_answers_ping_from_the_sagemaker_model_dir(served):
    with urllib.request.urlopen(f"{served['url']}/ping", timeout=5) as r:
        body = json.loads(r.read())
    assert r.status == 200 and body["backend"] == "onnx" and body["model"] == "kokoro-v1.0.int8.onnx"
    assert f"model dir {served['model_dir']}" in served["log"].read_text()
    # the entry replaced itself with the server: SageMaker's SIGTERM reaches the server directly
    cmdline = Path(f"/proc/{served['proc'].pid}/cmdline").read_bytes().split(b"\0")
    assert any(part.endswith(b"kokoro-serve") for part in cmdline), cmdline


def test_binary_frame_requests_are_synthesised_over_the_websocket(served):
    report = websocket_smoke(served["url"].replace("http", "ws") + "/invocations-bidirectional-stream", texts=SHORT)
    assert [r.request_id for r in report.results] == ["smoke-1", "smoke-2"]
    assert all(r.audio_seconds > 0.3 and r.peak > 1000 for r in report.results)


def test_smoke_test_through_the_agents_sagemaker_transport(served):
    from tests.agent_support import sagemaker_standin

    standin = sagemaker_standin.SageMakerStandIn(served["url"].replace("http", "ws")
                                                 + "/invocations-bidirectional-stream", max_part_bytes=4096)
    report = sagemaker_smoke("kokoro-tts", "us-east-1", texts=SHORT, client=standin, models=sagemaker_standin.models)
    assert len(report.results) == 2 and report.results[0].audio_bytes > 0
    assert standin.invocations[0].endpoint_name == "kokoro-tts"


def test_smoke_test_fails_on_a_server_that_only_answers_ping():
    """InService-but-broken: a container whose bidirectional handler is missing fails the check."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    app = Starlette(routes=[Route("/ping", lambda _r: JSONResponse({"status": "ok"}))])
    with ThreadServer(app) as server:
        with pytest.raises(Exception) as info:
            websocket_smoke(f"ws://127.0.0.1:{server.port}/invocations-bidirectional-stream", timeout_s=10)
        assert not isinstance(info.value, AssertionError)


def test_moto_deploy_gated_by_the_real_smoke_test(served, monkeypatch):
    from deploy.sagemaker import deploy as sm_deploy
    from deploy.sagemaker.endpoint import EndpointSpec
    from tests.agent_support import sagemaker_standin
    from tests.support.moto_sagemaker import mocked_aws

    container = served["url"].replace("http", "ws") + "/invocations-bidirectional-stream"

    def smoke(name, region):
        standin = sagemaker_standin.SageMakerStandIn(container)
        return sagemaker_smoke(name, region, texts=SHORT, client=standin, models=sagemaker_standin.models)

    with mocked_aws(monkeypatch) as aws:
        spec = EndpointSpec(name="kokoro-tts", image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/k:gpu",
                            role_arn=aws.role)
        result = sm_deploy.deploy(aws, spec, smoke=smoke, log=lambda _m: None, poll_s=0)
    assert result.smoke.startswith("bidi smoke OK")


def test_smoke_failure_message_names_the_request(served):
    """A refused request (unknown voice) is a smoke failure that says what the server answered."""
    with pytest.raises(SmokeTestFailed, match="unknown_voice"):
        websocket_smoke(served["url"].replace("http", "ws") + "/invocations-bidirectional-stream",
                        voice="no_such_voice", texts=SHORT)


def test_sigterm_drains_and_exits_cleanly(served):
    proc = served["proc"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
