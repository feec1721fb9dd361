"""The two layers every runtime sits behind (docs/architecture.md).

* :class:`Synthesizer` — synchronous, one per runtime. ``load()`` does the heavy work once;
  ``synthesize(segment)`` turns one :class:`Segment` into float32 audio at 24 kHz, clipped to
  [-1, 1]. A runtime may also offer ``synthesize_batch(segments)`` (outputs in input order),
  ``synthesize_timed(segment)`` (audio plus per-token frame durations) and
  ``synthesize_batch_timed(segments)``, and say what it runs on (``device``, ``dtype``), whether it
  is ``loaded`` and its intra-op ``threads`` (settable before ``load()``). Synthesizers are never
  called on the event loop; a synthesizer need not be thread-safe — the backends call one at a
  time unless the runtime says otherwise (``thread_safe``). A runtime that can stop a running call
  (``interruptible``) takes an :class:`Interrupt` as ``synthesize(segment, interrupt=...)`` and
  raises :class:`Interrupted` when it was set before the call finished.
* :class:`Backend` — asynchronous, the only thing the server sees. ``stream(request)`` yields one
  :class:`AudioChunk` per segment, in text order, as soon as that segment is done. Closing or
  cancelling the iterator aborts the request's pending work (segments not yet started are never
  synthesised).

Errors carry a stable ``code`` (the wire contract's error codes) and say whether a retry helps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

SAMPLE_RATE = 24_000
MAX_PHONEMES = 510
MIN_SPEED, MAX_SPEED = 0.5, 2.0


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------
class KokoroError(Exception):
    """Base of every error the platform reports to a client.

    ``code`` is the wire-level error code, ``status`` the HTTP status it maps to, and
    ``retryable`` says whether sending the same request again can succeed.
    """

    code = "internal_error"
    status = 500
    retryable = False

    def __init__(self, message: str, *, code: str | None = None, retryable: bool | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


class InvalidRequest(KokoroError):
    code, status = "invalid_request", 400


class InvalidJSON(InvalidRequest):
    code = "invalid_json"


class EmptyText(InvalidRequest):
    code = "empty_text"


class UnknownVoice(KokoroError):
    code, status = "unknown_voice", 404


class TextTooLong(KokoroError):
    code, status = "text_too_long", 413


class NotReady(KokoroError):
    code, status, retryable = "not_ready", 503, True


class Overloaded(KokoroError):
    code, status, retryable = "overloaded", 503, True


class SynthesisTimeout(KokoroError):
    code, status, retryable = "timeout", 504, True


class BackendFault(KokoroError):
    """The runtime failed on a request that was valid; the server itself stays up."""

    code, status, retryable = "backend_error", 500, True


class Unsupported(KokoroError):
    code, status = "unsupported", 501


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Segment:
    """One unit of synthesis: at most :data:`MAX_PHONEMES` phonemes of one voice and speed.

    ``voice`` is a voice name or a blend expression (``"a(2)+b(1)"``) that the runtime resolves
    through its :class:`~backends.voices.VoiceStore`. ``ends``: the boundary the text was cut at
    after it — ``sentence`` (or the end of the text), ``clause`` (``, ; : —``) or ``phrase`` (between
    words inside a clause); the pause a reader makes there follows it (:mod:`backends.joins`).
    """

    text: str
    phonemes: str
    voice: str
    speed: float = 1.0
    index: int = 0
    lang: str = "en-us"
    ends: str = "sentence"


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


class Interrupted(Exception):
    """A runtime call stopped early because its :class:`Interrupt` was set. Never reaches a
    client: the scheduler that set it runs the segment again."""


class Interrupt:
    """Asks one running runtime call to stop early. Thread-safe: ``set()`` is called on the event
    loop while the call runs on a worker thread. An interruptible runtime registers how it stops
    (ONNX Runtime: ``RunOptions.terminate``) with :meth:`on_set`; a hook registered after
    ``set()`` runs at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._hooks: list[Callable[[], None]] = []

    @property
    def is_set(self) -> bool:
        return self._set

    def on_set(self, hook: Callable[[], None]) -> None:
        with self._lock:
            if not self._set:
                self._hooks.append(hook)
                return
        hook()

    def set(self) -> None:
        with self._lock:
            self._set, hooks, self._hooks = True, self._hooks, []
        for hook in hooks:
            hook()


# --------------------------------------------------------------------------------------------
# Protocols
# --------------------------------------------------------------------------------------------
@runtime_checkable
class Synthesizer(Protocol):
    """A synchronous runtime. Every method may block for a long time: call it from a thread."""

    name: str
    sample_rate: int
    #: True when concurrent calls from several threads are safe (and useful).
    thread_safe: bool

    def load(self) -> None: ...

    def synthesize(self, segment: Segment) -> np.ndarray: ...


@runtime_checkable
class BatchSynthesizer(Synthesizer, Protocol):
    def synthesize_batch(self, segments: Sequence[Segment]) -> list[np.ndarray]: ...


@dataclass(frozen=True, slots=True)
class Capabilities:
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
    capabilities: Capabilities = field(default_factory=Capabilities)

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
    (``queue_depth``, ``underrun``); implementations must be thread-safe and never block."""

    def segment_done(self, synth_seconds: float, audio_seconds: float) -> None: ...

    def batch_done(self, size: int) -> None: ...

    def queue_depth(self, n: int) -> None: ...

    def underrun(self, seconds: float) -> None:
        """A segment was ready ``seconds`` after its listener's audio ran out (a gap a client
        playing in real time hears; see :class:`~backends.schedule.Playout`)."""

    def interrupted(self, seconds: float) -> None:
        """A runtime call was interrupted after ``seconds`` so that a listener who hears nothing
        yet gets first audio sooner; its segment runs again (``backends/deadlines.py``)."""


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
        """Segments waiting for the runtime (all requests)."""

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
