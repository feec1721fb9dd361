"""A stand-in runtime for tests, load runs and soak runs — **not for serving speech**.

:class:`FakeSynthesizer` implements the real :class:`~backends.base.Synthesizer` interface (and
``synthesize_batch``) without a model: each segment becomes a quiet sine tone whose length follows
its phoneme count and speed, after a configurable latency. It lets the whole server — text
pipeline, backends, sessions, limits, metrics — run at full speed on any machine, and it has knobs
for the faults a real runtime can have (compare livekit-agents' ``tests/fake_tts.py``).

Select it with ``KOKORO_BACKEND=fake`` (hidden from ``--help``; the model directory is still used
for the voices and the phoneme vocabulary). Its knobs are the ``fake_*`` fields of
:class:`~backends.config.BackendConfig` (``KOKORO_FAKE_SEGMENT_S``, ``KOKORO_FAKE_PHONEME_S``,
``KOKORO_FAKE_FAIL_ON``, ``KOKORO_FAKE_HANG_ON``, ``KOKORO_FAKE_HANG_S``, ``KOKORO_FAKE_EMPTY_ON``);
keyword arguments of the same names without the prefix override them:

=================  ===========================================================================
``segment_s``      latency of one runtime call, seconds (default ``0.002``)
``phoneme_s``      extra latency per phoneme of the call's longest segment, seconds (default ``0``)
``fail_on``        a substring: a segment whose text contains it raises ``RuntimeError``
``hang_on``        a substring: a segment whose text contains it blocks until :meth:`release`
                   (or ``hang_s``, default 3600 s)
``empty_on``       a substring: a segment whose text contains it yields no samples
=================  ===========================================================================

It runs on the CPU (``device = "cpu"``), so the concurrent mode batches it only with
``KOKORO_BATCH_ON_CPU``, as it would a real runtime on a CPU.

Two more knobs are for tests that drive a request step by step, as keyword arguments or set on
the instance at any time: ``gate`` (a :class:`threading.Event`: every segment call waits on it — a
segment held mid-synthesis) and ``load_gate`` (``load()`` waits on it — a model still loading).

Like the ONNX runtime, a single call can be interrupted (``interruptible``): an
:class:`~backends.base.Interrupt` set during the latency ends the call with
:class:`~backends.base.Interrupted`.

Threading: thread-safe (``thread_safe = True``); the latency is a wait on the calling
worker thread, so it behaves like a runtime that releases the GIL. Never call it on the event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import SAMPLE_RATE, Interrupt, Interrupted, Segment
from .config import BackendConfig

#: Seconds of tone per phoneme at speed 1 (Kokoro speaks roughly 12-15 phonemes a second).
SECONDS_PER_PHONEME = 0.075
KNOBS = ("segment_s", "phoneme_s", "hang_s", "fail_on", "hang_on", "empty_on")


class FakeSynthesizer:
    """A model-free runtime with latency and failure knobs (see the module docstring)."""

    name = "fake"
    sample_rate = SAMPLE_RATE
    thread_safe = True
    interruptible = True
    model_name = "fake"
    device = "cpu"
    dtype = "float32"

    def __init__(
        self,
        voices: Any = None,
        *,
        config: BackendConfig | None = None,
        gate: threading.Event | None = None,
        load_gate: threading.Event | None = None,
        **knobs: Any,
    ):
        unknown = set(knobs) - set(KNOBS)
        if unknown:
            raise TypeError(f"unknown fake runtime knob(s): {', '.join(sorted(unknown))}")
        config = config if config is not None else BackendConfig.defaults()
        values = {name: knobs.get(name, getattr(config, f"fake_{name}")) for name in KNOBS}
        self.voices = voices
        self.threads = config.threads
        self.segment_s = float(values["segment_s"])
        self.phoneme_s = float(values["phoneme_s"])
        self.hang_s = float(values["hang_s"])
        self.fail_on: str | None = values["fail_on"] or None
        self.hang_on: str | None = values["hang_on"] or None
        self.empty_on: str | None = values["empty_on"] or None
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

    def synthesize(self, segment: Segment, *, interrupt: Interrupt | None = None) -> np.ndarray:
        """One segment; an ``interrupt`` set during the latency stops the call (:class:`Interrupted`)."""
        return self._run([segment], interrupt)[0]

    def synthesize_batch(self, segments: Sequence[Segment]) -> list[np.ndarray]:
        """One call for the whole batch: one fixed latency plus the per-phoneme cost of the
        longest segment (a batched runtime pads to it); a fault in any segment fails the call."""
        return self._run(list(segments))

    def _run(self, segments: list[Segment], interrupt: Interrupt | None = None) -> list[np.ndarray]:
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
            stop = threading.Event()
            if interrupt is not None:
                interrupt.on_set(stop.set)
            if delay > 0:
                stop.wait(delay)
            if interrupt is not None and interrupt.is_set:
                raise Interrupted("the call was interrupted")
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
