"""The engine's playback-deadline side, shared by both modes: each request's playback clock, each
session's listener, short first segments, the cost of a call, and interrupting a running call for a
listener who hears nothing yet.

:class:`Deadlines` is a base of :class:`~backends.engine.Engine`; the modes call it on the event loop.

* Playback deadlines: each request gets a :class:`~backends.schedule.Playout` (``_playout``); a
  segment offered to the mode's :class:`~backends.schedule.SegmentQueue` carries the request's
  ``due`` time, and when a segment is ready the mode calls ``_segment_ready``, which advances the
  request's playback and reports a late segment to the observer (``underrun``). ``queue_order`` is
  ``deadline`` unless ``config.deadlines`` is off (then the mode's ``plain_order``).
* Short first segments: a request whose listener hears nothing yet (its session has no request in
  progress and no audio still playing: :class:`~backends.schedule.Listeners`) gets a first segment
  of at most ``short_first_segment_words`` words (``short_first_segment``: ``always``; ``busy``: only
  while other sessions are served; ``never``). A session's next sentence, sent while its audio
  plays, keeps the usual cut.
* The cost of a call: seconds per input token, a running average over the single calls measured so
  far (``_expected_s``; 0 until one is measured). The concurrent mode holds work by it.
* Interrupting for first audio (``interrupt_for_first_audio``, single calls of an ``interruptible``
  runtime): when a segment whose listener hears nothing is queued (``_offer``) and no worker is
  free, a running call of a later segment (its listener still has audio to play) that has run
  less than half its expected time, and that the queue would take after the newcomer, is
  interrupted (:class:`~backends.schedule.Preemption`). Its segment goes back to the queue with
  its own deadline and runs again once the newcomer's has started; a segment is interrupted at most
  once, so nothing starves. The work lost is counted (``interrupted``).

All of it is off with ``config.deadlines`` off.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from .base import BackendObserver, Interrupt, Segment, SynthesisRequest, Synthesizer
from .config import BackendConfig
from .schedule import (
    SHORTEST_FIRST_WINDOW_S,
    Entry,
    Listeners,
    Order,
    Playout,
    Preemption,
    RunningCall,
    SegmentQueue,
)


def input_tokens(segment: Segment) -> int:
    """The model's input length for ``segment`` (its phonemes plus the start and end tokens)."""
    return len(segment.phonemes) + 2


class Deadlines:
    """Playback deadlines, listeners, call costs and interruptions (see the module docstring)."""

    config: BackendConfig
    synthesizer: Synthesizer
    _observer: BackendObserver
    #: The order segments run in with ``deadlines`` off (the mode's own; see backends.schedule).
    plain_order: Order = "fifo"

    def __init__(self) -> None:
        self._listeners = Listeners()  # per session: requests in progress, audio still playing
        self._preemption = Preemption()
        self._seconds_per_token = 0.0  # single calls' running average; 0: nothing measured yet

    # -- sessions and short first segments ------------------------------------------------------
    @staticmethod
    def _session_of(request: SynthesisRequest) -> str:
        return request.session or request.request_id or f"request-{id(request)}"

    def _tracked(self, request: SynthesisRequest) -> contextlib.AbstractContextManager[None]:
        """Count ``request`` as in progress for its session (event loop)."""
        return self._listeners.serving(self._session_of(request))

    def _short_first(self, request: SynthesisRequest) -> bool:
        """Whether ``request``'s first segment is cut short (``short_first_segment``): only while
        its listener hears nothing, and with ``busy`` only while other sessions are served."""
        when, session = self.config.short_first_segment, self._session_of(request)
        if when == "never" or not self.config.deadlines:
            return False
        if self._listeners.hears_something(session, time.perf_counter()):
            return False  # this request's audio follows audio still playing: no hurry
        return when == "always" or self._listeners.others_served(session)

    # -- playback deadlines ---------------------------------------------------------------------
    @property
    def queue_order(self) -> Order:
        """Earliest playback deadline first, or the mode's own order with ``deadlines`` off."""
        return "deadline" if self.config.deadlines else self.plain_order

    def _new_queue(self) -> SegmentQueue:
        """The mode's queue: deadlines (segments due together go shortest first; streams in arrival
        order under overload), or the mode's own order."""
        if not self.config.deadlines:
            return SegmentQueue(self.queue_order)
        return SegmentQueue("deadline", window_s=SHORTEST_FIRST_WINDOW_S, clock=time.perf_counter)

    def _playout(self, request: SynthesisRequest) -> Playout:
        """The request's playback clock: its first segment is due when it arrived. Call it before
        the request counts as its session's own (``_tracked``)."""
        heard = self._listeners.hears_something(self._session_of(request), time.perf_counter())
        return Playout(request.created, self.config.deadline_margin_ms / 1000.0, heard_before=heard)

    def _segment_ready(self, playout: Playout, audio: Any, request: SynthesisRequest) -> None:
        """A segment of the request is ready now (``audio``, None when it failed): advance its
        playback, report a late segment, note until when its session's listener has audio to play."""
        if audio is None:
            return
        late = playout.delivered(time.perf_counter(), len(audio) / self.synthesizer.sample_rate)
        if late > 0:
            self._observer.underrun(late)
        if playout.runs_out is not None:
            self._listeners.played(self._session_of(request), playout.runs_out)

    # -- call costs and interruptions -------------------------------------------------------------
    def _measured(self, seconds: float, segment: Segment) -> None:
        """Fold a finished single call into the running cost (worker thread; a float store)."""
        rate, known = seconds / input_tokens(segment), self._seconds_per_token
        self._seconds_per_token = rate if not known else known + 0.2 * (rate - known)

    def _expected_s(self, segment: Segment) -> float:
        """How long a single call for ``segment`` is expected to take (0 until one is measured)."""
        return self._seconds_per_token * input_tokens(segment)

    @property
    def interrupts(self) -> bool:
        """Whether a running single call may be interrupted for first audio (module docstring)."""
        return (self.config.deadlines and self.config.interrupt_for_first_audio and not self.batched
                and self.synthesizer.capabilities.interruptible)

    def _call_started(self, entry: Entry, playout: Playout, segment: Segment) -> RunningCall | None:
        """A single call for ``entry`` begins: what may interrupt it (None: nothing may)."""
        if not self.interrupts:
            return None
        call = RunningCall(entry, playout, time.perf_counter(), self._expected_s(segment), Interrupt())
        self._preemption.started(call)
        return call

    def _call_ended(self, call: RunningCall | None) -> None:
        if call is not None:
            self._preemption.ended(call)

    def _offer(self, queue: SegmentQueue, item: Any, segment: Segment, playout: Playout, *, session: str,
               request_seq: int, busy: bool) -> None:
        """Queue ``item``, a request's next runnable ``segment``, with its playback deadline; when
        no worker is free (``busy``), interrupt a running call for it if one qualifies (module
        docstring)."""
        entry = queue.push(item, session=session, request_seq=request_seq, due=playout.due,
                           cost=len(segment.phonemes), playing=playout.runs_out is not None)
        if not busy or not self.interrupts:
            return
        call = self._preemption.victim(queue, entry, playout, time.perf_counter())
        if call is not None:
            call.playout.interrupted = True
            call.interrupt.set()
