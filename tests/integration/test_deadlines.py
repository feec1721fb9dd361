"""Playback deadlines in both modes, through the real backends and the fake runtime.

The runtime here is stepped: every call blocks until the test lets one call finish, so which
segment the scheduler picks next is observed exactly, without timing.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import numpy as np
import pytest

from backends.base import SynthesisRequest
from backends.concurrent import BatchedBackend
from backends.config import BackendConfig
from backends.fake import FakeSynthesizer
from backends.sequential import SequentialBackend
from benchmarks import prom
from server.metrics import Metrics

LONG = "Here is the long answer you asked for. It goes on for a while. And then it goes on some more."
NEWCOMER = "Hello there."
OTHER = "Another listener asks. And waits for the rest."


class SteppedSynth(FakeSynthesizer):
    """The fake runtime, one call finishing per :meth:`step`; ``calls`` lists the texts in the
    order the calls began."""

    def __init__(self, voices):
        super().__init__(voices, segment_s=0.0)
        self._steps = threading.Semaphore(0)

    def synthesize(self, segment):
        with self._lock:
            self.calls.append(segment.text)
        self.started.set()
        if not self._steps.acquire(timeout=30):
            raise RuntimeError("the test never let this call finish")
        return self.tone(segment)

    def step(self) -> None:
        self._steps.release()


MODES = {
    "sequential": (SequentialBackend, {}),
    "concurrent": (BatchedBackend, {"workers": 1, "max_batch_size": 1, "max_wait_ms": 0}),
}


async def _calls_reach(synth, n: int) -> None:
    end = time.monotonic() + 10
    while len(synth.calls) < n:
        assert time.monotonic() < end, f"only {len(synth.calls)} calls began"
        await asyncio.sleep(0.002)


async def _consume(backend, request) -> list:
    return [chunk async for chunk in backend.stream(request)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("deadlines", [True, False])
async def test_a_newcomers_first_segment_runs_before_a_later_segment_with_slack(mode, deadlines, pipeline, voices):
    cls, extra = MODES[mode]
    synth = SteppedSynth(voices)
    backend = cls(synth, pipeline, voices, BackendConfig.defaults(deadlines=deadlines, **extra))
    prepared = {}
    for name, text in (("long", LONG), ("other", OTHER), ("new", NEWCOMER)):
        prepared[name] = await backend.prepare(SynthesisRequest(text=text, session=name, request_id=name, voice="jm_kumo"))
    tasks = [asyncio.create_task(_consume(backend, prepared["long"]))]
    await _calls_reach(synth, 1)  # the long text's first segment is running
    tasks.append(asyncio.create_task(_consume(backend, prepared["other"])))
    await asyncio.sleep(0.05)  # the other listener's first segment is queued
    synth.step()  # the long text's first segment is done: its second is runnable, with seconds of slack
    await _calls_reach(synth, 2)  # the other listener's first segment is running
    tasks.append(asyncio.create_task(_consume(backend, prepared["new"])))
    await asyncio.sleep(0.05)  # the newcomer's first segment is queued behind the long text's second
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
    assert len(request.segments) >= 2
    t0 = time.perf_counter()
    chunks = await _consume(backend, request)
    elapsed = time.perf_counter() - t0
    await backend.aclose()
    heard = chunks[0].seconds  # the listener's first audio is shorter than the next call takes
    assert heard < 0.6
    underrun = prom.parse(metrics.render().decode())[("kokoro_playback_underrun_seconds_total", ())]
    assert 0 < underrun <= elapsed


class SoloFake(FakeSynthesizer):
    """The fake runtime with a solo path, as the ONNX runtime has (a second session, every core)."""

    def __init__(self, voices):
        super().__init__(voices, segment_s=0.05)
        self.threads = None
        self.solo_threads: int | None = None
        self.solo: list[str] = []

    def synthesize_solo(self, segment):
        with self._lock:
            self.solo.append(segment.text)
        return self.synthesize(segment)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="parallel calls need two cores")
async def test_concurrent_mode_gives_a_lone_call_every_core_and_parallel_calls_their_share(pipeline, voices):
    synth = SoloFake(voices)
    backend = BatchedBackend(synth, pipeline, voices, BackendConfig.defaults(workers=2))  # (the fake batches)
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
    off = SoloFake(voices)
    await BatchedBackend(off, pipeline, voices, BackendConfig.defaults(workers=2, solo_calls=False)).start()
    assert off.solo_threads is None


def test_the_onnx_solo_session_speaks_like_the_shared_one(model_files, voices, pipeline):
    from backends.onnx_runtime import OnnxSynthesizer

    synth = OnnxSynthesizer(model_files, voices, threads=1)
    synth.solo_threads = 2
    synth.load()
    segment = pipeline.plan("Every core for one call.", voice="jm_kumo")[0]
    shared, solo = synth.synthesize(segment), synth.synthesize_solo(segment)
    assert len(shared) == len(solo) and np.allclose(shared, solo, atol=1e-3)
