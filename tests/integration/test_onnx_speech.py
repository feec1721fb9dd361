"""Real Kokoro-82M speech from the int8 ONNX runtime: plausible, audible, intelligible."""

from __future__ import annotations

import numpy as np
import pytest

from backends.api import SAMPLE_RATE, Segment

SENTENCES = [
    "Please open the door and turn on the light.",
    "We will meet at the station at seven o'clock.",
    "The train leaves in the morning.",
]


def synth_text(onnx_synth, pipeline, text, voice="jm_kumo", speed=1.0):
    segments = pipeline.plan(text, voice=voice, speed=speed, fast_first=False)
    return np.concatenate([onnx_synth.synthesize(s) for s in segments])


def test_speech_is_24khz_audible_and_of_plausible_length(onnx_synth, pipeline):
    audio = synth_text(onnx_synth, pipeline, SENTENCES[0])
    seconds = len(audio) / SAMPLE_RATE
    assert onnx_synth.sample_rate == 24000 and audio.dtype == np.float32
    assert 1.5 < seconds < 8.0  # nine words, spoken
    assert np.abs(audio).max() <= 1.0
    assert np.sqrt(np.mean(audio**2)) > 0.02  # not silence


def test_speed_changes_duration(onnx_synth, pipeline):
    normal = synth_text(onnx_synth, pipeline, SENTENCES[2])
    fast = synth_text(onnx_synth, pipeline, SENTENCES[2], speed=2.0)
    assert len(fast) < 0.75 * len(normal)


def test_output_is_clipped_even_when_the_model_peaks_above_one(onnx_synth):
    loud = Segment(text="AAAH!", phonemes="ˈɑːːːːːː!", voice="jf_nezumi")
    audio = onnx_synth.synthesize(loud)
    assert np.abs(audio).max() <= 1.0 and np.isfinite(audio).all()


@pytest.mark.slow
def test_speech_is_intelligible(onnx_synth, pipeline, transcribe):
    """pocketsphinx's bundled en-us model hears most of the words."""
    hit = total = 0
    for text in SENTENCES:
        expected = [w.strip(".,'").lower() for w in text.split()]
        heard = set(transcribe(synth_text(onnx_synth, pipeline, text)))
        hit += sum(w in heard for w in expected)
        total += len(expected)
    assert hit / total >= 0.6, f"only {hit}/{total} words recognised"
