"""Playback deadlines in both modes, through the real backends and the fake runtime.

The tests of order run in virtual time (:class:`~tests.support.virtual_time.VirtualClock`: the
engine's clock stands still until the test advances it) over a held fake runtime (every call
waits until the test lets it finish), and wait for states (calls begun, segments queued), never
for a time, so which segment the scheduler picks next is observed exactly, however busy the
machine is.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import numpy as np
import pytest

from backends.api import Interrupt, Interrupted, SynthesisRequest
from backends.config import BackendConfig
from backends.engine.concurrent import ConcurrentBackend
from backends.engine.sequential import SequentialBackend
from backends.runtimes.fake import FakeSynthesizer
from benchmarks import prom
from server.metrics import Metrics
from tests.support.observer import Recorder
from tests.support.virtual_time import VirtualClock

LONG = "Here is the long answer you asked for. It goes on for a while. And then it goes on some more."
NEWCOMER = "Hello there."
OTHER = "Another listener asks. And waits for the rest."


def stepped(voices) -> FakeSynthesizer:
    """The fake runtime, one call finishing per ``step()``; ``calls`` lists the texts in the
    order the calls began. Its calls cannot be interrupted."""
    return FakeSynthesizer(voices, segment_s=0.0, held=True, interruptible=False)


def keyed(voices, timed: bool = False) -> FakeSynthesizer:
    """The fake runtime where the test says which running call finishes (``finish(text)``); its
    calls can be interrupted, as an ONNX Runtime call can (``interrupted`` lists their texts);
    ``timed``: it reports durations, as the torch runtime does (the engine's timed path)."""
    return FakeSynthesizer(voices, segment_s=0.0, held=True, timed=timed)


MODES = {
    "sequential": (SequentialBackend, {}),
    "concurrent": (ConcurrentBackend, {"workers": 1, "max_batch_size": 1, "max_wait_ms": 0}),
}


async def _until(predicate, what: str = "condition") -> None:
    """Wait for a state (polled on the event loop; a time limit only against a hang)."""
    end = time.monotonic() + 30
    while not predicate():
        assert time.monotonic() < end, f"{what} not reached"
        await asyncio.sleep(0.002)


async def _calls_reach(synth, n: int) -> None:
    await _until(lambda: len(synth.calls) >= n, f"{n} calls")


def _request(clock: VirtualClock, text: str, name: str) -> SynthesisRequest:
    return SynthesisRequest(text=text, session=name, request_id=name, voice="jm_kumo", created=clock())


async def _consume(backend, request) -> list:
    return [chunk async for chunk in backend.stream(request)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("deadlines", [True, False])
async def test_a_newcomers_first_segment_runs_before_a_later_segment_with_slack(mode, deadlines, pipeline, voices):
    cls, extra = MODES[mode]
    synth, clock = stepped(voices), VirtualClock()
    backend = cls(synth, pipeline, voices, BackendConfig.defaults(deadlines=deadlines, **extra), clock=clock)
    prepared = {}
    for name, text in (("long", LONG), ("other", OTHER), ("new", NEWCOMER)):
        prepared[name] = await backend.prepare(_request(clock, text, name))
    tasks = [asyncio.create_task(_consume(backend, prepared["long"]))]
    await _calls_reach(synth, 1)  # the long text's first segment is running
    tasks.append(asyncio.create_task(_consume(backend, prepared["other"])))
    await _until(lambda: backend.queue_depth == 1)  # the other listener's first segment is queued
    synth.step()  # the long text's first segment is done: its second is runnable, with seconds of slack
    await _calls_reach(synth, 2)  # the other listener's first segment is running
    tasks.append(asyncio.create_task(_consume(backend, prepared["new"])))
    await _until(lambda: backend.queue_depth == 2)  # the newcomer's first segment is queued beside the long text's second
    synth.step()
    await _calls_reach(synth, 3)
    third = synth.calls[2]
    total = sum(len(r.segments) for r in prepared.values())
    for _ in range(total):
        synth.step()
    answered = await asyncio.gather(*tasks)
    await backend.aclose()
    if deadlines:
        assert third == prepared["new"].segments[0].text  # earliest deadline first
    else:
        assert third == prepared["long"].segments[1].text  # the order segments became runnable
    for request, chunks in zip(prepared.values(), answered, strict=True):  # nothing lost, in order
        assert [c.index for c in chunks] == list(range(len(request.segments)))


@pytest.mark.parametrize("mode", MODES)
async def test_a_runtime_slower_than_playback_shows_as_underrun_seconds(mode, pipeline, voices):
    cls, extra = MODES[mode]
    synth = FakeSynthesizer(voices, segment_s=0.6)  # each call outlasts the audio of a short segment
    metrics = Metrics()
    backend = cls(synth, pipeline, voices, BackendConfig.defaults(**extra), observer=metrics)
    request = await backend.prepare(SynthesisRequest(text="Go. Go on. Go on now.", voice="jm_kumo"))
    assert len(await request.plan.whole()) >= 2
    t0 = time.perf_counter()
    chunks = await _consume(backend, request)
    elapsed = time.perf_counter() - t0
    await backend.aclose()
    heard = chunks[0].seconds  # the listener's first audio is shorter than the next call takes
    assert heard < 0.6
    underrun = prom.parse(metrics.render().decode())[("kokoro_playback_underrun_seconds_total", ())]
    assert 0 < underrun <= elapsed


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="parallel calls need two cores")
async def test_concurrent_mode_gives_a_lone_call_every_core_and_parallel_calls_their_share(pipeline, voices):
    synth = FakeSynthesizer(voices, segment_s=0.05)
    backend = ConcurrentBackend(synth, pipeline, voices, BackendConfig.defaults(workers=2))
    await backend.start()
    assert synth.threads == (os.cpu_count() or 1) // backend.workers and synth.solo_threads == os.cpu_count()
    alone = await backend.prepare(SynthesisRequest(text=LONG, voice="jm_kumo"))
    synth.calls.clear()
    synth.solo.clear()  # (the warm-up ran alone too)
    await _consume(backend, alone)
    assert synth.solo == [s.text for s in alone.segments]  # one listener: every call had every core
    synth.solo.clear()
    synth.calls.clear()
    together = [await backend.prepare(SynthesisRequest(text=LONG, session=f"s{i}", voice="jm_kumo")) for i in range(3)]
    await asyncio.gather(*(_consume(backend, r) for r in together))
    assert len(synth.solo) < len(synth.calls)  # with others runnable, calls ran side by side
    await backend.aclose()
    off = FakeSynthesizer(voices, segment_s=0.05)
    await ConcurrentBackend(off, pipeline, voices, BackendConfig.defaults(workers=2, solo_calls=False)).start()
    assert off.solo_threads is None


def test_the_onnx_solo_session_speaks_like_the_shared_one(model_files, voices, pipeline):
    from backends.runtimes.onnx import OnnxSynthesizer

    synth = OnnxSynthesizer(model_files, voices)
    synth.set_threads(1, solo=2)
    synth.load()
    segment = pipeline.plan("Every core for one call.", voice="jm_kumo")[0]
    shared, solo = synth.synthesize(segment), synth.synthesize(segment, solo=True)
    assert len(shared) == len(solo) and np.allclose(shared, solo, atol=1e-3)


def test_an_interrupted_onnx_call_stops_and_the_session_speaks_on(model_files, voices, pipeline):
    from backends.runtimes.onnx import OnnxSynthesizer

    synth = OnnxSynthesizer(model_files, voices, threads=1)
    synth.load()
    long_segment = pipeline.plan(LONG.replace(".", ","), voice="jm_kumo", fast_first=False)[0]
    interrupt = Interrupt()
    threading.Timer(0.05, interrupt.set).start()
    with pytest.raises(Interrupted):  # a call of seconds, stopped in its first moments
        synth.synthesize(long_segment, interrupt=interrupt)
    short = pipeline.plan("Still speaking.", voice="jm_kumo")[0]
    unset = synth.synthesize(short, interrupt=Interrupt())  # an interrupt never set changes nothing
    assert len(unset) > 0 and np.allclose(unset, synth.synthesize(short), atol=1e-3)


PARAGRAPH_START = "When you ask a voice assistant a question, the silence before it answers is what you notice most."


@pytest.mark.parametrize("mode", MODES)
async def test_busy_a_newcomer_gets_a_shorter_first_segment_while_another_session_is_served(mode, pipeline, voices):
    cls, extra = MODES[mode]
    synth = stepped(voices)
    backend = cls(synth, pipeline, voices, BackendConfig.defaults(short_first_segment="busy", **extra))

    def request(session: str) -> SynthesisRequest:
        return SynthesisRequest(text=PARAGRAPH_START, session=session, request_id=f"{session}-{time.perf_counter()}",
                                voice="jm_kumo")

    alone = await backend.prepare(request("a"))
    assert alone.segments[0].text == "When you ask a voice assistant a question,"  # idle: the clause cut
    task = asyncio.create_task(_consume(backend, alone))
    await _calls_reach(synth, 1)  # session a is being served
    newcomer = await backend.prepare(request("b"))
    own_next = await backend.prepare(request("a"))  # a's next sentence plays after its first: no hurry
    await newcomer.plan.whole()
    assert [s.text for s in newcomer.segments[:2]] == ["When you ask", "a voice assistant a question,"]
    assert own_next.segments[0].text == alone.segments[0].text
    assert " ".join(s.text for s in newcomer.segments) == PARAGRAPH_START  # nothing lost
    for _ in await alone.plan.whole():
        synth.step()
    await task
    after = await backend.prepare(request("c"))  # idle again
    assert after.segments[0].text == alone.segments[0].text
    await backend.aclose()


async def test_always_a_listener_who_hears_nothing_gets_a_short_first_segment_and_one_who_does_not(pipeline, voices):
    synth = FakeSynthesizer(voices, segment_s=0.0)  # the fake's audio: 75 ms per phoneme, seconds of it here
    backend = SequentialBackend(synth, pipeline, voices, BackendConfig.defaults(short_first_segment="always"))
    first = await backend.prepare(SynthesisRequest(text=PARAGRAPH_START, session="a", voice="jm_kumo"))
    assert first.segments[0].text == "When you ask"  # a silent listener: first audio soonest
    await _consume(backend, first)  # synthesised at once; its audio now plays for seconds
    following = await backend.prepare(SynthesisRequest(text=PARAGRAPH_START, session="a", voice="jm_kumo"))
    assert following.segments[0].text == "When you ask a voice assistant a question,"  # plays after: the usual cut
    other = await backend.prepare(SynthesisRequest(text=PARAGRAPH_START, session="b", voice="jm_kumo"))
    assert other.segments[0].text == "When you ask"
    await backend.aclose()


async def test_with_deadlines_off_load_does_not_change_the_first_cut(pipeline, voices):
    synth = stepped(voices)
    backend = SequentialBackend(synth, pipeline, voices, BackendConfig.defaults(deadlines=False))
    first = await backend.prepare(SynthesisRequest(text=PARAGRAPH_START, session="a", voice="jm_kumo"))
    task = asyncio.create_task(_consume(backend, first))
    await _calls_reach(synth, 1)
    newcomer = await backend.prepare(SynthesisRequest(text=PARAGRAPH_START, session="b", voice="jm_kumo"))
    assert newcomer.segments[0].text == first.segments[0].text
    for _ in first.segments:
        synth.step()
    await task
    await backend.aclose()


@pytest.mark.parametrize("deadlines", [True, False])
async def test_concurrent_mode_keeps_a_worker_for_a_newcomer_while_later_segments_have_slack(deadlines, pipeline,
                                                                                              voices):
    synth, clock = keyed(voices), VirtualClock()
    config = BackendConfig.defaults(deadlines=deadlines, workers=2, max_batch_size=1, max_wait_ms=0)
    backend = ConcurrentBackend(synth, pipeline, voices, config, clock=clock)
    prepared = {}
    for name, text in (("long", LONG), ("other", OTHER), ("new", NEWCOMER)):
        prepared[name] = await backend.prepare(_request(clock, text, name))
    long_, other, new = (prepared[k].segments for k in ("long", "other", "new"))
    tasks = [asyncio.create_task(_consume(backend, prepared["long"]))]
    await _calls_reach(synth, 1)
    tasks.append(asyncio.create_task(_consume(backend, prepared["other"])))
    await _calls_reach(synth, 2)  # both workers busy: the long text's first segment and the other's
    synth.finish(long_[0].text)  # its second segment is runnable, with seconds of audio still to play
    if deadlines:  # held: queued, with a worker free, until its start-by time (seconds away, in virtual time)
        await _until(lambda: backend.queue_depth == 1 and len(synth.calls) == 2)
    else:  # round-robin: the free worker takes it
        await _calls_reach(synth, 3)
    tasks.append(asyncio.create_task(_consume(backend, prepared["new"])))
    await _calls_reach(synth, 3)
    if deadlines:  # the free worker waited for the newcomer, who did not wait for the long text
        assert synth.calls[2] == new[0].text
    else:  # round-robin: the free worker took the long text's second segment at once
        assert synth.calls[2] == long_[1].text
    for segment in (*long_, *other, *new):
        synth.finish(segment.text)
    answered = await asyncio.gather(*tasks)
    await backend.aclose()
    for request, chunks in zip(prepared.values(), answered, strict=True):  # nothing lost, in order
        assert [c.index for c in chunks] == list(range(len(request.segments)))


@pytest.mark.parametrize(("when", "first"), [("always", "When you ask"), ("never", None), ("busy", None)])
async def test_short_first_segment_setting_when_idle(when, first, pipeline, voices):
    backend = SequentialBackend(stepped(voices), pipeline, voices, BackendConfig.defaults(short_first_segment=when))
    planned = await backend.prepare(SynthesisRequest(text=PARAGRAPH_START, voice="jm_kumo"))
    assert planned.segments[0].text == (first or "When you ask a voice assistant a question,")
    await backend.aclose()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("interrupts", "timed"), [(True, False), (True, True), (False, False)])
async def test_a_newcomer_interrupts_a_running_later_segment_which_runs_again_after_it(mode, interrupts, timed,
                                                                                      pipeline, voices):
    cls, extra = MODES[mode]
    synth, recorder, clock = keyed(voices, timed), Recorder(), VirtualClock()
    config = BackendConfig.defaults(interrupt_for_first_audio=interrupts, **extra)
    backend = cls(synth, pipeline, voices, config, observer=recorder, clock=clock)
    prepared = {k: await backend.prepare(_request(clock, t, k))
                for k, t in (("long", LONG), ("new", NEWCOMER), ("other", OTHER))}
    long_, new, other = (prepared[k].segments for k in ("long", "new", "other"))
    tasks = [asyncio.create_task(_consume(backend, prepared["long"]))]
    await _calls_reach(synth, 1)
    clock.advance(1.0)  # the call takes a second: the engine measures what a call costs
    synth.finish(long_[0].text)
    await _calls_reach(synth, 2)  # the long text's second segment runs; its listener hears the first
    tasks.append(asyncio.create_task(_consume(backend, prepared["new"])))
    if interrupts:
        await _calls_reach(synth, 3)
        assert synth.calls[2] == new[0].text
    else:  # the newcomer's segment is queued (the choice not to interrupt is made as it is queued)
        await _until(lambda: backend.queue_depth == 1)
        assert synth.calls == [long_[0].text, long_[1].text]  # the newcomer waits for the running call
    tasks.append(asyncio.create_task(_consume(backend, prepared["other"])))  # a silent listener's first
    await _until(lambda: backend.queue_depth == 2)  # segment never interrupts another's
    for segment in (*long_, *new, *other):
        synth.finish(segment.text)
    answered = await asyncio.gather(*tasks)
    await backend.aclose()
    if interrupts:  # the newcomer went first; the interrupted segment ran again, whole
        assert synth.interrupted == [long_[1].text] and synth.calls.count(long_[1].text) == 2
        assert len(recorder.interruptions) == 1
    else:
        assert synth.interrupted == [] and recorder.interruptions == []
    for request, chunks in zip(prepared.values(), answered, strict=True):  # nothing lost, in order
        assert [c.index for c in chunks] == list(range(len(request.segments)))
        assert all(c.seconds > 0 for c in chunks)
        assert all((c.durations is not None) is timed for c in chunks)


@pytest.mark.parametrize("mode", MODES)
async def test_a_request_closed_while_its_segment_runs_stops_that_call_and_the_next_runs_at_once(mode, pipeline,
                                                                                                 voices):
    """A client's cancel or a voice agent's Clear: the running call of the closed request is
    interrupted (nobody waits for it) and not run again, so the next request does not wait for it."""
    cls, extra = MODES[mode]
    synth, clock = keyed(voices), VirtualClock()
    backend = cls(synth, pipeline, voices, BackendConfig.defaults(**extra), observer=Recorder(), clock=clock)
    cut = await backend.prepare(_request(clock, LONG, "cut"))
    after = await backend.prepare(_request(clock, NEWCOMER, "after"))
    stream = backend.stream(cut)
    task = asyncio.create_task(anext(stream))
    await _calls_reach(synth, 1)  # the closed request's first call is running, held
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await stream.aclose()
    await _until(lambda: synth.interrupted == [cut.segments[0].text], "the call interrupted")
    answer = asyncio.create_task(_consume(backend, after))
    await _calls_reach(synth, 2)
    for segment in after.segments:
        synth.finish(segment.text)
    chunks = await answer
    await backend.aclose()
    assert synth.calls == [cut.segments[0].text, *(s.text for s in after.segments)]  # not run again
    assert [c.index for c in chunks] == list(range(len(after.segments)))
