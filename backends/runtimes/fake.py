"""A stand-in runtime for tests, load runs and soak runs — **not for serving speech**.

:class:`FakeSynthesizer` implements the whole :class:`~backends.api.Synthesizer` interface
without a model: each segment becomes a quiet 220 Hz tone whose length follows its phoneme count
and speed (75 ms a phoneme at speed 1) and whose level follows its text, so a chunk can be traced
to its segment (:meth:`FakeSynthesizer.tone`), after a configurable latency. It lets the whole
server — text pipeline, backends, sessions, limits, metrics — run at full speed on any machine,
with knobs for the faults a real runtime can have (compare livekit-agents' ``tests/fake_tts.py``).

Select it with ``KOKORO_BACKEND=fake`` (hidden from ``--help``; the model directory is still used
for the voices and the phoneme vocabulary). Its fault knobs are the ``fake_*`` fields of
:class:`~backends.config.BackendConfig` (``KOKORO_FAKE_SEGMENT_S``, ``KOKORO_FAKE_PHONEME_S``,
``KOKORO_FAKE_FAIL_ON``, ``KOKORO_FAKE_HANG_ON``, ``KOKORO_FAKE_HANG_S``, ``KOKORO_FAKE_EMPTY_ON``,
``KOKORO_FAKE_BATCH``); keyword arguments of the same names without the prefix override them:

=================  ===========================================================================
``segment_s``      latency of one runtime call, seconds (default ``0.002``)
``phoneme_s``      extra latency per phoneme of the call's longest segment, seconds (default ``0``)
``fail_on``        a substring: a call with a segment whose text contains it raises ``RuntimeError``
``hang_on``        a substring: a segment whose text contains it blocks until :meth:`release`
                   (or ``hang_s``, default 3600 s)
``empty_on``       a substring: a segment whose text contains it yields no samples
``batch``          a batch path (``synthesize_batch``; default off)
=================  ===========================================================================

Its capabilities are knobs too (keyword arguments): ``batch``, ``timed`` (``synthesize_timed``:
per-token frame durations that sum to the tone's frames; default off), ``interruptible``
(default on), ``solo_calls`` (default on), ``thread_safe`` (default on), ``device`` (``cpu``);
and ``gain`` scales the tone (above 1/0.15 it peaks above full scale, as the model can).
**By default it declares what the ONNX runtime declares** (no batch path, interruptible, solo
calls, thread-safe, threads settable), so a load rehearsal on the fake takes production's
scheduler path; a CPU device also means the concurrent mode batches it only with
``KOKORO_BATCH_ON_CPU``, as it would a real runtime on a CPU.

For tests that drive a request step by step: ``held=True`` makes every call wait until the test
lets it finish — :meth:`step` (any one waiting call) or :meth:`finish` (the call of a segment by
its text, now and later) — or an :class:`~backends.api.Interrupt` stops it; ``gate`` (a
:class:`threading.Event`: every call waits on it) and ``load_gate`` (``load()`` waits on it: a
model still loading). What was run is recorded: ``calls`` (segment texts in call order),
``batches`` (the texts of each call), ``solo`` (texts of calls run alone), ``interrupted``.
Each record keeps its last ``record_limit`` entries (older ones are dropped in halves), so a server
on the fake runtime does not grow with the calls it has made (a churn or soak run measures the
server, not the stand-in's notes).
A call that overlaps another on a runtime declared not ``thread_safe`` raises ``RuntimeError``.

Threading: thread-safe (by default); the latency is a wait on the calling worker thread, so it
behaves like a runtime that releases the GIL. Never call it on the event loop.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from backends.api import SAMPLE_RATE, Capabilities, Interrupt, Interrupted, Segment, Synthesizer
from backends.config import BackendConfig

#: Seconds of tone per phoneme at speed 1 (Kokoro speaks roughly 12-15 phonemes a second).
SECONDS_PER_PHONEME = 0.075
FRAME = 600  # samples per duration frame, as Kokoro's
KNOBS = ("segment_s", "phoneme_s", "hang_s", "fail_on", "hang_on", "empty_on", "batch")


class FakeSynthesizer(Synthesizer):
    """A model-free runtime with latency, failure and capability knobs (see the module docstring)."""

    name = "fake"
    sample_rate = SAMPLE_RATE
    model_name = "fake"
    #: Entries kept in each of ``calls``, ``batches``, ``solo`` and ``interrupted``.
    record_limit = 20_000

    def __init__(
        self,
        voices: Any = None,
        *,
        config: BackendConfig | None = None,
        timed: bool = False,
        interruptible: bool = True,
        solo_calls: bool = True,
        thread_safe: bool = True,
        device: str = "cpu",
        gain: float = 1.0,
        held: bool = False,
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
        self._capabilities = Capabilities(
            batch=bool(values["batch"]), timed=timed, interruptible=interruptible, solo_calls=solo_calls,
            thread_safe=thread_safe, threads_settable=True, device=device,
        )
        self.gain = gain
        self.held = held
        self.gate = gate
        self.load_gate = load_gate
        self._loaded = False
        self.calls: list[str] = []
        self.batches: list[list[str]] = []
        self.solo: list[str] = []
        self.interrupted: list[str] = []
        #: Set whenever a call begins.
        self.started = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._held = threading.Condition(self._lock)
        self._steps = 0
        self._finished: set[str] = set()
        self.active = 0  # calls running now
        self.max_active = 0

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self) -> None:
        if self.load_gate is not None:
            self.load_gate.wait(self.hang_s)
        self._loaded = True

    # -- driving it from a test -------------------------------------------------------------------
    def release(self) -> None:
        """Let every hanging call (``hang_on``) return, now and from now on, and open the gates."""
        self._release.set()
        for gate in (self.gate, self.load_gate):
            if gate is not None:
                gate.set()

    def step(self) -> None:
        """``held``: let one waiting (or the next) call finish."""
        with self._held:
            self._steps += 1
            self._held.notify_all()

    def finish(self, text: str) -> None:
        """``held``: let the call of the segment whose text is ``text`` finish, now and later."""
        with self._held:
            self._finished.add(text)
            self._held.notify_all()

    # -- the interface ----------------------------------------------------------------------------
    def synthesize(self, segment: Segment, *, interrupt: Interrupt | None = None, solo: bool = False) -> np.ndarray:
        return self._run([segment], interrupt, solo)[0][0]

    def synthesize_timed(
        self, segment: Segment, *, interrupt: Interrupt | None = None, solo: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        if not self._capabilities.timed:
            return super().synthesize_timed(segment)
        return self._run([segment], interrupt, solo)[0]

    def synthesize_batch(self, segments: Sequence[Segment]) -> list[np.ndarray]:
        """One call for the whole batch: one fixed latency plus the per-phoneme cost of the
        longest segment (a batched runtime pads to it); a fault in any segment fails the call."""
        if not self._capabilities.batch:
            return super().synthesize_batch(segments)
        return [audio for audio, _ in self._run(list(segments))]

    def synthesize_batch_timed(self, segments: Sequence[Segment]) -> list[tuple[np.ndarray, np.ndarray]]:
        if not (self._capabilities.batch and self._capabilities.timed):
            return super().synthesize_batch_timed(segments)
        return self._run(list(segments))

    def _run(
        self, segments: list[Segment], interrupt: Interrupt | None = None, solo: bool = False
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        stop = threading.Event()
        if interrupt is not None and self._capabilities.interruptible:
            interrupt.on_set(lambda: self._wake(stop))
        with self._lock:
            self.calls.extend(s.text for s in segments)
            self.batches.append([s.text for s in segments])
            if solo and self._capabilities.solo_calls:
                self.solo.extend(s.text for s in segments)
            for record in (self.calls, self.batches, self.solo, self.interrupted):
                if len(record) > self.record_limit:
                    del record[: len(record) // 2]
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            overlapping = self.active > 1 and not self._capabilities.thread_safe
        self.started.set()
        try:
            if overlapping:
                raise RuntimeError("the fake runtime is not thread_safe and was called from two threads at once")
            if self.gate is not None:
                self.gate.wait(self.hang_s)
            for s in segments:
                if self.voices is not None:
                    self.voices.style(s.voice, max(1, len(s.phonemes)))  # as the ONNX runtime does
            if self.held:
                self._wait_held(segments, stop)
            delay = self.segment_s + self.phoneme_s * max(len(s.phonemes) for s in segments)
            if delay > 0:
                stop.wait(delay)
            if stop.is_set():
                with self._lock:
                    self.interrupted.extend(s.text for s in segments)
                raise Interrupted("the call was interrupted")
            out = []
            for s in segments:
                if self.hang_on and self.hang_on in s.text:
                    self._release.wait(self.hang_s)
                if self.fail_on and self.fail_on in s.text:
                    raise RuntimeError(f"fake runtime fault on {self.fail_on!r}")
                empty = self.empty_on and self.empty_on in s.text
                audio = np.zeros(0, dtype=np.float32) if empty else self.gain * self.tone(s)
                out.append((audio, self.durations(s, len(audio))))
            return out
        finally:
            with self._lock:
                self.active -= 1

    def _wake(self, stop: threading.Event) -> None:
        stop.set()
        with self._held:
            self._held.notify_all()

    def _wait_held(self, segments: list[Segment], stop: threading.Event) -> None:
        end = time.monotonic() + min(self.hang_s, 60.0)
        with self._held:
            while not stop.is_set():
                if any(s.text in self._finished for s in segments):
                    return
                if self._steps:
                    self._steps -= 1
                    return
                if not self._held.wait(timeout=max(0.0, end - time.monotonic())):
                    raise RuntimeError("the test never let this held call finish")

    # -- the audio ------------------------------------------------------------------------------
    @staticmethod
    def tone(segment: Segment) -> np.ndarray:
        """A deterministic 220 Hz tone, as long as the segment would be spoken, at a level (0.05 to
        0.15) that follows the segment's text."""
        seconds = max(1, len(segment.phonemes)) * SECONDS_PER_PHONEME / max(segment.speed, 0.1)
        level = 0.05 + 0.1 * (zlib.crc32(segment.text.encode()) % 1000) / 1000.0
        t = np.arange(int(seconds * SAMPLE_RATE), dtype=np.float32) / SAMPLE_RATE
        return (level * np.sin(2 * np.pi * 220.0 * t)).astype(np.float32)

    @staticmethod
    def durations(segment: Segment, samples: int) -> np.ndarray:
        """Frame durations for ``<bos>``, each phoneme and ``<eos>`` that sum to the audio's frames
        (``samples / 600``, rounded up), spread evenly."""
        tokens, frames = len(segment.phonemes) + 2, -(-samples // FRAME)
        base, extra = divmod(frames, tokens)
        return np.array([base + (i < extra) for i in range(tokens)], dtype=np.int64)
