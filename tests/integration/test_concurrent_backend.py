"""The concurrent (batched) backend: ordering, batching, fairness, admission, cancellation, faults.

Most tests drive the fake runtime (:class:`~backends.runtimes.fake.FakeSynthesizer`: latency, gate and
failure knobs; its audio encodes the segment, so a mixed-up chunk shows), configured as a batching
runtime or as shipped; a few run the real ONNX runtime, and one runs the torch runtime's real
``synthesize_batch`` when that runtime is installed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import time

import numpy as np
import pytest

from backends.api import (
    BackendFault,
    NotReady,
    Overloaded,
    SynthesisRequest,
    SynthesisTimeout,
)
from backends.config import BackendConfig
from backends.engine.concurrent import ConcurrentBackend
from backends.engine.joins import pause_for, shape
from backends.runtimes.fake import FakeSynthesizer
from tests.support.app import LoadedRuntime
from tests.support.observer import Recorder

SENTENCES = [
    "Short start, then the rest of the first sentence.",
    "A second sentence follows it.",
    "The third one closes the request.",
]
LONG_TEXT = " ".join(f"Sentence number {i} of a rather long text goes here." for i in range(12))


def batch_fake(**knobs) -> FakeSynthesizer:
    """The fake runtime as a batching runtime on a GPU (torch on CUDA): a batch path, not
    thread-safe (a call overlapping another fails loudly), no latency unless asked."""
    return FakeSynthesizer(**{"batch": True, "thread_safe": False, "device": "cuda", "segment_s": 0.0, **knobs})


def single_fake(**knobs) -> FakeSynthesizer:
    """The fake runtime as shipped (what ONNX declares: no batch path, thread-safe)."""
    return FakeSynthesizer(**{"segment_s": 0.0, **knobs})


@pytest.fixture
async def make_backend(pipeline, voices):
    made = []

    def make(synth, observer=None, **kw) -> ConcurrentBackend:
        backend = ConcurrentBackend(synth, pipeline, voices, BackendConfig.defaults(**kw), observer=observer)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        await backend.aclose()


async def collect(backend, request) -> list:
    return [chunk async for chunk in backend.stream(request)]


async def prepared(backend, text: str, session: str = "", rid: str = "") -> SynthesisRequest:
    return await backend.prepare(SynthesisRequest(text=text, session=session, request_id=rid, voice="jm_kumo"))


async def wait_until(predicate, limit_s: float = 5.0) -> None:
    end = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < end, "condition not reached"
        await asyncio.sleep(0.005)


async def drained(backend) -> list[str]:
    """Run one more request to its end and return its segments' texts: whatever was queued before
    it has run by then (one call at a time), and nothing is left waiting or admitted."""
    request = await prepared(backend, "And that is all.", session="after")
    assert len(await collect(backend, request)) == len(request.segments)
    assert backend.queue_depth == 0 and backend.active_requests == 0
    return [s.text for s in request.segments]


async def run_sessions(backend, n_sessions: int, per_session: int) -> dict:
    """Each session pipelines its requests (all streams open at once) and reads them in order."""

    async def session(s: int):
        texts = [" ".join(SENTENCES[: 1 + (s + r) % 3]) + f" Session {s} request {r}." for r in range(per_session)]
        requests = [await prepared(backend, t, session=f"s{s}", rid=f"s{s}-r{r}") for r, t in enumerate(texts)]
        tasks = [asyncio.create_task(collect(backend, req)) for req in requests]
        return [(req, await task) for req, task in zip(requests, tasks, strict=True)]

    results = await asyncio.gather(*(session(s) for s in range(n_sessions)))
    return {f"s{s}": r for s, r in enumerate(results)}


async def test_many_pipelined_sessions_all_answered_in_order(make_backend):
    synth, recorder = batch_fake(segment_s=0.002), Recorder()
    backend = make_backend(synth, max_batch_size=8, max_wait_ms=2, observer=recorder)
    await backend.start()
    results = await run_sessions(backend, n_sessions=12, per_session=3)
    for answered in results.values():
        assert len(answered) == 3
        for request, chunks in answered:
            assert [c.index for c in chunks] == list(range(len(request.segments)))
            for chunk, segment in zip(chunks, request.segments, strict=True):
                np.testing.assert_array_equal(chunk.audio, FakeSynthesizer.tone(segment))
    total = sum(len(req.segments) for answered in results.values() for req, _ in answered)
    assert len(recorder.segments) == total + 1  # + the warm-up segment
    assert np.mean(recorder.batches) > 1
    assert max(recorder.batches) <= 8
    assert backend.queue_depth == 0 and recorder.depths[-1] == 0 and backend.active_requests == 0


async def test_per_segment_fallback_without_a_batch_path(make_backend):
    synth, recorder = batch_fake(batch=False), Recorder()
    backend = make_backend(synth, observer=recorder)
    assert not backend.batched and backend.workers == 1  # not thread_safe: one call at a time
    results = await run_sessions(backend, n_sessions=4, per_session=2)
    assert all(len(chunks) == len(req.segments) for answered in results.values() for req, chunks in answered)
    assert set(recorder.batches) == {1}


async def test_thread_safe_runtime_gets_parallel_calls_and_its_share_of_cores(make_backend):
    synth = single_fake()  # (threads=None, like OnnxSynthesizer(threads=None): not chosen by the user)
    backend = make_backend(synth)
    await backend.start()
    assert backend.workers == min(2, os.cpu_count() or 1)
    if backend.workers > 1:  # (a 1-core machine: one call at a time, the runtime's own default)
        assert synth.threads == (os.cpu_count() or 1) // backend.workers
    chosen = single_fake(config=BackendConfig.defaults(threads=3))
    await make_backend(chosen, workers=2).start()
    assert chosen.threads == 3  # a thread count the user chose stands


async def test_a_long_text_does_not_starve_a_short_one(make_backend):
    synth = batch_fake(segment_s=0.01)
    backend = make_backend(synth, max_batch_size=1, max_wait_ms=0)
    long_req = await prepared(backend, LONG_TEXT, session="long")
    short_req = await prepared(backend, "A short reply.", session="short")
    long_task = asyncio.create_task(collect(backend, long_req))
    await asyncio.to_thread(synth.started.wait, 5)
    short_chunks = await collect(backend, short_req)
    assert len(short_chunks) == 1
    order = [texts[0] for texts in synth.batches]
    assert order.index(short_req.segments[0].text) <= 2  # served within a round, not after 12 segments
    assert len(await long_task) == len(long_req.segments) >= 3


async def test_short_segments_are_not_batched_with_long_ones(make_backend):
    synth = batch_fake()
    synth.gate = threading.Event()
    backend = make_backend(synth, max_batch_size=8, max_wait_ms=0, short_first_segment="never")
    blocker = asyncio.create_task(collect(backend, await prepared(backend, "Hold on.", session="z")))
    await asyncio.to_thread(synth.started.wait, 5)
    # (one segment: no clause mark and no phrase boundary where the first segment could be cut, and no
    # short first cut)
    long_text = "The whole committee carefully reviewed every single late application submitted last Friday evening."
    texts = {"a": "Hi.", "b": long_text, "c": "Yes."}
    requests = {k: await prepared(backend, t, session=k) for k, t in texts.items()}
    tasks = [asyncio.create_task(collect(backend, r)) for r in requests.values()]
    await wait_until(lambda: backend.queue_depth == 3)
    synth.gate.set()
    await asyncio.gather(blocker, *tasks)
    assert synth.batches[1:] == [["Hi.", "Yes."], [long_text]]  # the round's head first, then the long one


async def test_first_segments_that_queued_while_a_batch_ran_start_as_it_ends_without_the_collate_wait(make_backend):
    """The collate wait (``max_wait_ms``, here a minute) is for a runtime that sat idle: listeners'
    first segments that queued while a batch ran have waited through it, and go as it ends."""
    synth = batch_fake()
    synth.gate = threading.Event()
    backend = make_backend(synth, max_batch_size=4, max_wait_ms=60_000, short_first_segment="never")
    words = ["One.", "Two.", "Six.", "Ten."]  # a full first batch: it starts without waiting
    first = [asyncio.create_task(collect(backend, await prepared(backend, w, session=w))) for w in words]
    await asyncio.to_thread(synth.started.wait, 5)
    later = [asyncio.create_task(collect(backend, await prepared(backend, w, session=w))) for w in ("Hi.", "Yes.")]
    await wait_until(lambda: backend.queue_depth == 2)
    synth.gate.set()
    answered = await asyncio.wait_for(asyncio.gather(*first, *later), timeout=20)
    assert all(len(chunks) == 1 for chunks in answered)
    assert [sorted(batch) for batch in synth.batches] == [sorted(words), ["Hi.", "Yes."]]


async def test_a_batch_runtime_on_cpu_gets_single_calls_unless_asked(make_backend):
    synth = batch_fake(device="cpu")  # like TorchSynthesizer after load() on a CPU
    backend = make_backend(synth, max_batch_size=8)
    assert not backend.batched
    await run_sessions(backend, n_sessions=3, per_session=1)
    assert all(len(call) == 1 for call in synth.batches)
    assert make_backend(synth, batch_on_cpu=True).batched


async def test_overloaded_when_the_queue_bound_is_hit_then_serves_again(make_backend):
    synth = batch_fake()
    synth.gate = threading.Event()
    backend = make_backend(synth, max_queue=2)
    first = [asyncio.create_task(collect(backend, await prepared(backend, SENTENCES[i], rid=f"r{i}"))) for i in range(2)]
    await wait_until(lambda: backend.active_requests == 2)
    with pytest.raises(Overloaded) as info:  # refused before its text is planned
        await prepared(backend, SENTENCES[2], rid="r2")
    assert info.value.status == 503 and info.value.retryable
    with pytest.raises(Overloaded):  # what the HTTP routes ask before reading a request
        backend.admit()
    synth.gate.set()
    assert all(len(chunks) >= 1 for chunks in await asyncio.gather(*first))
    backend.admit()
    extra = await prepared(backend, SENTENCES[2], rid="r2")
    assert len(await collect(backend, extra)) == len(extra.segments)
    assert backend.active_requests == 0


async def test_the_queue_bound_counts_the_requests_being_planned(make_backend, monkeypatch):
    """A request admitted is counted from its planning on: past ``max_queue`` a newcomer is
    refused while the others are still being planned (under a flood the planning backlog is
    bounded too), and the count is back at 0 once they are planned."""
    import backends.engine.core as core

    held, plan_first = threading.Event(), core.plan_first
    monkeypatch.setattr(core, "plan_first", lambda *a: (held.wait(10), plan_first(*a))[1])
    backend = make_backend(batch_fake(), max_queue=2)
    planning = [asyncio.create_task(prepared(backend, SENTENCES[i], rid=f"r{i}")) for i in range(2)]
    await wait_until(lambda: backend.planning == 2)
    assert backend.active_requests == 0 and backend.table_sizes()["planning_requests"] == 2
    with pytest.raises(Overloaded, match="2 requests are in progress"):
        await prepared(backend, SENTENCES[2], rid="r2")
    held.set()
    for request in await asyncio.gather(*planning):
        assert len(await collect(backend, request)) == len(request.segments)
    assert backend.planning == 0 and backend.table_sizes()["planning_requests"] == 0
    backend.admit()


async def test_a_request_planned_keeps_its_place_when_a_newcomer_took_it_meanwhile(make_backend):
    """Between its planning and its stream the queue may fill with a request admitted meanwhile:
    the planned one is served all the same (refused there, its planning would be spent for
    nothing)."""
    synth = batch_fake()
    synth.gate = threading.Event()
    backend = make_backend(synth, max_queue=1)
    first = await prepared(backend, SENTENCES[0], rid="r0")
    second = await prepared(backend, SENTENCES[1], rid="r1")  # r0 planned, its stream not begun
    running = asyncio.create_task(collect(backend, second))
    await wait_until(lambda: backend.active_requests == 1)
    behind = asyncio.create_task(collect(backend, first))
    synth.gate.set()
    assert len(await running) == len(second.segments) and len(await behind) == len(first.segments)


async def test_refuse_turns_a_newcomer_away_while_one_admitted_waits_past_the_first_audio_budget(make_backend):
    """``overload=refuse``: one request's call holds the runtime, a second waits in the queue for
    its first call; once it has waited past KOKORO_OVERLOAD_FIRST_AUDIO_MS a third is refused
    before its text is even planned (503, retryable) — and served once the queue moves."""
    synth = batch_fake()
    synth.gate = threading.Event()
    backend = make_backend(synth, overload="refuse", overload_first_audio_ms=50, max_wait_ms=0)
    running = asyncio.create_task(collect(backend, await prepared(backend, SENTENCES[0], rid="r0")))
    await wait_until(synth.started.is_set)
    waiting = asyncio.create_task(collect(backend, await prepared(backend, SENTENCES[1], rid="r1")))
    await wait_until(lambda: backend.queue_depth == 1)
    await asyncio.sleep(0.1)  # r1 has now waited over 50 ms for its first call
    with pytest.raises(Overloaded) as info:
        await prepared(backend, SENTENCES[2], rid="r2")
    assert info.value.status == 503 and info.value.retryable and "wait" in str(info.value)
    synth.gate.set()
    await asyncio.gather(running, waiting)
    extra = await prepared(backend, SENTENCES[2], rid="r2")
    assert len(await collect(backend, extra)) == len(extra.segments)
    assert backend.table_sizes()["first_audio_waits"] == 0


async def test_cancelled_requests_queued_segments_are_never_synthesised(make_backend):
    synth, recorder = batch_fake(), Recorder()
    synth.gate = threading.Event()
    backend = make_backend(synth, observer=recorder)
    running = await prepared(backend, " ".join(SENTENCES), session="a")
    queued = await prepared(backend, "Never say this. Nor this one.", session="b")
    running_task = asyncio.create_task(collect(backend, running))
    await asyncio.to_thread(synth.started.wait, 5)  # a's first segment is in the runtime
    queued_task = asyncio.create_task(collect(backend, queued))
    await wait_until(lambda: backend.queue_depth == 1)
    queued_task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued_task
    assert backend.queue_depth == 0 and recorder.depths[-1] == 0
    running_task.cancel()  # a's first segment is running: it finishes, the rest never start
    with pytest.raises(asyncio.CancelledError):
        await running_task
    synth.gate.set()
    after = await drained(backend)
    assert synth.calls == [running.segments[0].text, *after]


async def test_closing_the_stream_early_drops_the_rest(make_backend):
    synth = batch_fake()
    backend = make_backend(synth, max_ahead=1)
    request = await prepared(backend, LONG_TEXT)
    stream = backend.stream(request)
    assert (await anext(stream)).index == 0
    await stream.aclose()
    after = await drained(backend)
    said = synth.calls[: len(synth.calls) - len(after)]
    assert said in ([s.text for s in request.segments[:n]] for n in (1, 2))  # at most one segment ran ahead
    assert len(" ".join(said)) < len(LONG_TEXT) / 3  # the rest of the text was never spoken


async def test_one_failing_segment_fails_only_its_request(make_backend):
    synth, recorder = batch_fake(fail_on="Broken"), Recorder()
    synth.gate = threading.Event()
    # batch all four whatever their lengths
    backend = make_backend(synth, max_batch_size=8, max_wait_ms=20, observer=recorder, batch_length_ratio=1e9)
    blocker = asyncio.create_task(collect(backend, await prepared(backend, "Hold the line.", session="z")))
    await asyncio.to_thread(synth.started.wait, 5)
    bad = await prepared(backend, "Broken glass everywhere.", session="bad", rid="bad")
    good = [await prepared(backend, SENTENCES[i], session=f"g{i}") for i in range(3)]
    tasks = {name: asyncio.create_task(collect(backend, req)) for name, req in [("bad", bad), *enumerate(good)]}
    await wait_until(lambda: backend.queue_depth == 4)
    synth.gate.set()  # the four queued first segments go as one batch, which fails, then singly
    with pytest.raises(BackendFault) as info:
        await tasks.pop("bad")
    assert info.value.code == "backend_error"
    for i, task in tasks.items():
        assert len(await task) == len(good[i].segments)
    await blocker
    assert any(len(call) == 4 for call in synth.batches)  # the failed batch, retried one by one
    again = await prepared(backend, "Fine this time.", session="bad")
    assert len(await collect(backend, again)) == 1  # the session is still served


async def test_request_timeout_when_the_runtime_hangs(make_backend):
    synth = batch_fake()
    synth.gate = threading.Event()
    backend = make_backend(synth, request_timeout_s=0.2)
    with pytest.raises(SynthesisTimeout):
        await collect(backend, await prepared(backend, SENTENCES[1]))
    assert backend.active_requests == 0 and backend.queue_depth == 0
    synth.gate.set()
    last = await prepared(backend, SENTENCES[2])
    assert len(await collect(backend, last)) == len(last.segments)


async def test_aclose_fails_open_streams_and_refuses_new_ones(pipeline, voices):
    synth = batch_fake()
    synth.gate = threading.Event()
    backend = ConcurrentBackend(synth, pipeline, voices)
    synth.gate.set()
    await backend.start()
    await backend.check_health()
    synth.gate.clear()
    requests = [await prepared(backend, SENTENCES[i], session=f"s{i}") for i in range(3)]
    tasks = [asyncio.create_task(collect(backend, r)) for r in requests]
    await wait_until(lambda: backend.active_requests == 3)
    await backend.aclose()
    with pytest.raises(NotReady):
        await backend.check_health()
    synth.gate.set()
    for task in tasks:
        with pytest.raises(NotReady):
            await task
    with pytest.raises(NotReady):
        await collect(backend, requests[0])
    assert backend.queue_depth == 0


# -- the real ONNX runtime ----------------------------------------------------------------------
async def test_onnx_sessions_answered_in_order_with_real_audio(make_backend, onnx_synth):
    synth, recorder = LoadedRuntime(onnx_synth), Recorder()
    backend = make_backend(synth, observer=recorder)
    assert backend.workers == min(2, os.cpu_count() or 1) and not backend.batched  # thread-safe: parallel calls
    texts = ["Hello there.", "Good morning, everyone.", "See you soon.", "Thanks a lot."]

    async def session(i: int):
        req = await prepared(backend, texts[i], session=f"s{i}")
        return req, await collect(backend, req)

    answered = await asyncio.gather(*(session(i) for i in range(4)))
    asked = [segment.text for req, _ in answered for segment in req.segments]
    assert sorted(synth.calls) == sorted(asked)  # nothing lost, nothing twice
    for req, chunks in answered:
        assert [c.index for c in chunks] == list(range(len(req.segments)))
        assert all(c.seconds > 0.3 for c in chunks)
    req, chunks = answered[1]  # the chunk is the audio of its own segment, not a neighbour's
    last = req.segments[-1]
    reference = shape(await asyncio.to_thread(onnx_synth.synthesize, last), None, pause_for(last.ends))[0]
    assert len(chunks[-1].audio) == len(reference)
    assert np.corrcoef(chunks[-1].audio, reference)[0, 1] > 0.99
    assert len(recorder.segments) == len(asked) and backend.active_requests == 0


async def test_onnx_cancelled_request_never_synthesised(make_backend, onnx_synth):
    synth = LoadedRuntime(onnx_synth)
    backend = make_backend(synth, workers=1)
    first = await prepared(backend, "The first request.", session="a")
    doomed = await prepared(backend, "This should never be spoken.", session="b")
    first_task = asyncio.create_task(collect(backend, first))
    await wait_until(lambda: len(synth.calls) == 1)
    doomed_task = asyncio.create_task(collect(backend, doomed))
    await wait_until(lambda: backend.queue_depth == 1)
    doomed_task.cancel()
    await asyncio.gather(doomed_task, return_exceptions=True)
    assert len(await first_task) == len(first.segments)
    assert doomed.segments[0].text not in synth.calls


# -- the torch runtime's real batch path ---------------------------------------------------------
@pytest.mark.slow
async def test_torch_batches_under_load(make_backend, torch_synth):
    synth = LoadedRuntime(torch_synth)  # the run's torch runtime, its batch path as it declares it
    recorder = Recorder()
    backend = make_backend(synth, max_batch_size=4, max_wait_ms=20, observer=recorder, batch_on_cpu=True)
    await backend.start()
    recorder.batches.clear()
    replies = ["Yes.", "No, thanks.", "Maybe later.", "Sounds good."]

    async def session(i: int):
        req = await prepared(backend, replies[i], session=f"s{i}")
        return req, await collect(backend, req)

    for req, chunks in await asyncio.gather(*(session(i) for i in range(4))):
        assert [c.index for c in chunks] == list(range(len(req.segments)))
        assert all(c.seconds > 0.2 for c in chunks)
    assert np.mean(recorder.batches) > 1


async def test_the_shipped_fake_takes_the_scheduler_path_onnx_takes(make_backend, onnx_synth):
    """A load rehearsal on ``KOKORO_BACKEND=fake`` exercises production's scheduler: the fake
    declares what ONNX declares (word timings and windowed decoding aside: they change what a segment
    holds, not how it is scheduled), so the concurrent mode treats both alike."""
    fake, onnx = FakeSynthesizer(), LoadedRuntime(onnx_synth)
    aside = {"timed": False, "windowed": False}
    assert dataclasses.replace(fake.capabilities, **aside) == dataclasses.replace(onnx.capabilities, **aside)
    on_fake, on_onnx = make_backend(fake), make_backend(onnx)
    for what in ("workers", "batched", "interrupts"):
        assert getattr(on_fake, what) == getattr(on_onnx, what), what
    assert on_fake.workers == min(2, os.cpu_count() or 1) and not on_fake.batched and on_fake.interrupts
