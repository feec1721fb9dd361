"""The scheduling policy: every rule that decides what runs next, for both modes (docs/runtimes.md).

Read it top to bottom. Both modes keep a queue of runnable segments (one per request at a time: a
request offers its next segment when the previous one is done) and ask this policy what to do.

1. **Playback deadlines.** Each request gets a playback clock (:class:`~backends.engine.schedule.Playout`):
   its first segment is due when it arrived, each later one ``deadline_margin_ms`` before the audio
   already delivered runs out. Lateness is reported as an underrun.
2. **Short first segment.** A listener who hears nothing yet gets a first segment of at most
   ``short_first_segment_words`` words (``short_first_segment``).
3. **Order** (:meth:`SchedulingPolicy.rank`). Earliest due first, ties round-robin by session.
   Segments due within ``due_together_ms`` of the earliest count as due together and go shortest
   first (a newcomer's short first segment is not kept behind a long one; a long one is passed over
   only by segments due at most that much after it, so it cannot starve).
4. **Streams behind** (a later segment, queued or running, is past its due). Then first segments
   go before later segments (first audio at once) —
   but a queued later segment gives way to at most ``overload_yields`` first segments due after
   it and then runs first (by its due), so no stream starves under a flood of newcomers — and the
   late streams go by least work left (the phonemes their request still has),
   ties in arrival order: a short request finishes instead of waiting behind long streams, and of
   equal streams the oldest plays on while the newer wait, so less silence is heard in all than if
   every stream were served in turn. A client that does not read stops offering segments (its
   stream waits for it), so it never holds a newcomer up for longer than its backlog of queued work.
   With ``overload=admit`` a newcomer's first segment then interrupts a running later call however
   far it has run (the late streams pay one short segment's time, and the lost work, per newcomer).
5. **Interruption** (``interrupt_for_first_audio``; single calls of an ``interruptible`` runtime).
   A newcomer's first segment that finds no worker free interrupts a call of a later segment the
   queue would take after it, if that call has run less than ``interrupt_before_fraction`` of its
   expected time (any such call under overload with ``admit``); the interrupted segment is queued
   again with its own due and runs after it; a request's segment is interrupted at most once.
   A request closed while its segment runs (a client's cancel, a voice agent's Clear or barge-in)
   has that call interrupted too (:meth:`SchedulingPolicy.abandon`): nobody waits for its result.
6. **Holding a worker** (parallel single calls, concurrent mode). While a call runs, a free worker
   takes the queue's head only once some queued segment must start: its due less ``hold_factor``
   times its expected time beside another call. Until then it waits for urgent work (a newcomer's
   first segment). A held segment starts by its start-by time at the latest.
7. **Solo calls** (concurrent mode, a runtime with ``solo_calls``). A call runs alone, with every
   core, when no other call is running and nothing queued must start yet (rule 6's
   start-by time): segments may still be queued, and wait their start-by time for a free worker.
8. **Batches** (a batching runtime). A batch takes segments in rank order, a session's second only
   after every session's first; beside its head only segments within ``batch_length_ratio`` of
   its phoneme lengths, except that a listener's first segment always joins a batch led by a later
   segment (it is never left for the next batch while a later one runs).

The cost of a call (:class:`~backends.engine.cost.CostModel`) is measured per kind — alone (every core), beside other
calls (a share of the cores), a batch of ``n`` — as a running average of seconds per input token
(``cost_smoothing``); rule 5 uses the kind the call runs as, rule 6 the kind "beside".

9. **The newest turn** (every order). On a socket with several contexts (ElevenLabs'
   multi-stream-input, Cartesia) each new context is a higher ``turn`` of its session, and the
   newest is the one being listened to: a client that barges in opens a new context and may leave
   the old one to run out (LiveKit flushes and closes a context as soon as the reply's text ends,
   and on interruption only opens the next one). So a session's queued segments of older turns go
   after every segment of its newest turn, and the newest turn's first request counts as a
   listener who hears nothing (its first segment is due at once, and cut short by rule 2), not as
   audio that follows the old turn's: the new reply waits for at most the one segment already
   running, never for the rest of the abandoned one, which still runs when nothing newer is
   queued (a client may still play it).

10. **Overload** (:mod:`backends.engine.load`): the listeners asked for more audio than the
   runtime made over ``load_window_s`` (demand above supply, with hysteresis; a stream late for a
   moment while the runtime makes more than is asked is not one). The load is reported (demanded,
   delivered, overloaded) and overload is logged when it begins and ends. ``overload`` says what a
   newcomer (a listener who hears nothing) meets: ``admit`` serves it as the rules above do;
   ``refuse`` answers it :class:`~backends.api.Overloaded` at once while the runtime is overloaded,
   and — so that the newcomers admitted keep their first audio early — while it would wait longer
   than ``overload_first_audio_ms`` for its first segment's call to start (the newcomers waiting
   ahead of it at the pace first calls start under backlog, or the longest wait now), the event
   loop's lateness counted in for each step of the request on it (:class:`~backends.engine.load.LoopLag`:
   the host's share of an overload, which a fast runtime leaves to the host).
   Checked before its first segment is planned and again when its stream starts.

With ``deadlines`` off, rules 1-8 give way to the mode's plain order (sequential: first in, first
out; concurrent: round-robin by session) and the usual first cut; the load is still reported, and
``refuse`` still refuses.

Threading: everything here runs on the event loop, except :meth:`~backends.engine.cost.CostModel.measured` (worker
threads; one float store per kind). The clock is injected (``clock``), so the rules can be run in
virtual time.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

from backends.api import BackendObserver, Interrupt, Overloaded, Segment, SynthesisRequest
from backends.config import BackendConfig
from backends.engine.cost import CallKind, CostModel
from backends.engine.load import LOOP_STEPS, FirstAudioWaits, LoadMeter, LoopLag, Overload
from backends.engine.schedule import Entry, Listeners, Playout, Preemption, RunningCall, SegmentQueue

log = logging.getLogger("kokoro.backend")

Order = Literal["deadline", "round_robin", "fifo"]


class SchedulingPolicy:
    """The rules of the module docstring, for one engine. ``observer`` hears of underruns and the
    load; ``clock`` is "now" (``time.perf_counter`` unless a test injects one)."""

    def __init__(self, config: BackendConfig, *, plain_order: Order, sample_rate: int,
                 observer: BackendObserver, clock: Callable[[], float] = time.perf_counter):
        self.config = config
        self.plain_order: Order = plain_order
        self.sample_rate = sample_rate
        self.clock = clock
        self.cost = CostModel(config.cost_smoothing)
        self.load = LoadMeter(config.load_window_s, clock)
        self.overload = Overload()
        self._observer = observer
        self._listeners = Listeners()
        self._preemption = Preemption()
        self._running: list[RunningCall] = []
        self._behind = False
        self._waits = FirstAudioWaits(clock)
        self.loop_lag = LoopLag()  # (its probe runs while the engine does, with overload=refuse)
        self._late_since: float | None = None  # this episode of late refusals began (logged once)
        self._late_last = 0.0
        self._late_refused = 0

    # -- rule 1, 2: playback deadlines, short first segments -------------------------------------
    @staticmethod
    def session_of(request: SynthesisRequest) -> str:
        return request.session or request.request_id or f"request-{id(request)}"

    @contextlib.contextmanager
    def tracked(self, request: SynthesisRequest, playout: Playout | None = None) -> Iterator[None]:
        """Count ``request`` as in progress for its session and, given its ``playout`` (while the
        mode streams it; not while it is planned), as a stream that demands audio; when the block
        ends, a call of it still running no longer counts as a late stream."""
        stream = playout is not None
        session = self.session_of(request)
        newcomer = playout.silent if playout is not None else not self._listeners.hears_something(session, self.clock())
        self.load.streams += stream
        if stream:
            self.report_load()
        try:
            with self._listeners.serving(session), (
                    self._waits.waiting(playout or request, request.created) if newcomer else contextlib.nullcontext()):
                yield
        finally:
            self.load.streams -= stream
            if playout is not None:
                playout.ended = True
                self.report_load()  # the gauges never stay stale

    def short_first(self, request: SynthesisRequest) -> bool:
        """Whether ``request``'s first segment is cut short: only while its listener hears nothing,
        and with ``busy`` only while other sessions are served."""
        when, session = self.config.short_first_segment, self.session_of(request)
        if when == "never" or not self.config.deadlines:
            return False
        if self._listeners.hears_something(session, self.clock()) and not self._listeners.newer_turn(
                session, request.turn):
            return False  # this request's audio follows audio still playing: no hurry
        return when == "always" or self._listeners.others_served(session)

    def playout(self, request: SynthesisRequest) -> Playout:
        """The request's playback clock (call it before the request is ``tracked``)."""
        session = self.session_of(request)
        heard = self._listeners.hears_something(session, self.clock())
        if self._listeners.newer_turn(session, request.turn, note=True):
            heard = False  # rule 9: a new turn's first audio is due now, not after the old turn's
        return Playout(request.created, self.config.deadline_margin_ms / 1000.0, heard_before=heard)

    def segment_ready(self, playout: Playout, audio: Any, request: SynthesisRequest) -> None:
        """A segment is ready now (``audio``, None when it failed): advance the playback, report a
        late segment and the load, note until when the session's listener has audio to play."""
        if audio is None:
            return
        seconds = len(audio) / self.sample_rate
        late = playout.delivered(self.clock(), seconds)
        if late > 0:
            self._observer.underrun(late)
        self.load.made(seconds)
        self._waits.started(playout)  # (its first call ran, whichever way it was taken)
        self.report_load()
        if playout.runs_out is not None:
            self._listeners.played(self.session_of(request), playout.runs_out)

    # -- rule 3, 4: the order, streams behind --------------------------------------------------
    def new_queue(self) -> SegmentQueue:
        return SegmentQueue(self.rank, served=self._served)

    def _served(self, taken: list[Entry], left: list[Entry]) -> None:
        """Count, for each queued later segment, the first segments taken ahead of it while
        behind that were due after it (those earliest-due-first would not have run first); a
        newcomer's first segment taken no longer waits for the runtime (rule 10)."""
        for entry in taken:
            if entry.playout is not None:
                self._waits.started(entry.playout)
        if not self._behind:
            return
        for entry in left:
            if entry.playing:
                entry.passed += sum(not t.playing and t.due > entry.due for t in taken)

    @property
    def order(self) -> Order:
        return "deadline" if self.config.deadlines else self.plain_order

    def rank(self, queue: SegmentQueue) -> Callable[[Entry], tuple[Any, ...]]:
        """The sort key of the queue's order for the entries queued now (smaller runs sooner),
        behind rule 9: a session's older turns after its newest."""
        order = self._order_rank(queue)
        newest: dict[str, int] = {}
        for e in queue.entries:
            newest[e.session] = max(newest.get(e.session, e.turn), e.turn)
        if all(e.turn == newest[e.session] for e in queue.entries):
            return order
        return lambda e: (e.turn < newest[e.session], *order(e))

    def _order_rank(self, queue: SegmentQueue) -> Callable[[Entry], tuple[Any, ...]]:
        if self.order == "fifo":
            return lambda e: (e.seq,)
        if self.order == "round_robin":
            return queue.turn
        if self.behind(queue):
            yields = self.config.overload_yields

            def overloaded(e: Entry) -> tuple[Any, ...]:
                if not e.playing:
                    return (1, e.phonemes, e.due, *queue.turn(e))  # first audio at once, shortest first
                if e.passed >= yields:
                    return (0, e.due, e.request_seq, e.seq)  # gave way often enough: runs now
                return (2, e.remaining, e.request_seq, e.seq)  # the late streams, least work left first

            return overloaded
        window = self.config.due_together_ms / 1000.0
        together = min((e.due for e in queue.entries), default=0.0) + window

        def deadline(e: Entry) -> tuple[Any, ...]:
            if window > 0 and e.due <= together:
                return (0, e.phonemes, e.due, *queue.turn(e))
            return (1, 0.0, e.due, *queue.turn(e))

        return deadline

    def behind(self, queue: SegmentQueue) -> bool:
        """Rule 4: whether a later segment, queued or running, is past its due (deadlines on)."""
        if not self.config.deadlines:
            return False
        now = self.clock()
        self._behind = any(e.playing and e.due < now for e in queue.entries) or any(
            c.entry.playing and c.entry.due < now and not c.playout.ended for c in self._running)
        return self._behind

    # -- rule 10: overload --------------------------------------------------------------------
    def report_load(self) -> bool:
        """Rule 10: read the load, tell the observer, log when overload begins or ends; returns
        whether the runtime is overloaded."""
        load, overload = self.load, self.overload
        demanded, delivered = load.demanded, load.delivered
        if overload.update(demanded, delivered, load.busy):
            if overload.active:
                log.warning("overloaded: the listeners asked for %.1f audio-s/s over the last %g s, the runtime made "
                            "%.1f (calls running %.0f%% of the time; %d streams now); newcomers are %s", demanded,
                            load.window_s, delivered, 100 * load.busy, load.streams,
                            "served first" if self.config.overload == "admit" else "refused (overloaded)")
            else:
                log.info("no longer overloaded: the listeners asked for %.1f audio-s/s over the last %g s, the runtime "
                         "made %.1f", demanded, load.window_s, delivered)
        self._observer.load(demanded, delivered, overloaded=overload.active)
        return overload.active

    def admit(self, session: str | None, *, planned: bool = False) -> None:
        """Rule 10 for a newcomer: with ``overload=refuse``, raise :class:`Overloaded` while the
        runtime is overloaded, or while the newcomer would wait longer than
        ``overload_first_audio_ms`` for its first call; not when the session's listener hears
        something (a session's next sentence belongs to a stream already admitted). ``session``
        None: a request of its own, always a newcomer. ``planned``: its first segment is planned
        (the check as its stream starts): only the overload refuses it now — its planning is spent,
        and its wait is counted where it counts, in the newcomers behind it."""
        if self.config.overload != "refuse" or (
                session is not None and self._listeners.hears_something(session, self.clock())):
            return
        if self.report_load():
            raise Overloaded(f"the server is overloaded: its listeners asked for {self.load.demanded:.1f} audio-s/s, "
                             f"it made {self.load.delivered:.1f}; try another instance or again shortly")
        budget = self.config.overload_first_audio_ms / 1000.0
        if planned or budget <= 0:
            return
        wait = self._waits.expected() + LOOP_STEPS * self.loop_lag.behind
        late = wait > budget
        self._log_late(late, wait, budget)
        if late:
            raise Overloaded(f"the server is overloaded: a newcomer would wait {wait * 1000:.0f} ms for its first "
                             "audio to start; try another instance or again shortly")

    def _log_late(self, late: bool, wait: float, budget: float) -> None:
        """Log an episode of late refusals once when it begins, and when no newcomer was refused for
        a load window, how many it refused: under a flood the decision flips with every call that
        starts, which one line per flip would turn into a log line per request."""
        now = self.clock()
        if late:
            if self._late_since is None:
                self._late_since = now
                log.warning("refusing newcomers: a newcomer would wait %.0f ms for its first audio to start (%d "
                            "waiting for their first call, one for %.0f ms; the event loop %.0f ms late; "
                            "KOKORO_OVERLOAD_FIRST_AUDIO_MS=%g)", wait * 1000, len(self._waits),
                            self._waits.longest() * 1000, self.loop_lag.behind * 1000, budget * 1000)
            self._late_last, self._late_refused = now, self._late_refused + 1
        elif self._late_since is not None and now - self._late_last > self.config.load_window_s:
            log.info("admitting newcomers again: first calls start within %g ms (%d refused over %.1f s)",
                     budget * 1000, self._late_refused, self._late_last - self._late_since)
            self._late_since, self._late_refused = None, 0

    def offer(self, queue: SegmentQueue, item: Any, segment: Segment, playout: Playout, *, session: str,
              request_seq: int, remaining: float, busy: bool, interrupts: bool, turn: int = 0) -> None:
        """Queue ``item``, a request's next runnable ``segment``; when no worker is free (``busy``),
        interrupt a running call for it if rule 5 allows."""
        entry = queue.push(item, session=session, request_seq=request_seq, due=playout.due,
                           phonemes=len(segment.phonemes), playing=playout.runs_out is not None, remaining=remaining,
                           turn=turn, playout=playout)
        if not busy or not interrupts:
            return
        any_later = self.config.overload == "admit" and self.behind(queue)
        call = self._preemption.victim(queue, entry, playout, self.clock(),
                                       before_fraction=self.config.interrupt_before_fraction, any_later=any_later)
        if call is not None:
            call.playout.interrupted = True
            call.interrupt.set()

    # -- rule 5: interruption -------------------------------------------------------------------
    def interrupts(self, *, batched: bool, interruptible: bool) -> bool:
        """Whether a running single call may be interrupted for first audio."""
        return self.config.deadlines and self.config.interrupt_for_first_audio and not batched and interruptible

    def call_started(self, entry: Entry, playout: Playout, segment: Segment, kind: CallKind, *,
                     interruptible: bool) -> RunningCall:
        """A call for ``entry`` begins; its ``interrupt`` is set when rule 5 picks it."""
        call = RunningCall(entry, playout, self.clock(), self.cost.expected_s(segment, kind), Interrupt())
        self._running.append(call)
        self.load.calls = len(self._running)
        if interruptible:
            self._preemption.started(call)
        return call

    def abandon(self, match: Callable[[Any], bool]) -> None:
        """A request was closed (a client's cancel or barge-in) while a call of its segment runs:
        interrupt the interruptible running calls whose queue item ``match`` es, as nobody waits
        for what they compute (its result is discarded, not queued again)."""
        self._preemption.abandon(match)

    def call_ended(self, call: RunningCall) -> None:
        with contextlib.suppress(ValueError):
            self._running.remove(call)
        self.load.calls = len(self._running)
        self._preemption.ended(call)

    def table_sizes(self) -> dict[str, int]:
        """Entries in each of the policy's tables kept per session or request (all 0 at rest, once
        the audio delivered has run out): listeners, running calls, streams counted as demanding."""
        return {**self._listeners.sizes(self.clock()), "running_calls": len(self._running),
                "preemptible_calls": len(self._preemption), "load_streams": self.load.streams,
                "first_audio_waits": len(self._waits)}

    # -- rule 6, 7: holding a worker, solo calls ------------------------------------------------
    def start_by(self, entry: Entry, segment: Segment) -> float:
        """When ``entry`` must start beside another call to be ready by its due."""
        return entry.due - self.config.hold_factor * self.cost.expected_s(segment, "shared")

    def hold_s(self, queue: SegmentQueue, segment_of: Callable[[Entry], Segment], *, free: int, workers: int) -> float:
        """How long a free worker waits for urgent work before taking the queue's head (0: now)."""
        if not self.config.deadlines or workers < 2 or free == workers:
            return 0.0
        start_by = min((self.start_by(e, segment_of(e)) for e in queue), default=None)
        return 0.0 if start_by is None else max(0.0, start_by - self.clock())

    def must_start(self, queue: SegmentQueue, segment_of: Callable[[Entry], Segment]) -> bool:
        """Whether a queued segment must start now: a listener's first (it hears nothing yet), or a
        later one whose time to start beside another call has come."""
        now = self.clock()
        return any(not e.playing or self.start_by(e, segment_of(e)) <= now for e in queue)

    def runs_alone(self, queue: SegmentQueue, segment_of: Callable[[Entry], Segment], *, taken: int, free: int,
                   workers: int) -> bool:
        """Whether a call of ``taken`` segments runs solo: one segment, no other call running, and
        nothing queued that must start now."""
        now = self.clock()
        return taken == 1 and free == workers and not any(self.start_by(e, segment_of(e)) <= now for e in queue)

    # -- rule 8: batches ------------------------------------------------------------------------
    def fits(self, taken: list[Entry], entry: Entry, tokens: Callable[[Entry], int]) -> bool:
        """Whether ``entry`` joins the batch ``taken`` (its head first)."""
        if self.config.deadlines and not entry.playing and taken[0].playing:
            return True  # a listener's first segment never waits for the next batch behind a later one
        lengths = [tokens(e) for e in taken] + [tokens(entry)]
        return max(lengths) <= self.config.batch_length_ratio * min(lengths)
