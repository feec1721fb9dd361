"""Joins: a segment's model padding is trimmed, the reading's pause put back after it, with fades,
and its frame durations shifted with the audio (so word times follow the audio that is sent)."""

from __future__ import annotations

import numpy as np
import pytest

from backends.engine.joins import (
    FRAME,
    MARGIN_S,
    PAUSES,
    SILENCE_DB,
    pause_for,
    shape,
    shift_durations,
    window_db,
)
from server.pipeline.word_timings import char_times

SR = 24_000


def utterance(lead_s=0.3, speech_s=1.0, tail_s=0.5, seed=0) -> np.ndarray:
    """What the model makes: exact zeros and a −75 dB floor around the speech, frame-aligned."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(speech_s * SR)) / SR
    speech = (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)
    floor = lambda s: (rng.standard_normal(round(s * SR)) * 10 ** (-75 / 20)).astype(np.float32)  # noqa: E731
    zeros = lambda s: np.zeros(round(s * SR), np.float32)  # noqa: E731
    return np.concatenate([zeros(lead_s / 2), floor(lead_s / 2), speech, floor(tail_s / 2), zeros(tail_s / 2)])


def silent_run(audio: np.ndarray) -> float:
    loud = window_db(audio) > SILENCE_DB
    inner = np.flatnonzero(loud)
    gaps = np.diff(inner) - 1
    return float(gaps.max()) * 0.010 if len(gaps) else 0.0


@pytest.mark.parametrize("pause", [0.05, 0.12, 0.4, 0.6])
def test_two_segments_join_with_the_pause_asked_for(pause):
    a, _ = shape(utterance(seed=1), None, pause)
    b, _ = shape(utterance(lead_s=0.21, seed=2), None, pause)
    gap = silent_run(np.concatenate([a, b]))
    assert gap == pytest.approx(max(pause, 2 * MARGIN_S + FRAME / SR / 2), abs=FRAME / SR)
    assert len(a) % FRAME == 0 and len(b) % FRAME == 0


def test_the_cuts_fade_so_no_click_comes_back():
    out, _ = shape(utterance(), None, 0.3)
    assert out[0] == 0.0 and np.abs(out[:24]).max() < 1e-3  # the fade starts from zero
    first_loud = np.flatnonzero(np.abs(out) > 0.01)[0]
    assert first_loud / SR <= MARGIN_S + FRAME / SR  # the lead is the margin, within a frame


def test_audio_without_padding_is_left_as_it_is():
    tone = (0.1 * np.sin(np.arange(12_000) / 5)).astype(np.float32)
    out, d = shape(tone, np.array([4, 8, 8]), 0.5)
    assert out is tone and list(d) == [4, 8, 8]
    silence = np.zeros(6000, np.float32)
    assert shape(silence, None, 0.5)[0] is silence


def test_durations_follow_the_trimmed_audio():
    audio = utterance(lead_s=0.3, speech_s=1.0, tail_s=0.5)  # 1.8 s = 72 frames
    durations = np.array([14, 20, 20, 8, 10])  # bos, three phonemes, eos
    assert durations.sum() * FRAME == len(audio)
    out, shifted = shape(audio, durations, 0.38)
    assert shifted.sum() * FRAME == len(out) and shifted.dtype == durations.dtype
    onset = lambda x: np.flatnonzero(np.abs(x) > 0.01)[0] / SR  # noqa: E731
    moved = onset(audio) - onset(out)
    assert moved > 0.25 and round(moved * SR) % FRAME == 0  # the lead came off in whole frames
    before, _ = char_times("abc", durations, len(audio))
    after, _ = char_times("abc", shifted, len(out))
    np.testing.assert_allclose(after, before - moved)  # every phoneme moved with the audio


def test_shift_takes_frames_token_by_token():
    assert list(shift_durations(np.array([3, 2, 5, 4]), 4, 10)) == [0, 1, 5, 4]
    assert list(shift_durations(np.array([3, 2, 5, 4]), 0, 11)) == [3, 2, 5, 1]
    assert list(shift_durations(np.array([3, 2, 5, 4]), 0, 16)) == [3, 2, 5, 6]


def test_every_kind_of_boundary_has_a_pause_and_longer_marks_pause_longer():
    for lang in PAUSES:
        assert pause_for("sentence", lang) > pause_for("clause", lang) > pause_for("phrase", lang) >= 0
    assert pause_for("clause", "pt-br") == pause_for("clause", "en-us")  # no row of its own: English's


def test_windows_of_one_sentence_meet_as_decoded_with_only_a_fade():
    from backends.api import Segment, SentenceContext
    from backends.engine.joins import FADE_S, shape_segment, sound_extent

    sentence = SentenceContext("abc def", 0, 4)
    speech = utterance(lead_s=0.0, tail_s=0.0)
    first = Segment("abc", "abc", "v", ends="phrase", sentence=sentence)
    out, _ = shape_segment(first, speech, None)
    assert len(out) == len(speech) and out[-1] == 0.0  # no trim, no pause: the next window goes on
    k = round(FADE_S * SR)
    assert np.array_equal(out[:-k], speech[:-k])
    last = Segment("def", "def", "v", sentence=SentenceContext("abc def", 4, 7))
    tail = np.concatenate([speech, utterance(lead_s=0.0)[-round(0.5 * SR):]])
    out, d = shape_segment(last, tail, np.array([0, 10, 10, 0]))
    assert out[0] == 0.0 and np.array_equal(out[k : len(speech)], tail[k : len(speech)])  # its start is kept
    extent = sound_extent(out)
    assert extent is not None and (len(out) - extent[1]) / SR == pytest.approx(pause_for("sentence"), abs=0.05)
    assert d is not None and int(d.sum()) * FRAME == len(out)
