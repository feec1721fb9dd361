"""The quality benchmark's measures on made-up audio: alignment, silences, pitch, clicks, and the
summary its table and targets are drawn from."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import quality
from benchmarks import speech_measures as sm

SR = 24_000


def tone(seconds: float, hz: float = 150.0, level: float = 0.3) -> np.ndarray:
    t = np.arange(round(seconds * SR)) / SR
    # a voiced-like tone: a few harmonics so the pitch tracker and the mel frames have something to hold
    return (level * sum(np.sin(2 * np.pi * hz * k * t) / k for k in range(1, 6))).astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * SR), np.float32)


def test_alignment_follows_a_stretched_pause():
    a = np.concatenate([tone(0.5, 150), silence(0.2), tone(0.5, 220)])
    b = np.concatenate([tone(0.5, 150), silence(0.6), tone(0.5, 220)])
    path = sm.align(a, b)
    assert len(path) == len(sm.log_mel(a)) and np.all(np.diff(path) >= 0)
    assert abs(path[20] - 20) <= 2  # the first tone maps onto itself
    assert abs(path[90] - 130) <= 3  # the second tone starts 0.4 s later in b


def test_silent_runs_and_the_run_at_a_join():
    audio = np.concatenate([tone(0.3), silence(0.25), tone(0.3)])
    runs = sm.silent_runs(audio, min_s=0.05)
    assert len(runs) == 1 and (runs[0][1] - runs[0][0]) * sm.HOP_S == pytest.approx(0.25, abs=0.02)
    assert sm.run_at(runs, 40) == runs[0] and sm.run_at(runs, 5) is None


def test_pitch_reads_the_tone_and_a_fall_in_semitones():
    f0 = sm.pitch(tone(0.5, 150))
    assert np.median(f0[f0 > 0]) == pytest.approx(150, rel=0.02)
    assert sm.semitones(75, 150) == pytest.approx(-12.0)


def test_a_click_at_a_join_stands_out_in_the_band():
    clean = np.concatenate([tone(0.4), silence(0.3), tone(0.4)])
    clicked = clean.copy()
    at = round(0.55 * SR)
    clicked[at] = 0.8
    assert sm.band_db(clean, at) < -60 and sm.band_db(clicked, at) > -40


def test_the_summary_takes_gaps_pitch_and_durations_per_setting():
    join = lambda kind, gap, pause, st: {"kind": kind, "gap_s": gap, "reading_pause_s": pause, "cut_st": st,  # noqa: E731
                                         "click_db": -70.0}
    samples = [
        {"joins": [join("phrase", 0.12, 0.05, -3.0), join("sentence", 0.6, 0.55, 1.0)], "excess_pct": 2.0,
         "first_audio_s": 0.5, "words_heard": 0.8, "reference_words_heard": 0.8},
        {"joins": [join("phrase", 0.10, 0.10, 1.0)], "excess_pct": -1.0, "first_audio_s": 0.7,
         "words_heard": 0.9, "reference_words_heard": 0.9},
    ]
    s = quality.summarise(samples)
    assert s["gap_error_worst_s"] == pytest.approx(0.07) and s["gap_error_mean_s"] == pytest.approx(0.04)
    assert s["cut_st_mean"] == pytest.approx(2.0) and s["cut_st_worst"] == 3.0 and s["early_cuts"] == 2
    assert s["excess_pct_mean"] == pytest.approx(0.5) and s["by_kind"]["phrase"]["joins"] == 2
