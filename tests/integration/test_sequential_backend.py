"""The sequential backend over the real ONNX runtime: one chunk per segment, in order, cancellable."""

from __future__ import annotations

import asyncio
import threading

import pytest

from backends.base import SynthesisRequest, TextTooLong, UnknownVoice
from backends.config import BackendConfig
from backends.sequential import SequentialBackend

TEXT = "Short start, then the rest of the first sentence. A second sentence follows."


class CountingSynth:
    """The real synthesizer, counting calls; optionally blocks a call until released."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []
        self.name, self.sample_rate, self.thread_safe = inner.name, inner.sample_rate, True
        self.gate: threading.Event | None = None

    def load(self):
        pass

    def synthesize(self, segment):
        self.calls.append(segment.index)
        if self.gate is not None:
            self.gate.wait(10)
        return self.inner.synthesize(segment)


@pytest.fixture
def backend_factory(onnx_synth, pipeline, voices):
    made = []

    def make(**kw):
        synth = CountingSynth(onnx_synth)
        backend = SequentialBackend(synth, pipeline, voices, BackendConfig.defaults(**kw))
        made.append(backend)
        return backend, synth

    yield make
    for b in made:
        asyncio.run(b.aclose())


async def test_chunks_arrive_per_segment_in_order(backend_factory):
    backend, _synth = backend_factory()
    await backend.start()
    assert backend.ready
    request = await backend.prepare(SynthesisRequest(text=TEXT, request_id="r1"))
    assert len(request.segments) >= 2
    chunks = [c async for c in backend.stream(request)]
    assert [c.index for c in chunks] == list(range(len(request.segments)))
    assert chunks[-1].is_last and all(c.seconds > 0.3 for c in chunks)


async def test_closing_the_stream_drops_pending_segments(backend_factory):
    backend, synth = backend_factory()
    request = await backend.prepare(SynthesisRequest(text=TEXT + " And a third one here."))
    stream = backend.stream(request)
    first = await anext(stream)
    assert first.index == 0
    await stream.aclose()
    await asyncio.sleep(0.05)
    assert synth.calls == [0]


async def test_cancelling_mid_segment_never_starts_the_next(backend_factory):
    backend, synth = backend_factory()
    synth.gate = threading.Event()
    request = await backend.prepare(SynthesisRequest(text=TEXT))

    async def consume():
        return [c async for c in backend.stream(request)]

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.1)
    task.cancel()
    synth.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.2)
    assert synth.calls == [0]


async def test_typed_errors_before_any_audio(backend_factory):
    backend, _ = backend_factory(max_text_chars=50)
    with pytest.raises(UnknownVoice):
        await backend.prepare(SynthesisRequest(text="hello", voice="nobody"))
    with pytest.raises(TextTooLong):
        await backend.prepare(SynthesisRequest(text="word " * 20))
