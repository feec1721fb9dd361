"""The two layers every runtime sits behind (docs/architecture.md).

* :class:`Synthesizer` — synchronous, one per runtime, an abstract base that declares every member
  the engine and the modes use. ``load()`` does the heavy work once; ``synthesize(segment)`` turns
  one :class:`Segment` into float32 audio at 24 kHz, clipped to [-1, 1]. What a runtime can do
  beyond that — a batch path, frame durations, being interrupted (:class:`Interrupt` /
  :class:`Interrupted`), calls that run alone on every core, thread safety, settable threads, its
  device and precision — is one declared value, :class:`Capabilities`, set by the runtime itself;
  the engine reads it and never probes. Synthesizers are never called on the event loop.
* :class:`Backend` — asynchronous, the only thing the server sees. ``stream(request)`` yields one
  :class:`AudioChunk` per segment, in text order, as soon as that segment is done. Closing or
  cancelling the iterator aborts the request's pending work (segments not yet started are never
  synthesised).

Errors carry a stable ``code`` (the wire contract's error codes) and say whether a retry helps.
"""

from __future__ import annotations

import abc
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

# The errors live in backends.api.errors; the layers import them from here (listed in __all__).
from backends.api.errors import (
    BackendFault,
    EmptyText,
    InvalidJSON,
    InvalidRequest,
    KokoroError,
    NotReady,
    Overloaded,
    SynthesisTimeout,
    TextTooLong,
    UnknownVoice,
    Unsupported,
)
from backends.api.interrupt import Interrupt, Interrupted

__all__ = [
    "MAX_PHONEMES", "MAX_SPEED", "MIN_SPEED", "SAMPLE_RATE", "AudioChunk", "Backend", "BackendCapabilities",
    "BackendFault", "BackendInfo", "BackendObserver", "Capabilities", "EmptyText", "Interrupt",
    "Interrupted", "InvalidJSON", "InvalidRequest", "KokoroError", "NotReady", "Overloaded", "Segment",
    "SentenceContext", "SynthesisRequest", "SynthesisTimeout", "Synthesizer", "TextTooLong", "UnknownVoice", "Unsupported",
    "VoiceCatalog", "clip_audio",
]

SAMPLE_RATE = 24_000
MAX_PHONEMES = 510
MIN_SPEED, MAX_SPEED = 0.5, 2.0


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SentenceContext:
    """The sentence a segment is a window of: its phonemes (the sentence's segments' phonemes joined
    by spaces) and the segment's share of them, ``phonemes[start:end]`` (the segment's own phonemes
    and, unless it is the last, the space after them). A runtime that declares
    :attr:`Capabilities.windowed` predicts the prosody of the whole sentence and decodes only the
    segment's frames, so the sentence keeps one intonation across the cut."""

    phonemes: str
    start: int
    end: int

    @property
    def first(self) -> bool:
        return self.start == 0

    @property
    def last(self) -> bool:
        return self.end >= len(self.phonemes)


@dataclass(frozen=True, slots=True)
class Segment:
    """One unit of synthesis: at most :data:`MAX_PHONEMES` phonemes of one voice and speed.

    ``voice`` is a voice name or a blend expression (``"a(2)+b(1)"``) that the runtime resolves
    through its :class:`~backends.assets.voices.VoiceStore`. ``ends``: the boundary the text was cut at
    after it — ``sentence`` (or the end of the text), ``clause`` (``, ; : —``) or ``phrase`` (between
    words inside a clause); the pause a reader makes there follows it (:mod:`backends.engine.joins`).
    ``sentence``: set by the planner only for a runtime that declares :attr:`Capabilities.windowed`
    — the segment is a window of that sentence's reading (:class:`SentenceContext`).
    """

    text: str
    phonemes: str
    voice: str
    speed: float = 1.0
    index: int = 0
    lang: str = "en-us"
    ends: str = "sentence"
    sentence: SentenceContext | None = None


@dataclass(slots=True)
class SynthesisRequest:
    """What a client asked for, already validated for type and range by the server layer."""

    text: str
    voice: str | None = None
    speed: float = 1.0
    lang: str | None = None
    request_id: str = ""
    # None: the server default (KOKORO_FAST_FIRST_SEGMENT); False: sentence-sized first segment.
    fast_first: bool | None = None
    # Filled by Backend.prepare()
    segments: list[Segment] = field(default_factory=list)
    created: float = field(default_factory=time.perf_counter)
    # An identifier for fairness across sessions (the WebSocket session id, or the request id).
    session: str = ""


@dataclass(slots=True)
class AudioChunk:
    """The audio of one segment, float32 mono in [-1, 1] at ``sample_rate``."""

    audio: np.ndarray
    index: int
    count: int
    text: str
    synth_seconds: float
    sample_rate: int = SAMPLE_RATE
    # Per-token frame durations when the runtime reports them (torch), else None.
    durations: np.ndarray | None = None
    phonemes: str = ""

    @property
    def is_last(self) -> bool:
        return self.index == self.count - 1

    @property
    def seconds(self) -> float:
        return len(self.audio) / self.sample_rate


# --------------------------------------------------------------------------------------------
# Protocols
# --------------------------------------------------------------------------------------------
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


@dataclass(frozen=True, slots=True)
class BackendCapabilities:
    """What a backend can do beyond plain synthesis, as the server needs to know it."""

    #: Chunks carry per-token frame durations (``AudioChunk.durations``): word timings work.
    word_timings: bool = False
    #: Segments of several requests may share one runtime call (concurrent mode, batch runtime).
    batching: bool = False


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """How a backend describes itself (``/ping``, ``/v1/models``, logs)."""

    runtime: str
    mode: str
    model: str
    device: str = "cpu"
    dtype: str = "float32"
    capabilities: BackendCapabilities = field(default_factory=BackendCapabilities)

    def describe(self) -> dict[str, Any]:
        return {"backend": self.runtime, "mode": self.mode, "model": self.model,
                "device": self.device, "dtype": self.dtype}


class VoiceCatalog(Protocol):
    """The loaded voices, as a client may name them."""

    default: str

    def names(self) -> list[str]: ...

    def languages(self) -> dict[str, str | None]:
        """``{voice: language}`` for every loaded voice (None: not known from its name)."""
        ...

    @property
    def aliases(self) -> dict[str, str]:
        """Extra names (``KOKORO_VOICE_ALIASES``): ``{alias: voice or blend}``."""
        ...

    def __contains__(self, spec: object) -> bool: ...


class BackendObserver(Protocol):
    """What a backend reports while it works (the server's metrics implement it). Called from
    worker threads (``segment_done``, ``batch_done``, ``interrupted``) and from the event loop
    (``queue_depth``, ``underrun``, ``load``); implementations must be thread-safe and never block."""

    def segment_done(self, synth_seconds: float, audio_seconds: float) -> None: ...

    def batch_done(self, size: int) -> None: ...

    def queue_depth(self, n: int) -> None: ...

    def underrun(self, seconds: float) -> None:
        """A segment was ready ``seconds`` after its listener's audio ran out (a gap a client
        playing in real time hears; see :class:`~backends.engine.schedule.Playout`)."""

    def interrupted(self, seconds: float) -> None:
        """A runtime call was interrupted after ``seconds`` so that a listener who hears nothing
        yet gets first audio sooner; its segment runs again (``backends/engine/policy.py``)."""

    def load(self, demanded: float, delivered: float) -> None:
        """The listeners in progress ask for ``demanded`` audio-seconds per second (one each: they
        play in real time); the runtime made ``delivered`` per second lately (event loop)."""


class NoObserver:
    """A :class:`BackendObserver` that ignores everything (a backend built without one)."""

    def segment_done(self, synth_seconds: float, audio_seconds: float) -> None: ...

    def batch_done(self, size: int) -> None: ...

    def queue_depth(self, n: int) -> None: ...

    def underrun(self, seconds: float) -> None: ...

    def interrupted(self, seconds: float) -> None: ...

    def load(self, demanded: float, delivered: float) -> None: ...


class Backend(Protocol):
    """The asynchronous engine, and the only thing the server knows of it (compare vLLM's
    ``EngineClient``). Every method is called on the event loop; none blocks it."""

    @property
    def info(self) -> BackendInfo:
        """Runtime, mode, model file, device, precision and capabilities."""

    @property
    def voices(self) -> VoiceCatalog:
        """The loaded voices and the default."""

    @property
    def ready(self) -> bool:
        """Loaded, warmed up and not closing."""

    @property
    def queue_depth(self) -> int:
        """Segments waiting for the runtime (all requests), not counting those being synthesised
        (in both modes; ``kokoro_queue_depth``)."""

    async def start(self) -> None:
        """Load the runtime (off the event loop) and warm it up."""

    async def aclose(self) -> None:
        """Stop accepting work, cancel what is queued, release threads."""

    async def check_health(self) -> None:
        """Raise :class:`NotReady` when the backend cannot take requests."""

    async def prepare(self, request: SynthesisRequest) -> SynthesisRequest:
        """Validate voice/length and plan segments (off the loop). Raises KokoroError."""

    def stream(self, request: SynthesisRequest) -> AsyncIterator[AudioChunk]:
        """Yield one chunk per segment of a prepared request, in order. Closing or cancelling
        the iterator aborts the request's pending segments."""

    def phonemize(self, text: str, lang: str) -> str:
        """The phonemes the runtime would read for ``text`` (word timings align with them).
        Blocking (G2P): call it from a worker thread."""


def clip_audio(audio: np.ndarray) -> np.ndarray:
    """float32, 1-D, finite, in [-1, 1] (the model can peak above 1)."""
    out = np.asarray(audio, dtype=np.float32).reshape(-1)
    out = np.nan_to_num(out, copy=False, nan=0.0, posinf=1.0, neginf=-1.0)
    return np.clip(out, -1.0, 1.0, out=out)
