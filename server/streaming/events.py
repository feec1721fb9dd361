"""What a streaming-input stream (:class:`server.streaming.text_stream.TextStream`) is told and tells: its
options, and the events a protocol mapper reads from it, in input order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from backends.api import SAMPLE_RATE, KokoroError
from server.pipeline.word_timings import WordTiming

#: The wire encodings of ``backends.audio.wire``.
Encoding = Literal["pcm", "f32", "mulaw", "alaw", "mp3"]


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """How one stream speaks. ``voice`` None: the server's default voice."""

    voice: str | None = None
    speed: float = 1.0
    lang: str | None = None
    sample_rate: int = SAMPLE_RATE
    encoding: Encoding = "pcm"
    #: MP3's bit rate in b/s (None: the encoder's default).
    bit_rate: int | None = None
    word_timings: bool = False
    #: The first piece of a turn may end at a clause once it holds this many words (None: off).
    first_clause_words: int | None = 6
    #: The session's turn (``SynthesisRequest.turn``): a socket's newer contexts count higher.
    turn: int = 0


@dataclass(frozen=True, slots=True)
class Audio:
    """One segment's audio, encoded, on the turn's clock (seconds from its first sample)."""

    data: bytes
    offset: float
    duration: float
    text: str
    words: tuple[WordTiming, ...] = ()


@dataclass(frozen=True, slots=True)
class Flushed:
    mark: Any = None


@dataclass(frozen=True, slots=True)
class Cleared:
    mark: Any = None


@dataclass(frozen=True, slots=True)
class Failed:
    """One piece could not be spoken; the text it held and the error. The stream goes on."""

    error: KokoroError
    text: str = ""


@dataclass(frozen=True, slots=True)
class Done:
    """After ``end()``: everything was spoken. ``audio_seconds``: the turn's clock at the end."""

    audio_seconds: float = 0.0


Event = Audio | Flushed | Cleared | Failed | Done
