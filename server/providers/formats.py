"""The providers' audio formats, mapped in one place onto the server's encoders
(``backends.audio.wire``, ``backends.audio.encoders``): Deepgram's
``encoding``/``container``/``sample_rate``/``bit_rate`` query, Cartesia's ``output_format`` object,
ElevenLabs' ``output_format`` names.

Each parser returns a :class:`WireFormat` or raises :class:`FormatError` (a 400 whose message says
what is supported; each route answers it in its provider's shape, at the WebSocket upgrade as an
HTTP 400 so that clients show it as a non-retryable error).

==============  ==================================================================================
Deepgram        ``linear16`` (any of :data:`~backends.audio.wire.WIRE_RATES`, default 24000),
                ``mulaw``/``alaw`` (8000 default, 16000), ``container`` ``wav`` (the REST default
                for these) or ``none``; REST also ``mp3`` (22050 Hz, ``bit_rate`` 32000 or 48000,
                48000 default), ``opus`` (Ogg, 48000), ``flac``, ``aac`` (22050). No query on
                REST: mp3 (Deepgram's default); the WebSocket: linear16 at 24000, raw only.
Cartesia        ``container`` ``raw`` (every route) with ``encoding`` ``pcm_s16le``, ``pcm_f32le``,
                ``pcm_mulaw``, ``pcm_alaw``; on ``/tts/bytes`` also ``wav`` (same encodings) and
                ``mp3`` (``bit_rate`` 32000-192000, default 128000); ``sample_rate`` 8000, 16000,
                22050, 24000, 44100, 48000.
ElevenLabs      ``pcm_<rate>`` (8000-48000), ``ulaw_8000``, ``alaw_8000``, ``mp3_<rate>_<kbps>``
                (22050_32, 24000_48, 44100_32/64/96/128/192), HTTP also ``wav_<rate>``; default
                ``mp3_44100_128`` (the service's).
==============  ==================================================================================
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

from backends.api import InvalidRequest
from backends.audio.encoders import Encoder, make_encoder
from backends.audio.wire import BYTES_PER_SAMPLE, CONTENT_TYPES, WIRE_RATES, wire_encoder

__all__ = ["BYTES_PER_SAMPLE", "FormatError", "WireFormat", "cartesia_format", "deepgram_format", "elevenlabs_format"]

#: Formats coded by ``backends.audio.encoders`` (whole-file or Ogg/ADTS containers).
_FILE_FORMATS = ("opus", "flac", "aac")
_WAV_CODES = {"pcm": (1, 16), "f32": (3, 32), "mulaw": (7, 8), "alaw": (6, 8)}
_RATES = ", ".join(map(str, WIRE_RATES))


class FormatError(InvalidRequest):
    """An audio format this server (or the provider) does not produce."""


@dataclass(frozen=True, slots=True)
class WireFormat:
    """One stream's audio on the wire: ``encoding`` at ``sample_rate``, MP3 at ``bit_rate`` (b/s),
    raw or after a streaming WAV header (``container="wav"``)."""

    encoding: str
    sample_rate: int
    bit_rate: int | None = None
    container: str = "none"

    @property
    def bytes_per_sample(self) -> int | None:
        """Bytes per sample of the raw encodings; None for compressed ones."""
        return BYTES_PER_SAMPLE.get(self.encoding)

    def seconds(self, data: bytes) -> float | None:
        """The audio length of a raw piece (None for compressed encodings)."""
        width = self.bytes_per_sample
        return None if width is None else len(data) / width / self.sample_rate

    @property
    def content_type(self) -> str:
        if self.container == "wav":
            return "audio/wav"
        if self.encoding == "pcm":
            return f"audio/pcm;rate={self.sample_rate}"
        if self.encoding in CONTENT_TYPES:
            return CONTENT_TYPES[self.encoding] if self.encoding == "mp3" else f"{CONTENT_TYPES[self.encoding]};rate={self.sample_rate}"
        if self.encoding in _FILE_FORMATS:
            return make_encoder(self.encoding, self.sample_rate).content_type
        return "application/octet-stream"

    def encoder(self) -> Encoder:
        """A fresh streaming encoder; with ``container="wav"`` its first bytes are the header."""
        if self.encoding in _FILE_FORMATS:
            return make_encoder(self.encoding, self.sample_rate)
        inner = wire_encoder(self.encoding, self.sample_rate, self.bit_rate)
        return _WavWrapped(inner, self.encoding) if self.container == "wav" else inner


class _WavWrapped:
    """A streaming WAV header (unknown sizes) before a raw encoder's bytes."""

    def __init__(self, inner: Encoder, encoding: str):
        self.inner = inner
        self.format = "wav"
        self.content_type = "audio/wav"
        self.sample_rate = inner.sample_rate
        self._header: bytes = wav_header(encoding, inner.sample_rate)

    def _take_header(self) -> bytes:
        header, self._header = self._header, b""
        return header

    def encode(self, chunk: Any) -> bytes:
        return self._take_header() + self.inner.encode(chunk)

    def flush(self) -> bytes:
        return self._take_header() + self.inner.flush()

    def close(self) -> None:
        self.inner.close()


def wav_header(encoding: str, rate: int) -> bytes:
    """A 44-byte WAV header for ``encoding`` (PCM 16 bit, float 32 bit, G.711 μ-law/A-law 8 bit),
    mono, with the streaming sizes 0xFFFFFFFF (read to the end)."""
    code, bits = _WAV_CODES[encoding]
    align = bits // 8
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, code, 1, rate, rate * align, align, bits)
            + b"data" + struct.pack("<I", 0xFFFFFFFF))


# -- Deepgram -----------------------------------------------------------------------------------
def _int(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)  # the Deepgram SDK sends numbers as floats ("8000.0")
    except ValueError:
        number = math.nan
    if not number.is_integer():
        raise FormatError(f"Failed to deserialize query parameters: `{name}` must be an integer")
    return int(number)


def deepgram_format(query: Any, *, http: bool) -> WireFormat:
    """Deepgram's ``encoding``, ``container``, ``sample_rate``, ``bit_rate`` (``query``: a mapping).
    The WebSocket (``http=False``) streams raw ``linear16``/``mulaw``/``alaw`` only."""
    encoding = (query.get("encoding") or ("mp3" if http else "linear16")).lower()
    container = (query.get("container") or "").lower() or None
    rate = _int(query.get("sample_rate"), "sample_rate")
    bit_rate = _int(query.get("bit_rate"), "bit_rate")
    bad = "Unsupported audio format: "
    if encoding in ("linear16", "mulaw", "alaw"):
        if container not in (None, "wav", "none"):
            raise FormatError(f"{bad}`container={container}` is invalid when `encoding={encoding}`")
        rates = WIRE_RATES if encoding == "linear16" else (8000, 16000)
        rate = rate or (24000 if encoding == "linear16" else 8000)
        if rate not in rates:
            raise FormatError(f"{bad}`sample_rate` must be one of [{', '.join(map(str, rates))}] when `encoding={encoding}`")
        if bit_rate is not None:
            raise FormatError(f"{bad}`bit_rate` is not applicable when `encoding={encoding}`")
        name = "pcm" if encoding == "linear16" else encoding
        return WireFormat(name, rate, container="wav" if http and container != "none" else "none")
    if not http:
        raise FormatError(f"{bad}`encoding={encoding}` is not supported on the WebSocket; use linear16, mulaw or alaw")
    fixed = {"mp3": 22050, "aac": 22050, "opus": 48000}
    if encoding not in (*fixed, "flac"):
        raise FormatError(f"{bad}`encoding` must be one of linear16, mulaw, alaw, mp3, opus, flac, aac")
    if container is not None and not (encoding == "opus" and container == "ogg"):
        raise FormatError(f"{bad}`container` is not applicable when `encoding={encoding}`")
    if encoding in fixed:
        if rate is not None and rate != fixed[encoding]:
            raise FormatError(f"{bad}`sample_rate` is not applicable when `encoding={encoding}`")
        rate = fixed[encoding]
    elif (rate := rate or 48000) not in (8000, 16000, 22050, 32000, 48000):
        raise FormatError(f"{bad}`sample_rate` must be one of [8000, 16000, 22050, 32000, 48000] when `encoding=flac`")
    if encoding == "mp3":
        if bit_rate not in (None, 32000, 48000):
            raise FormatError(f"{bad}`bit_rate` must be one of [32000, 48000] when `encoding=mp3`")
        return WireFormat("mp3", rate, bit_rate or 48000)
    return WireFormat(encoding, rate)


# -- Cartesia -----------------------------------------------------------------------------------
_CARTESIA_ENCODINGS = {"pcm_s16le": "pcm", "pcm_f32le": "f32", "pcm_mulaw": "mulaw", "pcm_alaw": "alaw"}
CARTESIA_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
_CARTESIA_MP3 = (32000, 64000, 96000, 128000, 192000)


def cartesia_format(fmt: Any, *, containers: tuple[str, ...] = ("raw",)) -> WireFormat:
    """Cartesia's ``output_format`` object (``containers``: those the route streams)."""
    if fmt is None:
        fmt = {}
    if not isinstance(fmt, dict):
        raise FormatError("'output_format' must be an object")
    container = fmt.get("container", "raw")
    if container not in containers:
        raise FormatError(f"output_format.container {str(container)[:20]!r} is not supported here; use "
                          + " or ".join(repr(c) for c in containers))
    rate = fmt.get("sample_rate", 24000)
    if isinstance(rate, float) and rate.is_integer():
        rate = int(rate)
    if isinstance(rate, bool) or rate not in CARTESIA_RATES:
        raise FormatError(f"output_format.sample_rate must be one of {', '.join(map(str, CARTESIA_RATES))}")
    if container == "mp3":
        bit_rate = fmt.get("bit_rate", 128000)
        if bit_rate not in _CARTESIA_MP3:
            raise FormatError(f"output_format.bit_rate must be one of {', '.join(map(str, _CARTESIA_MP3))}")
        return WireFormat("mp3", rate, int(bit_rate))
    encoding = fmt.get("encoding", "pcm_s16le")
    if encoding not in _CARTESIA_ENCODINGS:
        raise FormatError(f"output_format.encoding must be one of {', '.join(_CARTESIA_ENCODINGS)}")
    return WireFormat(_CARTESIA_ENCODINGS[encoding], rate, container="wav" if container == "wav" else "none")


# -- ElevenLabs ---------------------------------------------------------------------------------
ELEVENLABS_DEFAULT = "mp3_44100_128"
_ELEVENLABS_MP3 = {(22050, 32), (24000, 48), (44100, 32), (44100, 64), (44100, 96), (44100, 128), (44100, 192)}


def elevenlabs_format(value: str | None, *, http: bool) -> WireFormat:
    """ElevenLabs' ``output_format`` name (None: the service's default, ``mp3_44100_128``)."""
    name = value or ELEVENLABS_DEFAULT
    kind, _, rest = name.partition("_")
    rate_text, _, kbps_text = rest.partition("_")
    rate = int(rate_text) if rate_text.isdigit() else 0
    if kind == "pcm" and not kbps_text and rate in WIRE_RATES:
        return WireFormat("pcm", rate)
    if kind in ("ulaw", "alaw") and name in ("ulaw_8000", "alaw_8000"):
        return WireFormat("mulaw" if kind == "ulaw" else "alaw", 8000)
    if kind == "mp3" and kbps_text.isdigit() and (rate, int(kbps_text)) in _ELEVENLABS_MP3:
        return WireFormat("mp3", rate, int(kbps_text) * 1000)
    if http and kind == "wav" and not kbps_text and rate in WIRE_RATES:
        return WireFormat("pcm", rate, container="wav")
    mp3 = ", ".join(f"mp3_{r}_{b}" for r, b in sorted(_ELEVENLABS_MP3))
    pcm = ", ".join(f"pcm_{r}" for r in WIRE_RATES)
    raise FormatError(f"output_format {name[:40]!r} is not supported; use one of {pcm}, ulaw_8000, alaw_8000, {mp3}"
                      + (f", {', '.join(f'wav_{r}' for r in WIRE_RATES)}" if http else ""))
