"""Stock Pipecat ``DeepgramSageMakerTTSService``, unchanged — configured only by endpoint, region and
voice — through SageMaker's bidirectional stream to the real server on the real ONNX runtime.

The real SDK client runs (``aws-sdk-sagemaker-runtime-http2`` at the version Pipecat pins, signing
and event-stream coding included); only the network is replaced by the HTTP stand-in, which opens
the container's WebSocket at the model invocation path ``v1/speak`` and the query Pipecat sends, as
SageMaker does. Runs in its own venv (``.venv312-pipecat``: Pipecat pins an older SDK than the
agent's transport): ``.venv312-pipecat/bin/python -m pytest --noconftest -q tests/agent_py312/pipecat``.
The server runs under the project's 3.11 interpreter (``$SERVER_PYTHON``, by default
``.venv/bin/python``) over the model directory the 3.11 suite built.
"""

from __future__ import annotations

import asyncio
import os
import sys

import numpy as np
import pytest

assert sys.version_info >= (3, 12), "run with .venv312-pipecat (make test does)"

from tests.agent_py312.sagemaker_http_standin import SageMakerHTTPStandIn  # noqa: E402
from tests.support.live import REPO, ServerProcess, free_port  # noqa: E402
from tests.support.pipecat_run import PipecatRun  # noqa: E402
from tests.support.ws_tap import FrameTap  # noqa: E402

VOICE = "jm_kumo"
FIRST = ("Sure. This answer goes on for a while, sentence after sentence, so the listener cuts it "
         "short. Nobody should hear this third sentence at all. Nor this fourth one, surely.")
SECOND = "Go on."
#: Pipecat ends a turn that gets no audio for ``stop_frame_timeout_s`` (3 s by default): a CPU
#: shared with other work can take longer than that for a first sentence. The only option set
#: besides URL, key and voice, and it is Pipecat's own patience, not part of any protocol.
PATIENCE = {"stop_frame_timeout_s": 30.0}


@pytest.fixture(scope="module")
def container(tmp_path_factory):
    """The real server (ONNX runtime) as SageMaker runs the container: one process on a port."""
    python = os.environ.get("SERVER_PYTHON") or str(REPO / ".venv" / "bin" / "python")
    port = free_port()
    srv = ServerProcess(tmp_path_factory.mktemp("container") / "server.log", argv=[python, "-m", "server", "serve"],
                        port=port, KOKORO_HOST="127.0.0.1", KOKORO_PORT=str(port)).wait_ready(timeout=180)
    try:
        yield srv
    finally:
        srv.stop()


async def test_deepgram_sagemaker_tts_service_streams_is_interrupted_and_speaks_the_next_turn(container, monkeypatch):
    from pipecat.services.deepgram.sagemaker.tts import DeepgramSageMakerTTSService

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    async with FrameTap(container.url.replace("http://", "ws://")) as tap:
        http = SageMakerHTTPStandIn(tap.base)
        # Only the network is replaced: the SDK builds its CRT HTTP client; it gets the stand-in.
        monkeypatch.setattr("aws_sdk_sagemaker_runtime_http2.config.AWSCRTHTTPClient", lambda *a, **k: http)
        tts = DeepgramSageMakerTTSService(endpoint_name="kokoro-ep", region="us-east-1",
                                          settings=DeepgramSageMakerTTSService.Settings(voice=VOICE), **PATIENCE)
        async with PipecatRun(tts) as run:
            first = await run.start_reply(FIRST)
            await run.wait_audio(first, 0.01, within=60)  # mid-reply: the first audio is playing
            await run.interrupt()
            wire = tap.wires[0]
            await asyncio.wait_for(wire.wait_until(lambda w: any(e.get("type") == "Cleared" for e in w.events())), 60)
            second_from = len(wire.log)
            second = await run.say(SECOND, within=60)  # Flushed: the whole turn was played
            errors = run.errors
        await http.close()

    assert not errors
    (request,) = http.requests
    assert request.destination.path == "/endpoints/kokoro-ep/invocations-bidirectional-stream"
    assert request.fields["x-amzn-sagemaker-model-invocation-path"].as_string() == "v1/speak"
    assert http.targets == [f"{tap.base}/v1/speak?model={VOICE}&encoding=linear16&sample_rate=24000"]
    assert set(http.container_frames) == {"text"}  # Pipecat sends DataType UTF8
    assert wire.events()[0]["type"] == "Metadata"
    assert "Clear" in [m.get("type") for m in wire.sent()]
    assert len(wire.audio_frames_between("Clear", "Cleared")) <= 1  # the server stopped within one segment
    assert first.after_interruption == 0, "audio of the interrupted turn reached the pipeline's end"
    pcm = bytes(second.audio)
    assert len(pcm) == wire.audio_after(second_from) > 0
    assert 0.3 < second.seconds < 3.0
    samples = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768
    assert float(np.sqrt(np.mean(samples**2))) > 0.01  # speech, not silence
    assert first.audio  # the first turn played before it
