"""The sequential backend over the real ONNX runtime: one chunk per segment, in order, cancellable."""

from __future__ import annotations

import asyncio
import threading

import pytest

from backends.api import SynthesisRequest, TextTooLong, UnknownVoice
from backends.config import BackendConfig
from backends.engine.sequential import SequentialBackend
from tests.support.app import LoadedRuntime

TEXT = "Short start, then the rest of the first sentence. A second sentence follows."


@pytest.fixture
def backend_factory(onnx_synth, pipeline, voices):
    made = []

    def make(**kw):
        synth = LoadedRuntime(onnx_synth)
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
    assert len(await request.plan.whole()) >= 2
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
    after = await backend.prepare(SynthesisRequest(text="Then another."))
    await drained(backend, after)
    assert len(request.segments) >= 3
    # The one segment offered ahead of the reader may have started; nothing after it ever does.
    ahead = synth.calls[1:len(synth.calls) - len(after.segments)]
    assert synth.calls[0] == request.segments[0].text and ahead in ([], [request.segments[1].text])
    assert synth.calls[len(synth.calls) - len(after.segments):] == [s.text for s in after.segments]


async def test_cancelling_mid_segment_never_starts_the_next(backend_factory):
    backend, synth = backend_factory()
    synth.hold = threading.Event()
    request = await backend.prepare(SynthesisRequest(text=TEXT))

    async def consume():
        return [c async for c in backend.stream(request)]

    task = asyncio.create_task(consume())
    await until(lambda: len(synth.calls) == 1)  # the first segment is mid-synthesis
    task.cancel()
    synth.hold.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    after = await backend.prepare(SynthesisRequest(text="Then another."))
    await drained(backend, after)
    assert synth.calls == [request.segments[0].text, *(s.text for s in after.segments)]


async def until(predicate, limit_s: float = 30.0) -> None:
    """Wait for ``predicate`` (a state, never a time, decides)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while not predicate():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.002)


async def drained(backend, request) -> None:
    """Run ``request`` to its end on the one worker: whatever was queued before has run by then,
    and nothing is left waiting."""
    assert [c.index async for c in backend.stream(request)] == list(range(len(request.segments)))
    assert backend.queue_depth == 0


async def test_typed_errors_before_any_audio(backend_factory):
    backend, _ = backend_factory(max_text_chars=50)
    with pytest.raises(UnknownVoice):
        await backend.prepare(SynthesisRequest(text="hello", voice="nobody"))
    with pytest.raises(TextTooLong):
        await backend.prepare(SynthesisRequest(text="word " * 20))
