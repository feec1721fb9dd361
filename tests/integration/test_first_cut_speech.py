"""A first segment cut early — at a phrase boundary (no clause mark early in the sentence), or
short for a listener who hears nothing yet — still sounds right: the joined audio is intelligible and the joins have no
click."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

# (sentence, words in a short first segment or None, the first segment expected)
CUTS = {
    "phrase": ("The train to the coast leaves from the main station every morning at seven.", None,
               "The train to the coast leaves"),  # cut before "from", no comma in sight
    "short": ("When you ask a voice assistant a question, the silence before it answers is what you notice most.", 5,
              "When you ask"),  # short: after a few words, outside the noun phrases
}


@pytest.fixture(scope="module")
def segments_audio(onnx_synth, pipeline):
    """A cut's segments and each one's audio, synthesised once for the tests that listen to it
    (the ONNX runtime is deterministic: a second synthesis would give the same samples)."""
    read: dict[str, tuple[list, list[np.ndarray]]] = {}

    def get(cut):
        if cut not in read:
            sentence, short, _ = CUTS[cut]
            segments = pipeline.plan(sentence, voice="jm_kumo", fast_first=True, short_first_words=short)
            read[cut] = segments, [onnx_synth.synthesize(s) for s in segments]
        return read[cut]

    return get


@pytest.mark.parametrize("cut", CUTS)
def test_the_early_cut_first_segment_joins_without_a_click(segments_audio, cut):
    segments, parts = segments_audio(cut)
    assert segments[0].text == CUTS[cut][2]
    steps = np.abs(np.diff(np.concatenate(parts)))
    for before, after in itertools.pairwise(parts):
        jump = abs(float(before[-1]) - float(after[0]))  # the sample step across the join
        # a click is a step far above what the speech itself does from one sample to the next
        assert jump <= np.percentile(steps, 99), f"step of {jump:.4f} at the join"
        # both sides of the join fade to near silence (the model pads each segment with it)
        assert max(abs(float(before[-1])), abs(float(after[0]))) < 0.02


@pytest.mark.slow
@pytest.mark.parametrize("cut", CUTS)
def test_the_early_cut_audio_stays_intelligible(segments_audio, transcribe, cut):
    """pocketsphinx's bundled en-us model hears most of the words across the joins."""
    _, parts = segments_audio(cut)
    expected = [w.strip(".,").lower() for w in CUTS[cut][0].split()]
    heard = set(transcribe(np.concatenate(parts)))
    hit = sum(w in heard for w in expected)
    assert hit / len(expected) >= 0.6, f"only {hit}/{len(expected)} words recognised: {sorted(heard)}"
