"""The runtime interface: :class:`Synthesizer`, synchronous, one per runtime, and what each runtime
declares it can do (:class:`Capabilities`). Synthesizers are never called on the event loop."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from backends.api.errors import Unsupported
from backends.api.interrupt import Interrupt
from backends.api.types import SAMPLE_RATE, Segment


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a runtime can do, declared by the runtime itself (:attr:`Synthesizer.capabilities`).

    The engine and both modes read this one value and never probe a runtime for methods or
    attributes. ``device`` and ``dtype`` are final once the runtime is loaded (a runtime asked for
    ``auto`` resolves them in ``load()``); everything else is fixed from construction.
    """

    #: ``synthesize_batch`` is a real batched path (several segments in one forward pass).
    batch: bool = False
    #: ``synthesize_timed`` returns per-token frame durations (and ``synthesize_batch_timed``
    #: when ``batch`` is set too): word timings work.
    timed: bool = False
    #: An :class:`Interrupt` set while a call runs stops it with :class:`Interrupted`.
    interruptible: bool = False
    #: ``solo=True`` gives a call that runs alone every core (``set_threads(..., solo=n)``).
    solo_calls: bool = False
    #: Calls from several threads at once are safe and useful (parallel single calls).
    thread_safe: bool = False
    #: ``set_threads()`` before ``load()`` chooses the intra-op threads per call.
    threads_settable: bool = False
    #: A segment with a :attr:`Segment.sentence` is decoded as a window of that sentence's reading
    #: (one prosody for the sentence; consecutive windows meet without a pause).
    windowed: bool = False
    #: Where the model runs (``cpu``, ``cuda``...).
    device: str = "cpu"
    #: The precision the forward pass runs in.
    dtype: str = "float32"


class Synthesizer(abc.ABC):
    """A synchronous runtime: the model behind one declared interface.

    Every member the engine and the modes use is declared here; what a runtime can do beyond
    ``synthesize`` is its :attr:`capabilities`, and a method outside them raises
    :class:`Unsupported`.

    * ``load()`` does the heavy work once; ``loaded`` says whether it has run.
    * ``synthesize(segment)`` -> float32 audio at 24 kHz in [-1, 1] (empty when no phoneme of the
      segment is in the vocabulary). ``interrupt`` (``interruptible``): set while the call runs,
      the call raises :class:`Interrupted` and the runtime serves the next call as before.
      ``solo`` (``solo_calls``): the call runs alone, so it may use every core.
    * ``synthesize_timed(segment)`` (``timed``) -> (audio, int64 frame durations per input token:
      ``<bos>``, each vocabulary phoneme, ``<eos>``; 600 samples a frame; they sum to the audio's
      frames).
    * ``synthesize_batch(segments)`` (``batch``) -> one output per segment, in input order;
      ``synthesize_batch_timed`` (``batch`` and ``timed``) likewise with durations.
    * ``set_threads(threads, solo=...)`` (``threads_settable``): intra-op threads per call, and
      for a call that runs alone, chosen before ``load()``; ``threads`` / ``solo_threads`` read
      back the choice (``threads`` None: the runtime's own default, every core).

    Threading: every method may block for a long time — call it from a worker thread, never the
    event loop. Calls from several threads at once are allowed only when ``thread_safe``;
    otherwise the caller runs one call at a time. ``Interrupt.set()`` may come from any thread.
    """

    name: str = "runtime"
    #: The model file (or name) the runtime loads, for ``/ping``.
    model_name: str = ""
    sample_rate: int = SAMPLE_RATE
    threads: int | None = None
    solo_threads: int | None = None

    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities:
        """What this runtime can do (see :class:`Capabilities`)."""

    @property
    @abc.abstractmethod
    def loaded(self) -> bool:
        """Whether ``load()`` has run."""

    @abc.abstractmethod
    def load(self) -> None:
        """Load the model (seconds; blocking)."""

    @abc.abstractmethod
    def synthesize(self, segment: Segment, *, interrupt: Interrupt | None = None, solo: bool = False) -> np.ndarray:
        """One segment's audio (see the class docstring)."""

    def synthesize_timed(
        self, segment: Segment, *, interrupt: Interrupt | None = None, solo: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """(audio, frame durations) of one segment, when the runtime is ``timed``."""
        raise Unsupported(f"the {self.name} runtime reports no durations")

    def synthesize_batch(self, segments: Sequence[Segment]) -> list[np.ndarray]:
        """Several segments in one call, outputs in input order, when the runtime has ``batch``."""
        raise Unsupported(f"the {self.name} runtime has no batch path")

    def synthesize_batch_timed(self, segments: Sequence[Segment]) -> list[tuple[np.ndarray, np.ndarray]]:
        """``synthesize_batch`` with each segment's frame durations (``batch`` and ``timed``)."""
        raise Unsupported(f"the {self.name} runtime has no timed batch path")

    def set_threads(self, threads: int | None, *, solo: int | None = None) -> None:
        """Choose the intra-op threads per call (and, with ``solo_calls``, for a call that runs
        alone) before ``load()``. Raises :class:`Unsupported` when not ``threads_settable``."""
        if not self.capabilities.threads_settable:
            raise Unsupported(f"the {self.name} runtime's threads cannot be set")
        if self.loaded:
            raise RuntimeError(f"the {self.name} runtime is loaded: its threads are fixed")
        self.threads = threads
        self.solo_threads = solo if self.capabilities.solo_calls else None
