"""A first segment cut at a phrase boundary (no clause mark early in the sentence) still sounds
right: the joined audio is intelligible and the join has no click."""

from __future__ import annotations

import numpy as np
import pytest

SENTENCE = "The train to the coast leaves from the main station every morning at seven."


def _segments_audio(onnx_synth, pipeline):
    segments = pipeline.plan(SENTENCE, voice="jm_kumo", fast_first=True)
    return segments, [onnx_synth.synthesize(s) for s in segments]


def test_the_phrase_cut_first_segment_joins_without_a_click(onnx_synth, pipeline):
    segments, parts = _segments_audio(onnx_synth, pipeline)
    assert segments[0].text == "The train to the coast leaves"  # cut before "from", no comma in sight
    jump = abs(float(parts[0][-1]) - float(parts[1][0]))  # the sample step across the join
    steps = np.abs(np.diff(np.concatenate(parts)))
    # a click is a step far above what the speech itself does from one sample to the next
    assert jump <= np.percentile(steps, 99), f"step of {jump:.4f} at the join"
    # both sides of the join fade to near silence (the model pads each segment with it)
    assert max(abs(float(parts[0][-1])), abs(float(parts[1][0]))) < 0.02


@pytest.mark.slow
def test_the_phrase_cut_audio_stays_intelligible(onnx_synth, pipeline, transcribe):
    """pocketsphinx's bundled en-us model hears most of the words across the join."""
    _, parts = _segments_audio(onnx_synth, pipeline)
    expected = [w.strip(".,").lower() for w in SENTENCE.split()]
    heard = set(transcribe(np.concatenate(parts)))
    hit = sum(w in heard for w in expected)
    assert hit / len(expected) >= 0.6, f"only {hit}/{len(expected)} words recognised: {sorted(heard)}"
