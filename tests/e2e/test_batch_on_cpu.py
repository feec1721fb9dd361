"""Cross-session batches through the real server on a CPU: ``python -m server serve`` as a
subprocess in concurrent mode over the fake runtime given a batch path (``KOKORO_FAKE_BATCH``: a CPU
runtime with a batch path), several WebSocket sessions at once.

With ``KOKORO_BATCH_ON_CPU=true`` segments of different sessions share runtime calls
(``kokoro_batch_size`` observations above one); without it a CPU runtime gets single calls. Either
way every session is answered in order. Each runtime call takes ``KOKORO_FAKE_SEGMENT_S`` (0.3 s),
so the segments of the other sessions queue up while one call runs.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.support.inproc import metric
from tests.support.live import ServerProcess

pytestmark = pytest.mark.subprocess

SESSIONS = 6
TEXTS = ["Turn on the light, please.", "Open the door for me."]


async def session(url: str, s: int) -> list[tuple[str, str, int]]:
    """Pipelines both requests, then reads every frame: [(request_id, terminal event, PCM bytes)]."""
    answered: list[tuple[str, str, int]] = []
    async with connect(url) as ws:
        for r, text in enumerate(TEXTS):
            await ws.send(json.dumps({"text": text, "request_id": f"s{s}-r{r}"}))
        for _ in TEXTS:
            start = json.loads(await ws.recv())
            assert start["type"] == "synthesis_start", start
            pcm = 0
            while isinstance(frame := await ws.recv(), bytes):
                pcm += len(frame)
            end = json.loads(frame)
            assert end["request_id"] == start["request_id"]
            answered.append((start["request_id"], end["type"], pcm))
    return answered


@pytest.mark.parametrize("batch_on_cpu", ["true", "false"])
async def test_sessions_share_runtime_calls_only_when_batching_on_cpu(model_dir, tmp_path, batch_on_cpu):
    server = ServerProcess(
        tmp_path / "server.log", KOKORO_MODEL_DIR=str(model_dir), KOKORO_BACKEND="fake", KOKORO_MODE="concurrent",
        KOKORO_BATCH_ON_CPU=batch_on_cpu, KOKORO_FAKE_SEGMENT_S="0.3", KOKORO_FAKE_BATCH="true",
    )
    try:
        await asyncio.to_thread(server.wait_ready)
        results = await asyncio.gather(*(session(server.ws_url, s) for s in range(SESSIONS)))
        async with httpx.AsyncClient(base_url=server.url) as http:
            text = (await http.get("/metrics")).text
    finally:
        assert server.stop() == 0, server.log()
    for s, answered in enumerate(results):
        assert [(rid, kind) for rid, kind, _ in answered] == [(f"s{s}-r{r}", "synthesis_complete") for r in range(2)]
        assert all(pcm > 0 for _, _, pcm in answered)
    calls = metric(text, "kokoro_batch_size_count")
    single = metric(text, 'kokoro_batch_size_bucket{le="1.0"}')
    segments = metric(text, "kokoro_batch_size_sum")
    assert segments >= SESSIONS * len(TEXTS) + 1  # every request's segments and the warm-up
    if batch_on_cpu == "true":
        assert calls > single  # some runtime calls held more than one segment
        assert calls < segments
    else:
        assert calls == single == segments  # one segment per call
