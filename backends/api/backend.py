"""The backend interface, the only thing the server sees: :class:`Backend` (asynchronous: start,
stream, health, voices, close), what it describes of itself, and the observer it reports to."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from backends.api.types import AudioChunk, SynthesisRequest


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

    def load(self, demanded: float, delivered: float, *, overloaded: bool = False) -> None:
        """Over the load window, the streams in progress asked for ``demanded`` audio-seconds per
        second (one each: listeners play in real time) and the runtime made ``delivered``;
        ``overloaded``: demand exceeds supply (``backends/engine/load.py``; event loop)."""


class NoObserver:
    """A :class:`BackendObserver` that ignores everything (a backend built without one)."""

    def segment_done(self, synth_seconds: float, audio_seconds: float) -> None: ...

    def batch_done(self, size: int) -> None: ...

    def queue_depth(self, n: int) -> None: ...

    def underrun(self, seconds: float) -> None: ...

    def interrupted(self, seconds: float) -> None: ...

    def load(self, demanded: float, delivered: float, *, overloaded: bool = False) -> None: ...


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

    def admit(self, session: str | None = None) -> None:
        """Raise :class:`Overloaded` (or :class:`NotReady`) if a new request of ``session`` (None: a
        request of its own, as every HTTP request is) would be refused now — the admission checks of
        :meth:`prepare` and :meth:`stream`, before anything of the request is read, so a refusal
        costs the server next to nothing. Cheap and synchronous (event loop); passing it admits
        nothing: :meth:`prepare` and :meth:`stream` check again."""

    async def prepare(self, request: SynthesisRequest) -> SynthesisRequest:
        """Validate voice/length and plan segments (off the loop). Raises KokoroError."""

    def stream(self, request: SynthesisRequest) -> AsyncIterator[AudioChunk]:
        """Yield one chunk per segment of a prepared request, in order. Closing or cancelling
        the iterator aborts the request's pending segments."""

    def table_sizes(self) -> dict[str, int]:
        """Entries in each table the backend keeps per session, request or runtime call, by a
        fixed name (``kokoro_state_entries``): every one is 0 once the requests have ended and their
        audio has run out, so a table that grows at rest is state kept past its session."""
