"""server/cli/say.py over the real ONNX backend: files in any format, progress, nothing left on failure."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import wave

import av
import pytest
import soundfile

from backends.api import InvalidRequest, UnknownVoice
from backends.engine.sequential import SequentialBackend
from backends.text.planner import TextPipeline
from server.cli.say import format_for, say

TEXT = "One sentence here. And a second one."


# One backend for the module: what a test checks is the file say() writes, and a backend answers each
# call afresh (starting one warms the model up with a synthesis of its own).
@pytest.fixture(scope="module")
async def backend(onnx_synth, g2p, vocab, voices):
    # Small segments (KOKORO_SEGMENT_PHONEMES) so a short text still has several.
    b = SequentialBackend(onnx_synth, TextPipeline(g2p.phonemize, vocab, segment_phonemes=20), voices)
    await b.start()
    yield b
    await b.aclose()


async def test_say_writes_sized_wav_with_progress(backend, tmp_path):
    seen = []
    out = tmp_path / "hello.wav"
    result = await say(backend, TEXT, out, voice="jm_kumo", progress=lambda *a: seen.append(a))
    assert result.format == "wav" and result.segments == len(seen) >= 2
    assert [s[0] for s in seen] == list(range(1, result.segments + 1))
    assert all(s[1] == result.segments for s in seen)
    with wave.open(str(out)) as w:  # real sizes patched in
        assert w.getframerate() == 24000
        assert w.getnframes() / 24000 == pytest.approx(result.seconds, abs=0.01)
    assert list(tmp_path.iterdir()) == [out]


async def test_say_mp3_resampled_from_suffix(backend, tmp_path):
    out = tmp_path / "hello.mp3"
    result = await say(backend, "Hello there.", out, sample_rate=16000, progress=False)
    with av.open(str(out)) as c:
        frames = list(c.decode(audio=0))
        assert c.streams.audio[0].codec_context.sample_rate == 16000
    assert sum(f.samples for f in frames) / 16000 == pytest.approx(result.seconds, abs=0.15)


async def test_say_flac_reads_back_with_soundfile_at_the_right_length(backend, tmp_path):
    out = tmp_path / "x.flac"
    result = await say(backend, TEXT, out, progress=False)
    info = soundfile.info(str(out))
    assert (info.format, info.samplerate, info.channels) == ("FLAC", 24000, 1)
    assert info.frames == round(result.seconds * 24000)  # lossless: every sample, no padding
    audio, _ = soundfile.read(str(out), dtype="float32")
    assert len(audio) == info.frames and abs(audio).max() > 0.05


def test_the_say_command_writes_flac_that_soundfile_reads(model_dir, tmp_path):
    out = tmp_path / "x.flac"
    done = subprocess.run([sys.executable, "-m", "server", "say", TEXT, "-o", str(out), "--model-dir", str(model_dir)],
                          check=True, capture_output=True, text=True, timeout=300)
    seconds = float(re.search(r"wrote ([0-9.]+)s of flac audio", done.stderr).group(1))
    audio, rate = soundfile.read(str(out), dtype="float32")
    assert rate == 24000 and len(audio) / rate == pytest.approx(seconds, abs=0.01)
    assert 2 < seconds < 8  # two short sentences


async def test_say_to_file_object_keeps_streaming_header(backend):
    buf = io.BytesIO()
    await say(backend, "Hello there.", buf, "wav", progress=False)
    assert int.from_bytes(buf.getvalue()[40:44], "little") == 0xFFFFFFFF


async def test_say_failure_leaves_no_file(backend, tmp_path):
    out = tmp_path / "x.flac"
    with pytest.raises(UnknownVoice):
        await say(backend, TEXT, out, voice="nobody", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_format_for():
    assert format_for("a.ogg") == "opus" and format_for("a.FLAC") == "flac" and format_for("a") == "wav"
    assert format_for("a.wav", "mp3") == "mp3"
    with pytest.raises(InvalidRequest):
        format_for("a.txt")
