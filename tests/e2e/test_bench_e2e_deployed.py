"""``python -m benchmarks e2e`` against an agent it did not start: a running agent app by URL, and the
same app behind a stand-in for Bedrock AgentCore's ``InvokeAgentRuntime`` route, reached through the
real boto3 client (signed request, streamed response). The app is the real AgentCore app with the
scripted model, over a real server of this project on the fake runtime."""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from benchmarks import e2e
from benchmarks.live import LiveServer
from tests.support.live import ServerProcess, ThreadServer

pytestmark = [pytest.mark.bench, pytest.mark.subprocess, pytest.mark.cloud]

ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/kokoro_agent-AbCdEf1234"


@pytest.fixture(scope="module")
def agent(model_dir, tmp_path_factory):
    tts = ServerProcess(tmp_path_factory.mktemp("tts") / "tts.log", KOKORO_BACKEND="fake",
                        KOKORO_FAKE_SEGMENT_S="0.01", KOKORO_MODEL_DIR=str(model_dir)).wait_ready()
    argv = [*e2e._agent_command(), "serve", "--model", "scripted", "--tokens-per-second", "400",
            "--tts-url", tts.url, "--voice", e2e.VOICE]
    try:
        with LiveServer(argv=argv, name="agent", log=lambda _m: None, startup_timeout_s=120) as app:
            yield app
    finally:
        tts.stop()


def _summary_ok(result):
    assert result.status == "ok", result.notes
    assert [s["mode"] for s in result.samples] == ["bidi", "batch", "batch", "bidi"]  # the first one rotating
    assert all(s["first_audio_ms"] and not s["errors"] for s in result.samples), result.samples
    for mode in ("bidi", "batch"):
        assert result.medians[mode]["first_audio_ms"] > 0 and result.medians[mode]["first_audio_ms_mean"] > 0
    assert result.summary["speedup"] and result.summary["speedup_of_means"]


def test_a_running_agent_app_by_url(agent):
    result = e2e.run(quick=True, agent_url=agent.url + "/invocations", log=lambda _m: None)
    _summary_ok(result)
    assert result.config["path"].startswith(f"running agent app at {agent.url},")
    assert "--agent-url" in result.command and "deployed agent" in e2e.body(result.to_dict())


def test_an_agentcore_runtime_through_invoke_agent_runtime(agent):
    import boto3

    seen: list[tuple[str, str | None]] = []

    async def invocations(request: Request) -> StreamingResponse:
        """AgentCore's data plane in front of the app: its route, then the container's /invocations."""
        seen.append((request.path_params["arn"], request.headers.get("x-amzn-bedrock-agentcore-runtime-session-id")))
        client = httpx.AsyncClient(timeout=60)
        upstream = await client.send(client.build_request("POST", agent.url + "/invocations", content=await request.body(),
                                                          headers={"Content-Type": "application/json"}), stream=True)
        return StreamingResponse(upstream.aiter_raw(), media_type="text/event-stream",
                                 background=BackgroundTask(client.aclose))

    relay = Starlette(routes=[Route("/runtimes/{arn:path}/invocations", invocations, methods=["POST"]),
                              Route("/ping", lambda r: StreamingResponse(iter([b"ok"])))])
    with ThreadServer(relay) as srv:
        client = boto3.client("bedrock-agentcore", region_name="us-east-1", endpoint_url=srv.url,
                              aws_access_key_id="test", aws_secret_access_key="test")
        result = e2e.run(quick=True, agent_runtime_arn=ARN, agentcore_client=client, log=lambda _m: None)
    _summary_ok(result)
    assert len(seen) == 4 and all(arn == ARN for arn, _ in seen)
    assert len({sid for _, sid in seen}) == 4 and all(sid and len(sid) >= 33 for _, sid in seen)


def test_an_agent_that_does_not_answer_is_a_not_run_result():
    result = e2e.run(quick=True, agent_url="http://127.0.0.1:9", log=lambda _m: None)
    assert result.status == "not_run" and "did not answer" in result.notes[0]
