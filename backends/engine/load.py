"""The load on the runtime, as the scheduling policy reads it (its rule 10, docs/runtimes.md).

* :class:`LoadMeter` — audio-seconds per second over the last ``window_s``: **demanded** (one per
  stream in progress, a listener playing in real time; averaged over the window) against
  **delivered** (the audio the runtime made in the window), and how much of the window a runtime
  call was running (**busy**).
* :class:`Overload` — whether the runtime is overloaded: demand above supply over the window, with
  hysteresis. It begins when the listeners asked for more than the runtime made — by a tenth, and
  by at least a quarter of a listener (:data:`MARGIN`, :data:`SLACK`: no false alarm from the
  first moments of a stream, before its audio is made) — while a call ran for at least half the
  window (:data:`BUSY_TO_BEGIN`: streams whose clients do not read hold their own work back and
  leave the runtime idle, so they alone are no overload); it ends once what was made covers what
  was asked, or calls ran less than a quarter of the window (:data:`BUSY_TO_END`). A stream that is
  late for a moment while the runtime makes more than is asked is no overload.
* :class:`FirstAudioWaits` — the newcomers (listeners who hear nothing yet) whose first segment's
  call has not started, since when each waits, and the pace they are served at: what
  ``overload=refuse`` reads to refuse the next newcomer before first audio runs late — the wait it
  would have (those waiting ahead of it times the wait per newcomer ahead, a running average), or
  the longest wait now, whichever is more. The pace is measured, not modelled: each newcomer's wait
  from its arrival to its first call, over one more than the newcomers it found waiting as it joined
  the runtime's queue — so it counts whatever the wait was made of (its planning, the queue, the
  event loop, a batch starting many at once). The prediction keeps a burst of arrivals out
  (waiting for the longest wait to pass the budget lets in every arrival until then, and they
  queue behind each other).

* :class:`LoopLag` — how far behind the event loop runs (a probe that sleeps a moment and measures
  how late it wakes): the host side of an overload. Where the runtime is fast (a GPU) the host's
  work — reading requests, planning, sending audio — saturates the one event loop first, and every
  step of a request waits behind the others; ``overload=refuse`` counts that lateness into a
  newcomer's expected wait (:data:`LOOP_STEPS` steps of a request before its first audio).

Both averages are kept as running sums over a deque of steps (amortised O(1) per event), since
the policy reads them at every admission and every segment. Event loop only; the clock is
injected (virtual time in tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator

#: Overload begins when demanded > delivered x (1 + MARGIN) + SLACK ...
MARGIN = 0.1
#: ... (audio-seconds per second: a quarter of a listener) ...
SLACK = 0.25
#: ... while runtime calls ran for at least this share of the window; it ends when delivered
#: covers demanded or calls ran less than BUSY_TO_END of the window.
BUSY_TO_BEGIN = 0.5
BUSY_TO_END = 0.25


class StepAverage:
    """The time-weighted average over the last ``window_s`` of a value that changes in steps
    (0 before the first step). Keeps one step from before the window, so the deque holds only
    the steps of one window."""

    def __init__(self, window_s: float, clock: Callable[[], float]):
        self.window_s = window_s
        self._clock = clock
        start = clock()
        self._steps: deque[tuple[float, float, float]] = deque([(start, 0.0, 0.0)])  # (since, value, area before)
        self.value = 0.0

    def set(self, value: float) -> None:
        if value == self.value:
            return
        now = self._clock()
        self._steps.append((now, value, self._area(now)))
        self.value = value

    def _area(self, at: float) -> float:
        since, value, before = self._steps[-1]
        return before + value * max(0.0, at - since)

    def average(self) -> float:
        now = self._clock()
        start = now - self.window_s
        while len(self._steps) > 1 and self._steps[1][0] <= start:
            self._steps.popleft()
        since, value, before = self._steps[0]
        area_at_start = before + value * max(0.0, start - since) if since <= start else before
        return max(0.0, self._area(now) - area_at_start) / self.window_s


class LoadMeter:
    """Audio-seconds per second over the last ``window_s``: demanded (the streams in progress,
    one each, averaged) against delivered (audio made); and the share of the window a runtime
    call was running. Set ``streams`` and ``calls`` as they change."""

    def __init__(self, window_s: float, clock: Callable[[], float]):
        self.window_s = window_s
        self._clock = clock
        self._made: deque[tuple[float, float]] = deque()
        self._made_s = 0.0
        self._streams = 0
        self._calls = 0
        self._demand = StepAverage(window_s, clock)
        self._busy = StepAverage(window_s, clock)

    @property
    def streams(self) -> int:
        """Streams in progress now."""
        return self._streams

    @streams.setter
    def streams(self, n: int) -> None:
        self._streams = n
        self._demand.set(float(n))

    @property
    def calls(self) -> int:
        """Runtime calls running now."""
        return self._calls

    @calls.setter
    def calls(self, n: int) -> None:
        self._calls = n
        self._busy.set(1.0 if n > 0 else 0.0)

    def made(self, audio_seconds: float) -> None:
        self._made.append((self._clock(), audio_seconds))
        self._made_s += audio_seconds

    @property
    def demanded(self) -> float:
        """Audio-seconds per second the streams asked for over the window (streams, averaged)."""
        return self._demand.average()

    @property
    def delivered(self) -> float:
        """Audio-seconds per second the runtime made over the window."""
        cutoff = self._clock() - self.window_s
        while self._made and self._made[0][0] < cutoff:
            self._made_s -= self._made.popleft()[1]
        if not self._made:
            self._made_s = 0.0  # (no drift from the float sums)
        return max(0.0, self._made_s) / self.window_s

    @property
    def busy(self) -> float:
        """The share of the window a runtime call was running (0-1)."""
        return self._busy.average()


class Overload:
    """Demand above supply over the meter's window, with hysteresis (the module docstring)."""

    def __init__(self) -> None:
        self.active = False

    def update(self, demanded: float, delivered: float, busy: float) -> bool:
        """Judge the meter's ``demanded``, ``delivered`` and ``busy`` (read once by the caller, who
        reports them too); returns whether the state changed (``active`` is the new one)."""
        if not self.active:
            begins = busy >= BUSY_TO_BEGIN and demanded > delivered * (1 + MARGIN) + SLACK
            self.active = begins
            return begins
        ends = demanded <= delivered or busy < BUSY_TO_END
        self.active = not ends
        return ends


#: Weight of the newest newcomer's wait per newcomer ahead in their running average.
GAP_SMOOTHING = 0.05


class FirstAudioWaits:
    """Newcomers whose first segment's call has not started yet, each with when it arrived and how
    many were waiting as it joined; keyed by an object of the request (its playout, or the request
    while it is planned). Every entry leaves when its block ends, so nothing outlives a request."""

    def __init__(self, clock: Callable[[], float]):
        self._clock = clock
        self._since: dict[int, tuple[float, int]] = {}
        #: A newcomer's wait for its first call per newcomer waiting ahead of it, counting itself
        #: (a running average; None before the first call started).
        self.gap_s: float | None = None

    @contextlib.contextmanager
    def waiting(self, key: object, arrived: float) -> Iterator[None]:
        self._since[id(key)] = (arrived, len(self._since))
        try:
            yield
        finally:
            self._since.pop(id(key), None)

    def started(self, key: object) -> None:
        """``key``'s first segment's call starts: it no longer waits for the runtime. Its wait over
        one more than those it found waiting is the pace newcomers are served at."""
        entry = self._since.pop(id(key), None)
        if entry is None:
            return
        arrived, ahead = entry
        gap = max(0.0, self._clock() - arrived) / (ahead + 1)
        self.gap_s = gap if self.gap_s is None else self.gap_s + GAP_SMOOTHING * (gap - self.gap_s)

    def longest(self) -> float:
        """How long the newcomer waiting longest has waited (0 when none waits)."""
        now = self._clock()
        return max(0.0, now - min((arrived for arrived, _ in self._since.values()), default=now))

    def expected(self) -> float:
        """The wait a newcomer arriving now can expect for its first call: those waiting ahead of
        it times the wait per newcomer ahead, or the longest wait now if more."""
        return max(self.longest(), len(self._since) * (self.gap_s or 0.0))

    def __len__(self) -> int:
        return len(self._since)


#: Steps of a request on the event loop before its first audio leaves (its body read, its first
#: segment planned, that segment's call returned, the audio sent): each waits behind the loop's lag.
LOOP_STEPS = 4


class LoopLag:
    """How late the event loop runs: :meth:`probe` (a task) sleeps ``interval_s`` at a time and
    notes how late it wakes; :attr:`behind` is the most of the last ``samples`` (0 while no probe
    runs: nothing is known to be late)."""

    def __init__(self, interval_s: float = 0.02, samples: int = 5):
        self.interval_s = interval_s
        self._late: deque[float] = deque([0.0], maxlen=samples)

    @property
    def behind(self) -> float:
        """Seconds the loop ran late at its worst over the last few probes."""
        return max(self._late)

    def note(self, late_s: float) -> None:
        """One probe woke ``late_s`` late."""
        self._late.append(max(0.0, late_s))

    async def probe(self) -> None:
        """Run until cancelled."""
        while True:
            asked = time.perf_counter() + self.interval_s
            await asyncio.sleep(self.interval_s)
            self.note(time.perf_counter() - asked)
