"""The data that crosses the engine's door: a request, its segments (with their sentence context),
the audio chunks that come back, and the limits of the model (sample rate, phonemes, speed)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

SAMPLE_RATE = 24_000
MAX_PHONEMES = 510
MIN_SPEED, MAX_SPEED = 0.5, 2.0


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
class WordSpan:
    """One word of a segment's text and the phonemes its G2P read for it, in context:
    ``text[start:end]`` is the word (a whitespace-separated token; in Japanese and Mandarin, which
    have no spaces, a word of the front end's), ``phonemes[ph_start:ph_end]`` what was said for it
    (empty for a word that is not spoken, such as a lone dash). Spans are in text order and their
    phoneme ranges never overlap; the characters between them (spaces, punctuation, pauses) belong
    to no word."""

    start: int
    end: int
    ph_start: int
    ph_end: int

    def shifted(self, chars: int, phonemes: int) -> WordSpan:
        return WordSpan(self.start + chars, self.end + chars, self.ph_start + phonemes, self.ph_end + phonemes)


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
    #: Each word of ``text`` and its span of ``phonemes``, from the one G2P call that made them
    #: (word timings are cut at them); None where the front end gave none (timings then share the
    #: spoken phonemes among the words by their letters).
    words: tuple[WordSpan, ...] | None = None


class PlannedSegments(Protocol):
    """The rest of a request's segments while they are being planned (the engine's planner feeds
    ``SynthesisRequest.segments``; event loop only)."""

    complete: bool

    async def get(self, index: int) -> Segment | None: ...
    async def whole(self) -> list[Segment]: ...
    def want(self, count: int) -> None: ...
    def listen(self, callback: Callable[[], None]) -> None: ...
    def remaining_phonemes(self, after: int) -> int: ...
    def close(self) -> None: ...


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
    # Filled by Backend.prepare(): the segments planned so far (the first one at least; the rest
    # are appended as ``plan`` reads them, so the list is whole once the stream has ended).
    segments: list[Segment] = field(default_factory=list)
    plan: PlannedSegments | None = field(default=None, repr=False, compare=False)
    created: float = field(default_factory=time.perf_counter)
    # An identifier for fairness across sessions (the WebSocket session id, or the request id).
    session: str = ""
    # The session's turn: on a socket with several contexts each new context counts one higher, and
    # the newest is the one being listened to (the scheduling policy's rule 9).
    turn: int = 0


@dataclass(slots=True)
class AudioChunk:
    """The audio of one segment, float32 mono in [-1, 1] at ``sample_rate``."""

    audio: np.ndarray
    index: int
    # The request's segments: all of them once its plan is complete (always so by the last chunk
    # unless the text's end was still being read), else those planned so far and one more.
    count: int
    text: str
    synth_seconds: float
    sample_rate: int = SAMPLE_RATE
    # Per-token frame durations when the runtime reports them (torch), else None.
    durations: np.ndarray | None = None
    phonemes: str = ""
    #: The segment's words and their phoneme spans (:attr:`Segment.words`).
    words: tuple[WordSpan, ...] | None = None

    @property
    def is_last(self) -> bool:
        return self.index == self.count - 1

    @property
    def seconds(self) -> float:
        return len(self.audio) / self.sample_rate


def clip_audio(audio: np.ndarray) -> np.ndarray:
    """float32, 1-D, finite, in [-1, 1] (the model can peak above 1)."""
    out = np.asarray(audio, dtype=np.float32).reshape(-1)
    # Most audio is in range already: two read-only passes say so (a NaN fails either comparison).
    if out.size and -1.0 <= out.min() and out.max() <= 1.0:
        return out
    if not np.isfinite(out).all():  # (one pass in C; nan_to_num costs ~0.2 ms of Python a call)
        out = np.nan_to_num(out, copy=False, nan=0.0, posinf=1.0, neginf=-1.0)
    np.minimum(out, 1.0, out=out)  # the ufuncs: np.clip's wrapper costs more than the work
    return np.maximum(out, -1.0, out=out)
