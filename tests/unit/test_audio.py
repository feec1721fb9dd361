"""backends/audio/encoders.py: every format decodes (PyAV) to the asked rate and a plausible length."""

from __future__ import annotations

import io
import struct
import wave

import av
import numpy as np
import pytest

from backends.api import InvalidRequest
from backends.audio.encoders import (
    FORMATS,
    SUPPORTED_RATES,
    Resampler,
    check_format,
    check_sample_rate,
    encode_all,
    make_encoder,
    to_pcm16,
    wav_header,
)

SR = 24_000


def tone(seconds: float, freq: float = 440.0, rate: int = SR, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def decode(data: bytes, fmt: str, rate: int = SR) -> tuple[int, np.ndarray]:
    """Decode a complete stream with PyAV -> (sample rate, mono float32 samples)."""
    if fmt == "pcm":
        return rate, np.frombuffer(data, "<i2").astype(np.float32) / 32768
    with av.open(io.BytesIO(data)) as container:
        frames = [f.to_ndarray().astype(np.float32).reshape(-1) for f in container.decode(audio=0)]
        out_rate = container.streams.audio[0].codec_context.sample_rate
    samples = np.concatenate(frames)
    if samples.dtype == np.float32 and np.abs(samples).max() > 2:  # integer formats
        samples = samples / 32768
    return out_rate, samples


def dominant_freq(x: np.ndarray, rate: int) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spec) * rate / len(x))


def test_to_pcm16_clips_and_scales():
    pcm = to_pcm16(np.array([0.0, 0.5, -0.5, 1.7, -3.0, np.nan], dtype=np.float32))
    vals = np.frombuffer(pcm, "<i2")
    assert list(vals) == [0, 16384, -16384, 32767, -32767, 0]


def test_wav_header_streaming_and_sized():
    h = wav_header(16000)
    assert len(h) == 44 and h[:4] == b"RIFF" and h[8:16] == b"WAVEfmt "
    assert struct.unpack("<I", h[4:8])[0] == 0xFFFFFFFF
    assert struct.unpack("<I", h[40:44])[0] == 0xFFFFFFFF
    sized = wav_header(16000, data_size=3200) + b"\0" * 3200
    with wave.open(io.BytesIO(sized)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()) == (16000, 1, 2, 1600)


@pytest.mark.parametrize("out_rate", [r for r in SUPPORTED_RATES if r != SR])
def test_resampler_streaming_length_and_pitch(out_rate):
    x = tone(2.0)
    rs = Resampler(SR, out_rate)
    parts = [rs.process(c) for c in np.array_split(x, 7)]
    parts.append(rs.flush())
    y = np.concatenate(parts)
    expected = len(x) * out_rate / SR
    assert abs(len(y) - expected) <= 2
    assert abs(dominant_freq(y, out_rate) - 440) < 5  # same pitch at the new rate


def test_resampler_identity():
    x = tone(0.1)
    rs = Resampler(SR, SR)
    assert np.array_equal(rs.process(x), x) and len(rs.flush()) == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_decodes_to_rate_and_length(fmt):
    x = tone(1.5)
    enc = make_encoder(fmt)
    data = encode_all([x], fmt)
    rate, y = decode(data, fmt)
    expected_rate = 48_000 if fmt == "opus" else SR  # every Opus decoder outputs 48 kHz
    assert rate == expected_rate
    seconds = len(y) / rate
    assert 1.45 <= seconds <= 1.65, seconds  # codec priming/padding adds a few ms
    assert enc.content_type
    # The audio is the tone, not noise.
    assert abs(dominant_freq(y[rate // 10 : rate], rate) - 440) < 10


def test_content_types():
    assert make_encoder("pcm", 16000).content_type == "audio/pcm; rate=16000; channels=1"
    assert make_encoder("wav").content_type == "audio/wav"
    assert make_encoder("mp3").content_type == "audio/mpeg"
    assert make_encoder("opus").content_type.startswith("audio/ogg")
    assert make_encoder("aac").content_type == "audio/aac"
    assert make_encoder("flac").content_type == "audio/flac"


@pytest.mark.parametrize("fmt", FORMATS)
def test_streaming_bytes_flow_and_form_one_valid_stream(fmt):
    """Bytes leave as chunks go in (FLAC: whole at flush), and their concatenation is one valid
    stream of the whole."""
    chunks = [tone(1.0, 440), tone(1.0, 660), tone(1.0, 440)]
    enc = make_encoder(fmt)
    outs = [enc.encode(c) for c in chunks]
    outs.append(enc.flush())
    if fmt == "flac":
        assert not any(outs[:3]) and outs[3]
    else:
        assert outs[0], "nothing left the encoder after the first second of audio"
        assert sum(len(o) for o in outs[:3]) > len(outs[3]), "most bytes should leave before flush"
    rate, y = decode(b"".join(outs), fmt)
    assert 2.95 <= len(y) / rate <= 3.15
    # the middle second is the 660 Hz chunk
    assert abs(dominant_freq(y[int(1.2 * rate) : int(1.8 * rate)], rate) - 660) < 10
    assert enc.flush() == b""
    with pytest.raises(RuntimeError):
        enc.encode(chunks[0])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_resampled_output_has_rate_and_length(fmt, rate):
    x = tone(1.0)
    data = encode_all(np.array_split(x, 3), fmt, rate)
    out_rate, y = decode(data, fmt, rate)
    if fmt == "opus":
        assert out_rate == 48_000
        assert make_encoder("opus", rate).sample_rate in (rate, 48_000)
    else:
        assert out_rate == rate
    # Lossy codecs add priming and pad to whole frames (MP3: 1152 samples) — at most ~2 frames.
    assert 0.97 * out_rate <= len(y) <= out_rate + 2304
    if fmt in ("pcm", "wav", "flac"):  # lossless: exact length
        assert abs(len(y) - rate) <= 2


def test_streaming_wav_header_is_readable_by_wave_module():
    data = encode_all([tone(0.5)], "wav", 16000)
    assert struct.unpack("<I", data[40:44])[0] == 0xFFFFFFFF
    # Python's wave module takes the unknown size at face value; readframes reads to the end.
    with wave.open(io.BytesIO(data)) as w:
        assert w.getframerate() == 16000
        assert len(w.readframes(10**9)) == 8000 * 2


def test_wav_header_sent_even_without_audio():
    enc = make_encoder("wav")
    assert enc.encode(np.zeros(0, np.float32))[:4] == b"RIFF"
    assert enc.flush() == b""


def test_close_midstream_is_quiet():
    for fmt in FORMATS:
        enc = make_encoder(fmt)
        enc.encode(tone(0.2))
        enc.close()
        enc.close()


def test_validation():
    assert check_format(" MP3 ") == "mp3"
    assert check_sample_rate(None) == SR
    with pytest.raises(InvalidRequest):
        check_format("ogg")
    for bad in (11025, 0, "16000", True):
        with pytest.raises(InvalidRequest):
            check_sample_rate(bad)
    with pytest.raises(InvalidRequest):
        make_encoder("wav", 12345)


@pytest.mark.parametrize("rate", [24000, 16000])
def test_flac_opens_in_libsndfile_with_its_totals(rate):
    """soundfile (libsndfile) refuses a FLAC whose STREAMINFO says "length unknown"; the file must
    carry its total sample count and MD5, in one piece at flush."""
    import hashlib

    import soundfile

    x = tone(1.0)
    enc = make_encoder("flac", rate)
    assert enc.encode(x[:12000]) == b"" and enc.encode(x[12000:]) == b""
    data = enc.flush()
    y, out_rate = soundfile.read(io.BytesIO(data), dtype="int16")
    assert out_rate == rate and abs(len(y) - rate) <= 2
    total = int.from_bytes(data[8 + 13 : 8 + 18], "big") & ((1 << 36) - 1)  # STREAMINFO's 36-bit count
    assert total == len(y)
    assert data[8 + 18 : 8 + 34] == hashlib.md5(y.tobytes()).digest()
