"""The engine's single per-segment step, seen through both modes: the same segment comes out the
same way whichever mode schedules it — clipped, empty audio refused, every call observed.

The runtime is :class:`~backends.runtimes.fake.FakeSynthesizer` with its tone made 20 times louder (peaks
above 1: the model can peak above full scale), over the real text pipeline. The torch runtime's
durations through both modes are in test_torch_runtime.py.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from backends.api import BackendFault, SynthesisRequest
from backends.config import BackendConfig
from backends.engine.concurrent import ConcurrentBackend
from backends.engine.sequential import SequentialBackend
from backends.runtimes.fake import FakeSynthesizer
from tests.support.observer import Recorder

GAIN = 20.0
TEXTS = ["Turn on the light.", "Open the door.", "Close the gate."]


def expected(segment) -> np.ndarray:
    return np.clip(GAIN * FakeSynthesizer.tone(segment), -1.0, 1.0)


# (mode class, config): sequential; concurrent with single calls (a CPU runtime's default);
# concurrent with whole batches (KOKORO_BATCH_ON_CPU).
MODES = {
    "sequential": (SequentialBackend, {}),
    "concurrent-single": (ConcurrentBackend, {"max_wait_ms": 0, "workers": 1}),
    "concurrent-batched": (ConcurrentBackend, {"batch_on_cpu": True, "max_wait_ms": 0}),
}


@pytest.fixture(params=sorted(MODES))
async def engine(request, pipeline, voices):
    cls, config = MODES[request.param]
    batch = request.param == "concurrent-batched"  # (the shipped fake, like ONNX, has no batch path)
    synth = FakeSynthesizer(voices, segment_s=0.0, gain=GAIN, hang_on="Hold", empty_on="Silence", batch=batch)
    recorder = Recorder()
    backend = cls(synth, pipeline, voices, BackendConfig.defaults(**config), observer=recorder)
    yield backend, synth, recorder
    synth.release()
    await backend.aclose()


async def wait_until(predicate) -> None:
    end = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < end, "condition not reached"
        await asyncio.sleep(0.005)


async def answer(backend, text: str, session: str) -> tuple[SynthesisRequest, list]:
    request = await backend.prepare(SynthesisRequest(text=text, voice="jm_kumo", session=session))
    return request, [chunk async for chunk in backend.stream(request)]


async def test_the_same_audio_is_clipped_in_every_mode(engine):
    """Three sessions at once behind a held call, so the batched mode really batches them."""
    backend, synth, recorder = engine
    holder = asyncio.create_task(answer(backend, "Hold on.", "h"))
    await asyncio.to_thread(synth.started.wait, 10)
    tasks = [asyncio.create_task(answer(backend, text, f"s{i}")) for i, text in enumerate(TEXTS)]
    await wait_until(lambda: backend.queue_depth >= len(TEXTS))
    synth.release()
    await holder
    for request, chunks in await asyncio.gather(*tasks):
        assert [c.index for c in chunks] == list(range(len(request.segments)))
        for chunk, segment in zip(chunks, request.segments, strict=True):
            assert chunk.audio.dtype == np.float32
            np.testing.assert_array_equal(chunk.audio, expected(segment))
            assert chunk.audio.max() == 1.0 and chunk.audio.min() == -1.0  # it did peak over full scale
    assert len(recorder.segments) == len(TEXTS) + 1 and sum(recorder.batches) == len(TEXTS) + 1
    assert max(recorder.batches) == (len(TEXTS) if backend.batched else 1)


async def test_empty_audio_is_a_backend_fault_in_every_mode(engine):
    backend, _, recorder = engine
    with pytest.raises(BackendFault) as info:
        await answer(backend, "Silence please.", "a")
    assert info.value.code == "backend_error"
    _, chunks = await answer(backend, TEXTS[0], "a")  # the backend goes on
    assert len(chunks) == 1 and chunks[0].seconds > 0
    assert len(recorder.segments) == 1  # the refused segment is not counted as audio


async def test_capabilities_follow_the_runtime_and_the_mode(engine):
    backend, _, _ = engine
    caps = backend.info.capabilities
    assert caps.word_timings is False  # the fake reports no durations
    assert caps.batching is (backend.mode == "concurrent" and backend.batch_on_cpu)
    assert backend.info.describe() == {"backend": "fake", "mode": backend.mode, "model": "fake",
                                       "device": "cpu", "dtype": "float32"}


async def test_queue_depth_counts_the_segments_waiting_not_the_one_running_in_every_mode(engine):
    backend, synth, recorder = engine
    holder = asyncio.create_task(answer(backend, "Hold on.", "h"))
    await asyncio.to_thread(synth.started.wait, 10)  # its one segment is being synthesised
    assert backend.queue_depth == 0 and recorder.depths[-1] == 0
    tasks = [asyncio.create_task(answer(backend, text, f"s{i}")) for i, text in enumerate(TEXTS)]
    await wait_until(lambda: backend.queue_depth == len(TEXTS))
    assert recorder.depths[-1] == len(TEXTS)  # kokoro_queue_depth says the same
    synth.release()
    await asyncio.gather(holder, *tasks)
    assert backend.queue_depth == 0 and recorder.depths[-1] == 0
