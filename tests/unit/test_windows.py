"""The frame arithmetic of a window of a sentence: where a window is cut, how far its decode reaches,
and how its frames are shared out among the segment's tokens; a sentence's prediction kept for its
windows and let go."""

from __future__ import annotations

import numpy as np

from backends.api import Segment, SentenceContext
from backends.runtimes.windowing import (
    Predictions,
    boundary_frame,
    decode_range,
    fold_durations,
    prediction_key,
    token_range,
)


def test_a_window_is_cut_at_the_quietest_frame_of_the_space_before_the_next_word():
    durations = np.array([2, 3, 4, 3, 2])  # bos, three tokens, eos: ends 2, 5, 9, 12, 14
    energy = np.ones(28, np.float32)
    energy[14:16] = 0.0  # quietest around frame 7 (steps 14-15)
    assert boundary_frame(durations, energy, 0, 3) == 0
    assert boundary_frame(durations, energy, 3, 3) == 14
    assert boundary_frame(durations, energy, 2, 3) in (7, 8)
    assert 5 <= boundary_frame(durations, np.ones(28, np.float32), 2, 3) <= 9


def test_the_decode_reaches_past_the_window_but_not_past_the_sentence():
    assert decode_range(0, 20, 100, 8) == (0, 28)
    assert decode_range(20, 60, 100, 8) == (12, 68)
    assert decode_range(90, 100, 100, 8) == (82, 100)


def test_a_windows_frames_add_up_and_go_to_the_segments_tokens():
    per_token = np.array([2, 3, 4, 3, 2])  # the sentence: bos, t0, t1, t2, eos
    first = fold_durations(per_token, 0, 7, first=0, own=1)  # t0 and part of t1 (the space after it)
    assert first.tolist() == [2, 3, 2] and first.sum() == 7
    rest = fold_durations(per_token, 7, 14, first=1, own=2)
    assert rest.tolist() == [0, 2, 3, 2] and rest.sum() == 7


def test_a_segment_knows_its_share_of_the_sentence():
    sentence = SentenceContext("ab cd", 0, 3)
    seg = Segment("a", "ab", "v", sentence=sentence)
    span = token_range(seg, lambda p: [ord(c) for c in p])
    assert (span.first, span.end, span.own, len(span.tokens)) == (0, 3, 2, 5)


def test_a_sentences_prediction_is_made_once_and_let_go_after_its_last_window():
    now = [0.0]
    kept = Predictions[str](size=2, max_age_s=30.0, clock=lambda: now[0])
    made: list[str] = []

    def predict(name: str):
        return lambda: made.append(name) or name

    key = prediction_key([1, 2, 3], np.zeros(256, np.float32), 1.0)
    assert kept.get(key, predict("a"), last=False) == "a"
    assert kept.get(key, predict("a"), last=False) == "a" and made == ["a"]  # the second window reuses it
    assert kept.get(key, predict("a"), last=True) == "a" and made == ["a"] and len(kept) == 0  # the last lets go
    assert key != prediction_key([1, 2, 3], np.zeros(256, np.float32), 1.1)  # another speed, another reading
    assert key != prediction_key([1, 2, 3], np.ones(256, np.float32), 1.0)  # another voice
    for n in range(5):  # readings stopped after their first window: at most ``size`` kept
        kept.get(prediction_key([n], np.zeros(256, np.float32), 1.0), predict(f"r{n}"), last=False)
    assert len(kept) == 2
    now[0] = 31.0  # and none for longer than ``max_age_s``
    assert len(kept) == 0
