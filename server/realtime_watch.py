"""Whether synthesis keeps up with real time: the slow-machine warning.

:class:`RealtimeWatch` is fed by the backend's observer calls (``segment_done``, ``underrun``;
:class:`server.metrics.Metrics` forwards them) and judges the last ``window_s`` seconds. It warns
when, over that window, either

* the real-time factor is above 1 — synthesis time over audio time, summed over the window's
  segments (at least ``MIN_AUDIO_S`` of audio, so one odd segment does not count): every listener
  who plays in real time hears gaps. This counts only where runtime calls never overlap (the
  sequential mode, ``serial=True``): the concurrent mode runs calls side by side, where each may
  be slower than real time while together they keep up, so there the gaps decide; or
* the playback underruns grew by ``MIN_UNDERRUN_S`` or more — the gaps listeners heard, however
  fast one segment is (too many listeners at once for this machine).

The warning goes to the log (at most one line per window while it lasts, plus one when it clears)
and to ``/ping`` as ``warnings`` (the status stays 200: the server still works, only late), each
with what to do: more runtime threads, the concurrent mode, a GPU. The browser page of the agent
shows it too.

It judges only once :meth:`RealtimeWatch.arm` was called (the app does when the model is warmed
up). Thread-safe: the observer calls come from worker threads and the event loop; one lock guards the
window, and nothing here blocks for longer than a list scan.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("kokoro.realtime")

#: Least audio in the window for its real-time factor to count.
MIN_AUDIO_S = 0.5
#: Least growth of the underruns in the window that counts as falling behind.
MIN_UNDERRUN_S = 0.5
CODE = "slower_than_real_time"


class RealtimeWatch:
    """The window of recent segments and underruns (module docstring). ``window_s`` 0 turns it off."""

    def __init__(self, window_s: float = 60.0, *, advice: str = "", serial: bool = True,
                 clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self.serial = serial
        self.advice = advice or default_advice()
        self._clock = clock
        self._lock = threading.Lock()
        self._segments: deque[tuple[float, float, float]] = deque()  # (t, synth_s, audio_s)
        self._underruns: deque[tuple[float, float]] = deque()  # (t, seconds)
        self._synth = self._audio = self._gaps = 0.0  # the window's sums, kept as it moves
        self._logged_at: float | None = None
        self._slow = False
        self._armed = False

    def arm(self) -> None:
        """Start judging (once the model is warmed up: a warm-up call is slow by nature)."""
        with self._lock:
            self._segments.clear()
            self._underruns.clear()
            self._synth = self._audio = self._gaps = 0.0
            self._armed = True

    # -- observer side (any thread) -------------------------------------------------------------
    def segment_done(self, synth_seconds: float, audio_seconds: float) -> None:
        if self.window_s <= 0 or not self._armed:
            return
        with self._lock:
            self._segments.append((self._clock(), synth_seconds, audio_seconds))
            self._synth += synth_seconds
            self._audio += audio_seconds
        self._check()

    def underrun(self, seconds: float) -> None:
        if self.window_s <= 0 or seconds <= 0 or not self._armed:
            return
        with self._lock:
            self._underruns.append((self._clock(), seconds))
            self._gaps += seconds
        self._check()

    # -- judging --------------------------------------------------------------------------------
    def figures(self) -> tuple[float | None, float, float]:
        """Over the window: the real-time factor (None with too little audio), the underrun
        seconds and the audio seconds."""
        with self._lock:
            cutoff = self._clock() - self.window_s
            while self._segments and self._segments[0][0] < cutoff:
                _, synth, audio = self._segments.popleft()
                self._synth -= synth
                self._audio -= audio
            while self._underruns and self._underruns[0][0] < cutoff:
                self._gaps -= self._underruns.popleft()[1]
            if not self._segments:
                self._synth = self._audio = 0.0  # no drift from the running sums
            if not self._underruns:
                self._gaps = 0.0
            synth, audio, gaps = self._synth, self._audio, self._gaps
        rtf = synth / audio if audio >= MIN_AUDIO_S else None
        return rtf, gaps, audio

    def warnings(self) -> list[dict[str, Any]]:
        """The warnings of the window (empty when synthesis keeps up), as ``/ping`` shows them."""
        if self.window_s <= 0:
            return []
        rtf, gaps, audio = self.figures()
        behind = self.serial and rtf is not None and rtf > 1.0
        if not behind and gaps < MIN_UNDERRUN_S:
            return []
        what = (f"real-time factor {rtf:.2f}" if rtf is not None else "real-time factor unknown") + (
            f", listeners heard {gaps:.1f} s of gaps" if gaps > 0 else "")
        return [{
            "code": CODE,
            "message": f"synthesis is falling behind real time over the last {self.window_s:g} s ({what}, "
                       f"{audio:.1f} s of audio): listeners playing in real time hear gaps",
            "realtime_factor": None if rtf is None else round(rtf, 3),
            "underrun_seconds": round(gaps, 3),
            "window_seconds": self.window_s,
            "advice": self.advice,
        }]

    def _check(self) -> None:
        """Log when the window turns slow (then at most once per window) and when it clears."""
        found = self.warnings()
        now = self._clock()
        with self._lock:
            was, self._slow = self._slow, bool(found)
            due = self._logged_at is None or now - self._logged_at >= self.window_s
            if found and (not was or due):
                self._logged_at = now
            elif found or not was:
                return
        if found:
            log.warning("%s; what to do: %s", found[0]["message"], self.advice)
        else:
            log.info("synthesis keeps up with real time again")


def default_advice(*, threads: int | None = None, mode: str = "sequential", runtime: str = "onnx",
                   device: str = "auto") -> str:
    """What an operator can do about a slow machine, with the settings it runs with."""
    steps = [
        f"give the runtime more CPU threads (KOKORO_THREADS / --threads; now "
        f"{threads if threads is not None else 'the runtime default'}) and keep other work off its cores",
    ]
    if mode != "concurrent":
        steps.append("serve several listeners at once in the concurrent mode (KOKORO_MODE=concurrent / --mode)")
    if not (runtime == "torch" and device == "cuda"):
        steps.append("run the torch runtime on a GPU (--backend torch --device cuda)")
    steps.append("or send fewer listeners to this replica")
    return "; ".join(steps)
