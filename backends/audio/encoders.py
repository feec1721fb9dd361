"""The response formats: PCM conversion, a streaming WAV header, resampling and streaming encoders.

Everything here is synchronous and CPU-bound but cheap (milliseconds per second of audio); a
caller on an event loop may still prefer ``asyncio.to_thread`` for the PyAV formats.

* :func:`to_pcm16` — float32 in [-1, 1] -> s16le bytes (clipped first).
* :func:`wav_header` — a 44-byte RIFF/WAVE header; with ``data_size=None`` the sizes are the
  streaming convention ``0xFFFFFFFF`` ("unknown, read to the end"), which ffmpeg, browsers,
  SoX and Python's ``wave`` module accept.
* :class:`Resampler` — a streaming wrapper over ``soxr.ResampleStream``: feed chunks, then
  ``flush()``; the total output length is ``round(n * out_rate / in_rate)`` (±1).
* :func:`make_encoder` — one encoder per response. ``encode(chunk)`` takes float32 audio at
  24 kHz (the model rate) and returns whatever bytes the codec has ready (possibly ``b""``);
  ``flush()`` ends the stream and returns the rest. Resampling to ``sample_rate`` happens inside.

Formats (only the WAV header is written by hand; the codecs are libmp3lame via ``lameenc`` and
FFmpeg's encoders via PyAV):

=======  ======================================  =================================================
format   content type                            stream
=======  ======================================  =================================================
pcm      ``audio/pcm; rate=R; channels=1``       raw s16le mono (no header)
wav      ``audio/wav``                           streaming RIFF header, then s16le
mp3      ``audio/mpeg``                          MPEG layer III, 64 kb/s CBR (lameenc)
opus     ``audio/ogg; codecs=opus``              Opus in Ogg, 32 kb/s, 100 ms pages (PyAV)
aac      ``audio/aac``                           AAC-LC in ADTS, 64 kb/s (PyAV)
flac     ``audio/flac``                          FLAC, 16 bit, whole file at flush (see below)
=======  ======================================  =================================================

Raw PCM is labelled ``audio/pcm`` (as other OpenAI-compatible servers do), never ``audio/L16``:
RFC 2586 defines L16 as big-endian, and these samples are little-endian.

Opus only codes 8/12/16/24/48 kHz and every Opus decoder outputs 48 kHz; 22050 and 44100 are
coded at 48 kHz. ``Encoder.sample_rate`` is the rate the stream actually carries.

Threading: an encoder (and a resampler) holds per-stream state and is not thread-safe; call it
from one thread at a time (hopping between threads between calls is fine). An encoder that is
abandoned mid-stream (client went away) should be ``close()``-d; nothing is written then.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable
from fractions import Fraction
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from backends.api import SAMPLE_RATE, InvalidRequest, clip_audio

if TYPE_CHECKING:
    from av.audio.frame import AudioFrame
    from av.audio.stream import AudioStream

SUPPORTED_RATES: tuple[int, ...] = (8000, 16000, 22050, 24000, 44100, 48000)
FORMATS: tuple[str, ...] = ("mp3", "opus", "aac", "flac", "wav", "pcm")
_OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
_UNKNOWN = 0xFFFFFFFF

CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
}


def check_format(fmt: str) -> str:
    """Return the normalised format name or raise :class:`InvalidRequest`."""
    name = str(fmt).strip().lower()
    if name not in FORMATS:
        raise InvalidRequest(f"unsupported audio format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return name


def check_sample_rate(rate: int | None) -> int:
    """``None`` -> 24000; otherwise the rate if supported, else :class:`InvalidRequest`."""
    if rate is None:
        return SAMPLE_RATE
    if isinstance(rate, bool) or not isinstance(rate, int) or rate not in SUPPORTED_RATES:
        rates = ", ".join(map(str, SUPPORTED_RATES))
        raise InvalidRequest(f"unsupported sample_rate {rate!r}; expected one of {rates}")
    return rate


def to_pcm16(audio: np.ndarray) -> bytes:
    """float32 audio (any shape, flattened) -> clipped, rounded signed 16-bit little-endian bytes."""
    return _pcm16(clip_audio(audio))


def _pcm16(samples: np.ndarray) -> bytes:
    """:func:`to_pcm16` of samples already clipped (what an encoder's ``_encode`` is handed)."""
    return np.round(samples * 32767.0).astype("<i2").tobytes()


def wav_header(sample_rate: int, channels: int = 1, data_size: int | None = None) -> bytes:
    """A canonical 44-byte PCM s16le WAV header.

    ``data_size=None`` writes ``0xFFFFFFFF`` for both the RIFF and the data chunk size: the
    length is unknown while streaming and readers read to the end of the stream.
    """
    block_align = channels * 2
    if data_size is None:
        riff_size = data_len = _UNKNOWN
    else:
        data_len = int(data_size)
        riff_size = min(36 + data_len, _UNKNOWN)
    return (
        b"RIFF"
        + struct.pack("<I", riff_size)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * block_align, block_align, 16)
        + b"data"
        + struct.pack("<I", data_len)
    )


class Resampler:
    """Streaming mono float32 resampler (soxr, high quality). Identity when the rates match."""

    def __init__(self, in_rate: int, out_rate: int, quality: str = "HQ"):
        self.in_rate, self.out_rate = int(in_rate), int(out_rate)
        self._stream = None
        if self.in_rate != self.out_rate:
            import soxr

            self._stream = soxr.ResampleStream(
                self.in_rate, self.out_rate, 1, dtype="float32", quality=quality
            )

    @property
    def resamples(self) -> bool:
        """Whether the rates differ (else every chunk passes as it is)."""
        return self._stream is not None

    def process(self, chunk: np.ndarray) -> np.ndarray:
        """Resample one chunk; the output may lag the input by the filter delay."""
        x = np.ascontiguousarray(np.asarray(chunk, dtype=np.float32).reshape(-1))
        if self._stream is None:
            return x
        out: np.ndarray = self._stream.resample_chunk(x, last=False)
        return out

    def flush(self) -> np.ndarray:
        """Return the samples still held in the filter; call once at the end of the stream."""
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        tail: np.ndarray = self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
        return tail


class Encoder(Protocol):
    """One response's audio stream. Not thread-safe (see the module docstring)."""

    format: str
    content_type: str
    sample_rate: int

    def encode(self, chunk: np.ndarray) -> bytes:
        """Take float32 audio at the input rate (24 kHz); return the bytes ready so far."""

    def flush(self) -> bytes:
        """End the stream; return the remaining bytes. Later calls return ``b""``."""

    def close(self) -> None:
        """Release resources without finishing the stream (safe after ``flush``)."""


class _BaseEncoder:
    format = ""
    content_type = ""

    def __init__(self, sample_rate: int, input_rate: int = SAMPLE_RATE, codec_rate: int | None = None):
        self.requested_rate = sample_rate
        self.sample_rate = codec_rate or sample_rate
        self.input_rate = input_rate
        self._resampler = Resampler(input_rate, self.sample_rate)
        self._done = False

    def encode(self, chunk: np.ndarray) -> bytes:
        if self._done:
            raise RuntimeError("encoder already flushed")
        audio = self._resampled(clip_audio(chunk))
        return self._encode(audio) if len(audio) else self._encode_empty()

    def flush(self) -> bytes:
        if self._done:
            return b""
        tail = clip_audio(self._resampler.flush())
        out = self._encode(tail) if len(tail) else self._encode_empty()
        self._done = True
        return out + self._finish()

    def close(self) -> None:
        self._done = True

    def _resampled(self, audio: np.ndarray) -> np.ndarray:
        """``audio`` at the codec's rate, still within [-1, 1] (resampling can overshoot a little)."""
        if not self._resampler.resamples:
            return audio
        return clip_audio(self._resampler.process(audio))

    # hooks: ``audio`` is float32, 1-D, finite and within [-1, 1]
    def _encode(self, audio: np.ndarray) -> bytes:
        raise NotImplementedError

    def _encode_empty(self) -> bytes:
        return b""

    def _finish(self) -> bytes:
        return b""


class PcmEncoder(_BaseEncoder):
    format = "pcm"

    def __init__(self, sample_rate: int, input_rate: int = SAMPLE_RATE):
        super().__init__(sample_rate, input_rate)
        self.content_type = f"audio/pcm; rate={self.sample_rate}; channels=1"

    def _encode(self, audio: np.ndarray) -> bytes:
        return _pcm16(audio)


class WavEncoder(PcmEncoder):
    """The streaming header leaves with the first call (even an empty one), then raw s16le."""

    format = "wav"

    def __init__(self, sample_rate: int, input_rate: int = SAMPLE_RATE):
        super().__init__(sample_rate, input_rate)
        self.content_type = CONTENT_TYPES["wav"]
        self._header_sent = False

    def _header(self) -> bytes:
        if self._header_sent:
            return b""
        self._header_sent = True
        return wav_header(self.sample_rate)

    def _encode(self, audio: np.ndarray) -> bytes:
        return self._header() + _pcm16(audio)

    def _encode_empty(self) -> bytes:
        return self._header()


class Mp3Encoder(_BaseEncoder):
    """MP3 through libmp3lame (``lameenc``); CBR so every frame can be played on its own."""

    format = "mp3"
    content_type = CONTENT_TYPES["mp3"]

    def __init__(self, sample_rate: int, input_rate: int = SAMPLE_RATE, bitrate_kbps: int = 64):
        super().__init__(sample_rate, input_rate)
        import lameenc

        self._lame = lameenc.Encoder()
        self._lame.set_bit_rate(bitrate_kbps)
        self._lame.set_in_sample_rate(self.sample_rate)
        self._lame.set_channels(1)
        self._lame.set_quality(2)
        self._fed = False

    def _encode(self, audio: np.ndarray) -> bytes:
        self._fed = True
        return bytes(self._lame.encode(_pcm16(audio)))

    def _finish(self) -> bytes:
        return bytes(self._lame.flush()) if self._fed else b""  # lameenc refuses to flush an empty stream


# format: (container, codec, bit rate, container options)
_AV_SPECS: dict[str, tuple[str, str, int, dict[str, str]]] = {
    "opus": ("ogg", "libopus", 32_000, {"page_duration": "100000"}),
    "aac": ("adts", "aac", 64_000, {}),
    "flac": ("flac", "flac", 0, {}),
}


#: Formats whose header needs the totals: encoded into a seekable buffer, returned whole at flush.
_WHOLE_FILE = frozenset({"flac"})


class _Sink:
    """A write-only, non-seekable file for PyAV: muxers then stream instead of seeking back."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def write(self, data: bytes) -> int:
        self._buf += data
        return len(data)

    def take(self) -> bytes:
        out = bytes(self._buf)
        self._buf.clear()
        return out


class AvEncoder(_BaseEncoder):
    """An FFmpeg encoder and muxer through PyAV writing into memory, drained after every call.

    PyAV's audio codec context buffers input into the codec's frame size, so chunks of any
    length may be fed. The Ogg muxer is told to close pages every 100 ms so bytes keep flowing.

    FLAC is the exception: it is a whole-file format here. Its STREAMINFO header must carry the
    total sample count and the audio's MD5 for libsndfile (``soundfile``) to open it, and only a
    seekable output lets the muxer write them at the end; so a FLAC encoder returns nothing until
    ``flush()``, which returns the complete file.
    """

    def __init__(self, fmt: str, sample_rate: int, input_rate: int = SAMPLE_RATE):
        codec_rate = sample_rate
        if fmt == "opus" and sample_rate not in _OPUS_RATES:
            codec_rate = 48_000
        super().__init__(sample_rate, input_rate, codec_rate)
        import av

        container_fmt, codec, bit_rate, options = _AV_SPECS[fmt]
        self.format = fmt
        self.content_type = CONTENT_TYPES[fmt]
        self._whole_file = fmt in _WHOLE_FILE
        self._sink: _Sink | io.BytesIO = io.BytesIO() if self._whole_file else _Sink()
        self._container = av.open(self._sink, mode="w", format=container_fmt, options=dict(options))
        # every codec of _AV_SPECS is an audio codec, so its stream is an audio stream
        self._stream = cast("AudioStream", self._container.add_stream(codec, rate=self.sample_rate))
        ctx = self._stream.codec_context
        ctx.layout = "mono"
        if bit_rate:
            ctx.bit_rate = bit_rate
        # flac takes s16/s32, libopus flt/s16, aac fltp: feed the first format it lists.
        self._sample_fmt = (ctx.codec.audio_formats or [])[0].name
        ctx.format = self._sample_fmt
        self._pts = 0
        self._av = av

    def _frame(self, audio: np.ndarray) -> AudioFrame:
        if self._sample_fmt.startswith("s16"):
            data = np.round(audio * 32767.0).astype(np.int16)
        elif self._sample_fmt.startswith("s32"):
            data = np.round(audio.astype(np.float64) * 2147483647.0).astype(np.int32)
        else:
            data = audio.astype(np.float32, copy=False)
        frame = self._av.AudioFrame.from_ndarray(data.reshape(1, -1), format=self._sample_fmt, layout="mono")
        frame.sample_rate = self.sample_rate
        frame.time_base = Fraction(1, self.sample_rate)
        frame.pts = self._pts
        self._pts += len(audio)
        return frame

    def _encode(self, audio: np.ndarray) -> bytes:
        for packet in self._stream.encode(self._frame(audio)):
            self._container.mux(packet)
        return b"" if isinstance(self._sink, io.BytesIO) else self._sink.take()

    def _finish(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._sink.getvalue() if isinstance(self._sink, io.BytesIO) else self._sink.take()

    def close(self) -> None:
        if not self._done:
            self._done = True
            try:
                self._container.close()
            except Exception:  # a half-written stream nobody will read
                pass


def make_encoder(fmt: str, sample_rate: int | None = SAMPLE_RATE, input_rate: int = SAMPLE_RATE) -> Encoder:
    """A fresh streaming encoder for ``fmt`` at ``sample_rate`` (validated; see the module table)."""
    fmt = check_format(fmt)
    rate = check_sample_rate(sample_rate)
    if fmt == "pcm":
        return PcmEncoder(rate, input_rate)
    if fmt == "wav":
        return WavEncoder(rate, input_rate)
    if fmt == "mp3":
        return Mp3Encoder(rate, input_rate)
    return AvEncoder(fmt, rate, input_rate)


def encode_all(chunks: Iterable[np.ndarray], fmt: str, sample_rate: int | None = SAMPLE_RATE) -> bytes:
    """Encode an iterable of float32 24 kHz chunks into one complete file's bytes."""
    enc = make_encoder(fmt, sample_rate)
    parts = [enc.encode(c) for c in chunks]
    parts.append(enc.flush())
    return b"".join(parts)
