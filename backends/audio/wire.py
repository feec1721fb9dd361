"""The encodings the voice-agent providers put on the wire, beside the file formats of
:mod:`backends.audio.encoders`: raw PCM (s16le, float32), G.711 μ-law and A-law (telephony) and MP3 at a chosen bit rate — each a
streaming :class:`~backends.audio.encoders.Encoder` fed float32 audio at 24 kHz.

* ``pcm`` — s16le; ``f32`` — float32 little-endian (Cartesia's ``pcm_f32le``).
* ``mulaw`` / ``alaw`` — ITU-T G.711 through FFmpeg's ``pcm_mulaw`` / ``pcm_alaw`` encoders (PyAV),
  one byte per sample; the usual 8 kHz of telephone networks, any rate of :data:`WIRE_RATES`.
* ``mp3`` — MPEG layer III through libmp3lame (``lameenc``), CBR at ``bit_rate`` (b/s), frames
  returned as they are encoded.

:func:`wire_encoder` is the one factory; :data:`BYTES_PER_SAMPLE` says how long a piece of the
uncompressed encodings is (None for MP3: its length is the audio's, not its bytes'). Threading as
in ``backends.audio.encoders``: one encoder per stream, one thread at a time.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from backends.api import SAMPLE_RATE, InvalidRequest
from backends.audio.encoders import Encoder, Mp3Encoder, PcmEncoder, to_pcm16

WireEncoding = Literal["pcm", "f32", "mulaw", "alaw", "mp3"]
#: Every rate a provider lists for its PCM (resampled from the model's 24 kHz with soxr).
WIRE_RATES: tuple[int, ...] = (8000, 16000, 22050, 24000, 32000, 44100, 48000)
#: Bytes per sample of each uncompressed encoding (None: compressed).
BYTES_PER_SAMPLE: dict[str, int | None] = {"pcm": 2, "f32": 4, "mulaw": 1, "alaw": 1, "mp3": None}
#: MP3 rates libmp3lame codes (MPEG-1/2/2.5).
MP3_RATES: tuple[int, ...] = (8000, 16000, 22050, 24000, 32000, 44100, 48000)

CONTENT_TYPES = {"mulaw": "audio/basic", "alaw": "audio/x-alaw-basic", "mp3": "audio/mpeg"}


class F32Encoder(PcmEncoder):
    """float32 little-endian PCM."""

    format = "f32"

    def _encode(self, audio: np.ndarray) -> bytes:
        return np.asarray(audio, dtype="<f4").tobytes()


class G711Encoder(PcmEncoder):
    """G.711 μ-law (``mulaw``) or A-law (``alaw``) through FFmpeg's PCM codecs (no frame size: each
    chunk is coded as it comes)."""

    def __init__(self, law: Literal["mulaw", "alaw"], sample_rate: int, input_rate: int = SAMPLE_RATE):
        super().__init__(sample_rate, input_rate)
        import av

        self.format = law
        self.content_type = f"{CONTENT_TYPES[law]}; rate={self.sample_rate}"
        self._av = av
        self._ctx = av.CodecContext.create("pcm_mulaw" if law == "mulaw" else "pcm_alaw", "w")
        self._ctx.sample_rate = self.sample_rate
        self._ctx.layout = "mono"
        self._ctx.format = "s16"

    def _encode(self, audio: np.ndarray) -> bytes:
        samples = np.frombuffer(to_pcm16(audio), dtype="<i2").reshape(1, -1)
        frame = self._av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = self.sample_rate
        return b"".join(bytes(packet) for packet in self._ctx.encode(frame))


def wire_encoder(encoding: str, sample_rate: int, bit_rate: int | None = None) -> Encoder:
    """A fresh encoder of ``encoding`` at ``sample_rate`` (MP3 at ``bit_rate`` b/s, default 64 kb/s).
    Raises :class:`InvalidRequest` for an encoding or rate this server does not code."""
    if encoding == "mp3":
        if sample_rate not in MP3_RATES:
            raise InvalidRequest(f"mp3 is coded at {', '.join(map(str, MP3_RATES))} Hz, not {sample_rate}")
        return Mp3Encoder(sample_rate, bitrate_kbps=(bit_rate or 64_000) // 1000)
    if sample_rate not in WIRE_RATES:
        raise InvalidRequest(f"sample rate {sample_rate} is not one of {', '.join(map(str, WIRE_RATES))}")
    if encoding == "pcm":
        return PcmEncoder(sample_rate)
    if encoding == "f32":
        return F32Encoder(sample_rate)
    if encoding in ("mulaw", "alaw"):
        return G711Encoder(encoding, sample_rate)  # type: ignore[arg-type]
    raise InvalidRequest(f"encoding {encoding[:20]!r} is not one of pcm, f32, mulaw, alaw, mp3")
