"""The single per-segment step both scheduling modes share: segments in, clipped and shaped audio
out, one runtime call's worth at a time (docs/runtimes.md).

:class:`SegmentStep` is what :meth:`~backends.engine.core.Engine.run_segments` runs. The engine owns
one and passes in what it needs: the synthesizer, the backend's config, the policy's
:class:`~backends.engine.cost.CostModel` (each call's measured cost), the observer, the clock, and
callables for whether the mode batches and how a single call runs (the modes decide both).

The step, for a list of segments:

* the batch path when the mode batches and there is more than one segment:
  ``synthesize_batch_timed`` when the runtime is ``timed``, else ``synthesize_batch``; if that call
  fails, returns the wrong count or an empty item, each segment is retried alone, so one bad
  segment fails only its own request;
* alone: ``synthesize_timed`` when the runtime is ``timed`` (torch; ONNX with a timed model), else
  ``synthesize`` (``solo=True``, every core, when the mode says the call runs alone and the runtime
  has ``solo_calls``);
* every output clipped to [-1, 1] (:func:`~backends.api.clip_audio`); empty audio is a
  :class:`~backends.api.BackendFault` (a segment with phonemes always has sound);
* every output's ends shaped (``join_pauses``, :mod:`backends.engine.joins`): the model's padding
  trimmed, the pause a reading of the whole text makes at the segment's end put back, the
  runtime's durations shifted with the audio, so word timings follow the audio that is sent;
* the observer hears of every runtime call (``batch_done``, size 1 for a single call) and of every
  segment (``segment_done`` with its share of the call's time).

Threading: :meth:`SegmentStep.run` runs on a worker thread (never the event loop) and never raises:
each :class:`SegmentResult` holds audio or the error for its segment. Every runtime call in it is
registered in a table of running calls, so :meth:`SegmentStep.stuck_seconds` (the engine's
watchdog) sees one call that has run longer than the request timeout.

Cancellation: ``run`` takes an optional ``skip(i)`` that it asks before each single call, so
segments of a request dropped while a failed batch is being retried are never synthesised, and an
optional :class:`~backends.api.Interrupt` that an ``interruptible`` runtime stops its call for (the
segment's result is then :class:`~backends.api.Interrupted`, and the mode queues it again).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.api import (
    BackendFault,
    BackendObserver,
    Interrupt,
    Interrupted,
    NotReady,
    Segment,
    Synthesizer,
    clip_audio,
)
from backends.config import BackendConfig
from backends.engine.cost import CallKind, CostModel, input_tokens
from backends.engine.joins import shape_segment

log = logging.getLogger("kokoro.backend")


@dataclass(slots=True)
class SegmentResult:
    """One segment's outcome: audio (clipped) and the runtime's frame durations, or an error.

    ``seconds`` is the wall time of the runtime call that produced it (for a batch, the whole
    call: what the segment waited for)."""

    audio: np.ndarray | None = None
    durations: np.ndarray | None = None
    seconds: float = 0.0
    error: BaseException | None = None


class SegmentStep:
    """Turns segments into audio on a worker thread (see the module docstring).

    ``batched()`` says whether the mode sends several segments as one runtime call;
    ``call_kind(solo)`` how a single call runs (alone or beside others), the cost model's kind.
    """

    def __init__(
        self,
        synthesizer: Synthesizer,
        config: BackendConfig,
        cost: CostModel,
        observer: BackendObserver,
        clock: Callable[[], float],
        *,
        batched: Callable[[], bool],
        call_kind: Callable[[bool], CallKind],
    ):
        self.synthesizer = synthesizer
        self.config = config
        self.cost = cost
        self.clock = clock
        self._observer = observer
        self._batched = batched
        self._call_kind = call_kind
        self._calls: dict[int, float] = {}  # worker thread -> when its runtime call began

    @property
    def running_calls(self) -> int:
        """Runtime calls in progress (an entry per worker thread in a call)."""
        return len(self._calls)

    def stuck_seconds(self) -> float | None:
        """How long the oldest runtime call has run, when that is longer than the request timeout
        (a hung runtime fails every request by timeout; /ping must then stop saying healthy)."""
        started = list(self._calls.values())  # a C-level copy: safe against worker threads
        timeout = self.config.request_timeout_s
        if not started or not timeout:
            return None
        age = time.monotonic() - min(started)
        return age if age > timeout else None

    def run(
        self, segments: Sequence[Segment], skip: Callable[[int], bool] | None = None, *, solo: bool = False,
        interrupt: Interrupt | None = None,
    ) -> list[SegmentResult]:
        """Synthesise ``segments`` (worker thread; never raises): one batch call when the mode
        batches, else (or when the batch fails) one call per segment. ``skip(i)`` is asked before
        each single call; a skipped segment gets a :class:`NotReady` error. ``solo``: the call runs
        alone, so a runtime with ``solo_calls`` gives it every core. ``interrupt`` (single calls of
        an ``interruptible`` runtime): set, it stops the call (:class:`Interrupted`)."""
        if self._batched() and len(segments) > 1:
            results = self._run_batch(segments)
            if results is not None:
                return results
        return [
            SegmentResult(error=NotReady("request cancelled")) if skip is not None and skip(i)
            else self._run_one(seg, solo, interrupt)
            for i, seg in enumerate(segments)
        ]

    def _run_batch(self, segments: Sequence[Segment]) -> list[SegmentResult] | None:
        """One batch call; None when it failed in any way (the caller retries one by one)."""
        t0 = self.clock()
        timed = self.synthesizer.capabilities.timed
        try:
            outs: Sequence[Any]
            if timed:
                outs = self._call(self.synthesizer.synthesize_batch_timed, list(segments))
            else:
                outs = self._call(self.synthesizer.synthesize_batch, list(segments))
            if len(outs) != len(segments):
                raise BackendFault(f"the batch call returned {len(outs)} outputs for {len(segments)} segments")
            pairs = [self._joined(s, clip_audio(o[0]), o[1]) if timed else self._joined(s, clip_audio(o), None)
                     for s, o in zip(segments, outs, strict=True)]
            if any(audio.size == 0 for audio, _ in pairs):  # retried one by one: only that segment fails
                raise BackendFault("the runtime produced no audio for a segment")
        except Exception as e:
            log.warning("batch of %d failed (%r); retrying its segments one by one", len(segments), e)
            return None
        elapsed = self.clock() - t0
        self.cost.measured("batch", elapsed, sum(input_tokens(s) for s in segments), len(segments))
        self._observer.batch_done(len(segments))
        for audio, _ in pairs:  # each segment's share of the runtime's time
            self._observer.segment_done(elapsed / len(segments), len(audio) / self.synthesizer.sample_rate)
        return [SegmentResult(audio, durations, elapsed) for audio, durations in pairs]

    def _run_one(self, segment: Segment, solo: bool = False, interrupt: Interrupt | None = None) -> SegmentResult:
        t0 = self.clock()
        caps = self.synthesizer.capabilities
        options = {"solo": solo and caps.solo_calls, "interrupt": interrupt if caps.interruptible else None}
        try:
            durations = None
            if caps.timed:  # per-token frame durations come from the same run, at no extra cost
                audio, durations = self._call(self.synthesizer.synthesize_timed, segment, **options)
            else:
                audio = self._call(self.synthesizer.synthesize, segment, **options)
            audio = clip_audio(audio)
            if audio.size == 0:  # a segment with phonemes always has sound: never pass silence as success
                raise BackendFault(f"the runtime produced no audio for segment {segment.index}")
            audio, durations = self._joined(segment, audio, durations)
        except Exception as e:
            if isinstance(e, Interrupted):
                self._observer.interrupted(self.clock() - t0)
            return SegmentResult(seconds=self.clock() - t0, error=e)
        elapsed = self.clock() - t0
        self.cost.measured(self._call_kind(solo and caps.solo_calls), elapsed, input_tokens(segment),
                           windowed=segment.sentence is not None)
        self._observer.batch_done(1)
        self._observer.segment_done(elapsed, len(audio) / self.synthesizer.sample_rate)
        return SegmentResult(audio, durations, elapsed)

    def _joined(
        self, segment: Segment, audio: np.ndarray, durations: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The one place a segment's ends are shaped (:mod:`backends.engine.joins`): padding trimmed, the
        reading's pause after it, its durations shifted with the audio."""
        if not self.config.join_pauses:
            return audio, durations
        return shape_segment(segment, audio, durations)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One runtime call, where :meth:`stuck_seconds` can see it."""
        with self._watch():
            return fn(*args, **kwargs)

    @contextlib.contextmanager
    def _watch(self) -> Iterator[None]:
        key = threading.get_ident()
        self._calls[key] = time.monotonic()
        try:
            yield
        finally:
            self._calls.pop(key, None)
