"""The scheduler's data: playback clocks, the queue of runnable segments, listeners, running calls.

The rules that decide what runs next are :mod:`backends.engine.policy`'s; this module holds the state they
read and keep:

* :class:`Playout` follows one request as a client playing in real time would hear it: the first
  segment is due when the request arrived; when a segment is ready at ``t``, its playback starts at
  ``max(t, runs_out)`` (a late segment is a gap, an *underrun*, of ``t - runs_out`` seconds) and
  the audio then runs out ``audio_seconds`` later; the next segment is due ``margin`` before that.
* :class:`SegmentQueue` holds runnable segments (:class:`Entry`) and hands them out in the order of
  a *rank* the policy gives it (a function of the queue as it is now), a session's second entry in
  a batch only after every session's first, with the round each session is at (``turn``).
* :class:`Listeners` knows, per session, whether its listener hears anything (a request in progress
  or audio delivered that has not run out yet).
* :class:`Preemption` holds the single calls running now and picks the one to interrupt for a
  listener who hears nothing yet, by the policy's thresholds.

Pure logic, no threads, no clock of its own (times are passed in): the modes call it from the event
loop only. Sizes are bounded by admission (``max_queue``), so a linear scan per pick is cheap.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

#: The policy's order for the entries queued now: a sort key (smaller runs sooner).
Rank = Callable[["SegmentQueue"], Callable[["Entry"], tuple[Any, ...]]]


class Playout:
    """One request's playback as a real-time client hears it (see the module docstring).
    ``heard_before``: its listener had audio playing or another request in progress when it arrived."""

    def __init__(self, arrived: float, margin_s: float = 0.0, *, heard_before: bool = False):
        self.arrived = arrived
        self.margin_s = margin_s
        self.heard_before = heard_before
        self.first_ready: float | None = None
        self.runs_out: float | None = None  # when the audio delivered so far stops playing
        self.underrun_s = 0.0
        self.interrupted = False  # its segment in progress was interrupted once (never twice)
        self.ended = False  # its request finished, failed or was dropped (a call still running is work lost)

    @property
    def silent(self) -> bool:
        """Whether its listener hears nothing until its next segment is ready (a first segment
        that ends a silence, not one that follows audio)."""
        return self.runs_out is None and not self.heard_before

    @property
    def due(self) -> float:
        """When the next segment must be ready."""
        if self.runs_out is None:
            return self.arrived
        return self.runs_out - self.margin_s

    def delivered(self, at: float, audio_seconds: float) -> float:
        """A segment of ``audio_seconds`` became ready at ``at``; returns how late it was (seconds
        of silence the listener heard before it, 0 when on time)."""
        self.interrupted = False
        if self.runs_out is None:
            self.first_ready = at
            self.runs_out = at + audio_seconds
            return 0.0
        late = max(0.0, at - self.runs_out)
        self.runs_out = max(self.runs_out, at) + audio_seconds
        self.underrun_s += late
        return late


@dataclass(eq=False, slots=True)
class Entry:
    """A runnable segment in the queue; ``item`` is the mode's own (what it runs)."""

    item: Any
    session: str
    request_seq: int
    due: float
    seq: int = 0
    phonemes: int = 0  # its length in phonemes: shortest first among first segments
    playing: bool = False  # a later segment: its request's audio already plays
    remaining: float = 0.0  # phonemes its request has left, this segment's included
    passed: int = 0  # first segments taken ahead of it while the server was overloaded
    turn: int = 0  # its request's turn within the session (rule 9: the newest turn goes first)
    round_place: int = 0  # its session's place in the round when it was queued or taken
    playout: Any = None  # its request's Playout (the policy's: whose first call starts when it is taken)


@dataclass
class SegmentQueue:
    """Runnable segments, picked in the order of ``rank`` (the policy's). Event loop only."""

    rank: Rank
    #: Told of every take: the entries taken and those left queued (the policy counts passes).
    served: Callable[[list[Entry], list[Entry]], None] | None = None
    _entries: list[Entry] = field(default_factory=list)
    #: Session -> when it last joined or was served, for sessions with entries queued only: a
    #: session with nothing queued joins the end of the round when it queues again, so its key
    #: goes as its last entry leaves (every HTTP request is a session of its own).
    _turn: dict[str, int] = field(default_factory=dict)
    _clock: Iterator[int] = field(default_factory=itertools.count)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(sorted(self._entries, key=self.rank(self)))

    @property
    def entries(self) -> list[Entry]:
        """The queued entries, in no particular order."""
        return list(self._entries)

    def turn(self, entry: Entry) -> tuple[Any, ...]:
        """Round-robin by session (the session served or joined longest ago first), then the
        session's oldest request, then the order of arrival. An entry whose session has nothing
        queued (one taken and running) keeps the place it had when it was taken."""
        return (self._turn.get(entry.session, entry.round_place), entry.request_seq, entry.seq)

    def push(self, item: Any, *, session: str, request_seq: int, due: float = 0.0, phonemes: int = 0,
             playing: bool = False, remaining: float = 0.0, turn: int = 0, playout: Any = None) -> Entry:
        if session not in self._turn:
            self._turn[session] = next(self._clock)  # a session with nothing queued joins the end of the round
        entry = Entry(item, session, request_seq, due, next(self._clock), phonemes, playing, remaining,
                      turn=turn, round_place=self._turn[session], playout=playout)
        self._entries.append(entry)
        return entry

    def pop(self) -> Entry | None:
        """The next segment to run, or None when nothing is runnable."""
        taken = self.take(1)
        return taken[0] if taken else None

    def take(self, n: int, fits: Callable[[list[Entry], Entry], bool] | None = None) -> list[Entry]:
        """Up to ``n`` entries in order, a session's second entry only after every session's
        first (a batch spreads over sessions); the first always goes, each later one only when
        ``fits(taken, entry)``. Entries passed over keep their place."""
        key = self.rank(self)
        keyed = sorted(((key(entry), entry) for entry in self._entries), key=lambda r: r[0])  # (each key once)
        ranked: list[tuple[int, tuple[Any, ...], Entry]] = []
        per_session: dict[str, int] = {}
        for k, entry in keyed:
            rank = per_session[entry.session] = per_session.get(entry.session, -1) + 1
            ranked.append((rank, k, entry))
        if len(per_session) < len(ranked):  # (one entry a session: already in order)
            ranked.sort(key=lambda r: r[:2])
        taken: list[Entry] = []
        for _, _, entry in ranked:
            if len(taken) >= n:
                break
            if taken and fits is not None and not fits(taken, entry):
                continue
            taken.append(entry)
        if taken:
            gone = {id(entry) for entry in taken}
            self._entries = [e for e in self._entries if id(e) not in gone]
        for entry in taken:
            entry.round_place = self._turn[entry.session] = next(self._clock)  # served: to the end of the round
        self._forget({entry.session for entry in taken})
        if taken and self.served is not None:
            self.served(taken, self._entries)
        return taken

    def requeue(self, entry: Entry) -> None:
        """Put back an entry that was taken (its call was interrupted): same due, same place."""
        self._entries.append(entry)
        self._turn.setdefault(entry.session, entry.round_place)

    def outranks(self, entry: Entry, other: Entry) -> bool:
        """Whether queued ``entry`` would be taken before ``other`` if that were queued too."""
        self._entries.append(other)
        try:
            key = self.rank(self)
            return key(entry) < key(other)
        finally:
            self._entries.remove(other)

    def remove(self, match: Callable[[Any], bool]) -> int:
        """Drop every entry whose item matches; returns how many."""
        kept: list[Entry] = []
        gone: set[str] = set()
        for e in self._entries:
            if match(e.item):
                gone.add(e.session)
            else:
                kept.append(e)
        dropped = len(self._entries) - len(kept)
        if dropped:
            self._entries = kept
            self._forget(gone)
        return dropped

    def clear(self) -> list[Entry]:
        entries, self._entries = self._entries, []
        self._turn.clear()
        return entries

    def _forget(self, sessions: set[str]) -> None:
        """Drop the round's place of each of ``sessions`` that has nothing queued any more."""
        queued = {e.session for e in self._entries} if sessions else set()
        for session in sessions - queued:
            self._turn.pop(session, None)

    def sizes(self) -> dict[str, int]:
        """Entries per table (the queue's own state; all 0 when nothing is queued)."""
        return {"queue_entries": len(self._entries), "queue_turns": len(self._turn)}


class Listeners:
    """Per session: requests in progress and when the audio delivered to it runs out. A session
    is forgotten once it has no request in progress and its audio ran out (no session outlives
    its last audio, however many there were)."""

    def __init__(self) -> None:
        self._active: Counter[str] = Counter()
        self._playing: dict[str, float] = {}
        self._turns: dict[str, int] = {}  # the newest turn of each session heard of (rule 9)
        # When each delivery runs out, soonest first (a superseded one is passed over), and the
        # sessions whose audio ran out while a request was still in progress: a sweep reads only
        # what has run out since the last, however many listeners play (it runs at every admission).
        self._expiry: list[tuple[float, int, str]] = []
        self._expiry_seq = itertools.count()
        self._ran_out: set[str] = set()

    @contextlib.contextmanager
    def serving(self, session: str) -> Iterator[None]:
        """Count one request of ``session`` as in progress while the block runs."""
        self._active[session] += 1
        try:
            yield
        finally:
            self._active[session] -= 1
            if self._active[session] <= 0:
                del self._active[session]
                if session in self._ran_out:  # its audio ran out while it was served
                    self._ran_out.discard(session)
                    self._playing.pop(session, None)
                if session not in self._playing:
                    self._turns.pop(session, None)

    def played(self, session: str, runs_out: float) -> None:
        """The audio delivered to ``session`` so far runs out at ``runs_out``."""
        self._playing[session] = runs_out
        self._ran_out.discard(session)
        heapq.heappush(self._expiry, (runs_out, next(self._expiry_seq), session))

    def hears_something(self, session: str, now: float) -> bool:
        """Whether ``session`` has a request in progress or audio still playing at ``now``."""
        self.sweep(now)
        return session in self._active or session in self._playing

    def sweep(self, now: float) -> None:
        """Forget the sessions whose audio ran out by ``now`` and that have no request in progress."""
        while self._expiry and self._expiry[0][0] <= now:
            until, _, other = heapq.heappop(self._expiry)
            if self._playing.get(other) != until:
                continue  # more audio was delivered since: a later entry stands for it
            if other in self._active:
                self._ran_out.add(other)  # forgotten when its last request ends
            else:
                del self._playing[other]
                self._turns.pop(other, None)

    def sizes(self, now: float) -> dict[str, int]:
        """Sessions per table at ``now`` (those whose audio ran out are forgotten first)."""
        self.sweep(now)
        return {"listeners_active": len(self._active), "listeners_playing": len(self._playing),
                "listeners_turns": len(self._turns), "listeners_expiry": len(self._expiry)}

    def newer_turn(self, session: str, turn: int, *, note: bool = False) -> bool:
        """Whether ``turn`` is newer than every turn of ``session`` so far: its listener has moved
        on, and what still plays of older turns is not heard before it. ``note``: remember it."""
        newer = turn > self._turns.get(session, 0)
        if newer and note:
            self._turns[session] = turn
        return newer

    def others_served(self, session: str) -> bool:
        """Whether requests of sessions other than ``session`` are in progress."""
        return any(other != session for other in self._active)


@dataclass(eq=False, slots=True)
class RunningCall:
    """A single runtime call in progress: the segment's queue entry and request playback, when it
    started, how long it is expected to take, and how to interrupt it."""

    entry: Entry
    playout: Playout
    started: float
    expected_s: float
    interrupt: Any  # backends.api.Interrupt


class Preemption:
    """The running calls that may be interrupted, and which one to interrupt for a segment whose
    listener hears nothing yet (see the module docstring). Event loop only."""

    def __init__(self) -> None:
        self._calls: list[RunningCall] = []

    def started(self, call: RunningCall) -> None:
        self._calls.append(call)

    def ended(self, call: RunningCall) -> None:
        with contextlib.suppress(ValueError):
            self._calls.remove(call)

    def __len__(self) -> int:
        return len(self._calls)

    def abandon(self, match: Callable[[Any], bool]) -> None:
        """Interrupt the running calls whose queue item ``match`` es: their request was closed
        (a client's cancel or barge-in), so nobody waits for what they compute."""
        for call in self._calls:
            if match(call.entry.item) and not call.interrupt.is_set:
                call.interrupt.set()

    def victim(self, queue: SegmentQueue, entry: Entry, playout: Playout, now: float, *,
               before_fraction: float = 0.5, any_later: bool = False) -> RunningCall | None:
        """The call to interrupt so that ``entry`` (queued) runs now, or None. Only for a silent
        listener's segment; only a call whose listener hears something, not interrupted before,
        that the queue would take after ``entry`` and (unless ``any_later``) that has run less than
        ``before_fraction`` of its expected time. Of those, the one with the most left."""
        if not playout.silent:
            return None
        candidates = [
            c for c in self._calls
            if not c.playout.silent and not c.playout.interrupted and not c.interrupt.is_set
            and (any_later or now - c.started < c.expected_s * before_fraction) and queue.outranks(entry, c.entry)
        ]
        return max(candidates, key=lambda c: c.started + c.expected_s, default=None)
