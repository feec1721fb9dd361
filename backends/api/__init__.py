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

from backends.api.backend import (
    Backend,
    BackendCapabilities,
    BackendInfo,
    BackendObserver,
    NoObserver,
    VoiceCatalog,
)
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
from backends.api.synthesizer import Capabilities, Synthesizer
from backends.api.types import (
    MAX_PHONEMES,
    MAX_SPEED,
    MIN_SPEED,
    SAMPLE_RATE,
    AudioChunk,
    PlannedSegments,
    Segment,
    SentenceContext,
    SynthesisRequest,
    WordSpan,
    clip_audio,
)

__all__ = [
    "MAX_PHONEMES", "MAX_SPEED", "MIN_SPEED", "SAMPLE_RATE", "AudioChunk", "Backend", "BackendCapabilities",
    "BackendFault", "BackendInfo", "BackendObserver", "Capabilities", "EmptyText", "Interrupt",
    "Interrupted", "InvalidJSON", "InvalidRequest", "KokoroError", "NoObserver", "NotReady", "Overloaded", "PlannedSegments", "Segment",
    "SentenceContext", "SynthesisRequest", "SynthesisTimeout", "Synthesizer", "TextTooLong", "UnknownVoice", "Unsupported",
    "VoiceCatalog", "WordSpan", "clip_audio",
]
