"""Virtual time for the schedulers' tests (compare livekit-agents' ``tests/virtual_time.py``).

A :class:`VirtualClock` handed to an engine as its ``clock`` is "now" for every scheduling
decision, for request arrival (build requests with ``created=clock()``) and for the measured cost
of a call. It moves only when the test advances it, so which segment runs next depends on what
the test did, never on how busy the machine is.
"""

from __future__ import annotations


class VirtualClock:
    """A clock that stands still until :meth:`advance` moves it (thread-safe to read)."""

    def __init__(self, start: float = 1000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
