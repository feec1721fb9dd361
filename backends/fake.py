"""A stand-in runtime for tests, load runs and soak runs — **not for serving speech**.

:class:`FakeSynthesizer` implements the real :class:`~backends.base.Synthesizer` interface (and
``synthesize_batch``) without a model: each segment becomes a quiet sine tone whose length follows
its phoneme count and speed, after a configurable latency. It lets the whole server — text
pipeline, backends, sessions, limits, metrics — run at full speed on any machine, and it has knobs
for the faults a real runtime can have (compare livekit-agents' ``tests/fake_tts.py``).

Select it with ``KOKORO_BACKEND=fake`` (hidden from ``--help``; the model directory is still used
for the voices and the phoneme vocabulary). Knobs, read once when the synthesizer is built
(``environ`` is injectable; keyword arguments override it):

=============================  ==============================================================
``KOKORO_FAKE_SEGMENT_S``      latency of one segment call, seconds (default ``0.002``)
``KOKORO_FAKE_PHONEME_S``      extra latency per phoneme, seconds (default ``0``)
``KOKORO_FAKE_FAIL_ON``        a substring: a segment whose text contains it raises ``RuntimeError``
``KOKORO_FAKE_HANG_ON``        a substring: a segment whose text contains it blocks until
                               :meth:`release` (or ``KOKORO_FAKE_HANG_S``, default 3600 s)
``KOKORO_FAKE_EMPTY_ON``       a substring: a segment whose text contains it yields no samples
=============================  ==============================================================

Two more knobs are for tests that drive a request step by step, as keyword arguments or set on
the instance at any time: ``gate`` (a :class:`threading.Event`: every segment call waits on it — a
segment held mid-synthesis) and ``load_gate`` (``load()`` waits on it — a model still loading).

Threading: thread-safe (``thread_safe = True``); the latency is a ``time.sleep`` on the calling
worker thread, so it behaves like a runtime that releases the GIL. Never call it on the event loop.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .base import SAMPLE_RATE, Segment

#: Seconds of tone per phoneme at speed 1 (Kokoro speaks roughly 12-15 phonemes a second).
SECONDS_PER_PHONEME = 0.075
_PREFIX = "KOKORO_FAKE_"


def _env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(_PREFIX + name, "")
    return float(raw) if raw.strip() else default


class FakeSynthesizer:
    """A model-free runtime with latency and failure knobs (see the module docstring)."""

    name = "fake"
    sample_rate = SAMPLE_RATE
    thread_safe = True
    model_name = "fake"

    def __init__(
        self,
        root: Any = None,
        voices: Any = None,
        *,
        device: str | None = None,
        half: bool = False,
        threads: int | None = None,
        environ: Mapping[str, str] | None = None,
        gate: threading.Event | None = None,
        load_gate: threading.Event | None = None,
        **knobs: Any,
    ):
        env = os.environ if environ is None else environ
        self.voices = voices
        self.threads = threads
        self.segment_s = float(knobs.get("segment_s", _env_float(env, "SEGMENT_S", 0.002)))
        self.phoneme_s = float(knobs.get("phoneme_s", _env_float(env, "PHONEME_S", 0.0)))
        self.hang_s = float(knobs.get("hang_s", _env_float(env, "HANG_S", 3600.0)))
        self.fail_on: str | None = knobs.get("fail_on", env.get(_PREFIX + "FAIL_ON") or None)
        self.hang_on: str | None = knobs.get("hang_on", env.get(_PREFIX + "HANG_ON") or None)
        self.empty_on: str | None = knobs.get("empty_on", env.get(_PREFIX + "EMPTY_ON") or None)
        self.gate = gate
        self.load_gate = load_gate
        self.loaded = False
        #: The text of every segment call, in call order (for tests: what was synthesised).
        self.calls: list[str] = []
        #: Set whenever a segment call begins.
        self.started = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self.active = 0  # calls running now

    def load(self) -> None:
        if self.load_gate is not None:
            self.load_gate.wait(self.hang_s)
        self.loaded = True

    def release(self) -> None:
        """Let every hanging call (``hang_on``) return, now and from now on, and open the gates."""
        self._release.set()
        for gate in (self.gate, self.load_gate):
            if gate is not None:
                gate.set()

    def synthesize(self, segment: Segment) -> np.ndarray:
        return self._run([segment])[0]

    def synthesize_batch(self, segments: Sequence[Segment]) -> list[np.ndarray]:
        """One call for the whole batch: one fixed latency plus the per-phoneme cost of the
        longest segment (a batched runtime pads to it); a fault in any segment fails the call."""
        return self._run(list(segments))

    def _run(self, segments: list[Segment]) -> list[np.ndarray]:
        with self._lock:
            self.calls.extend(s.text for s in segments)
            self.active += 1
        self.started.set()
        try:
            if self.gate is not None:
                self.gate.wait(self.hang_s)
            for s in segments:
                if self.voices is not None:
                    self.voices.style(s.voice, max(1, len(s.phonemes)))  # as the ONNX runtime does
            delay = self.segment_s + self.phoneme_s * max(len(s.phonemes) for s in segments)
            if delay > 0:
                time.sleep(delay)
            out = []
            for s in segments:
                if self.hang_on and self.hang_on in s.text:
                    self._release.wait(self.hang_s)
                if self.fail_on and self.fail_on in s.text:
                    raise RuntimeError(f"fake runtime fault on {self.fail_on!r}")
                empty = self.empty_on and self.empty_on in s.text
                out.append(np.zeros(0, dtype=np.float32) if empty else self.tone(s))
            return out
        finally:
            with self._lock:
                self.active -= 1

    @staticmethod
    def tone(segment: Segment) -> np.ndarray:
        """A deterministic 220 Hz tone, as long as the segment would be spoken."""
        seconds = max(1, len(segment.phonemes)) * SECONDS_PER_PHONEME / max(segment.speed, 0.1)
        t = np.arange(int(seconds * SAMPLE_RATE), dtype=np.float32) / SAMPLE_RATE
        return (0.1 * np.sin(2 * np.pi * 220.0 * t)).astype(np.float32)
