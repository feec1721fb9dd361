"""The onnx_durations benchmark's measures (log-spectral distance, word edits) and its report."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.onnx_durations import body
from benchmarks.speech_measures import log_spectral_distance, word_edits, words


@pytest.mark.parametrize("frames", [dict(n_fft=1024, hop=256, centred=False), dict(), dict(speech_only=True)])
def test_log_spectral_distance_is_zero_for_the_same_audio_and_counts_decibels(frames):
    rng = np.random.default_rng(0)
    audio = rng.standard_normal(24_000).astype(np.float32)
    assert log_spectral_distance(audio, audio.copy(), **frames) == 0.0
    assert log_spectral_distance(audio, 0.5 * audio, **frames) == pytest.approx(20 * np.log10(2), abs=1e-6)  # 6.02 dB
    assert log_spectral_distance(audio, rng.standard_normal(24_000), **frames) > 3.0  # other sound


def test_speech_only_leaves_out_what_the_reference_does_not_say():
    rng = np.random.default_rng(1)
    speech, other = rng.standard_normal(12_000), rng.standard_normal(12_000)
    reference = np.concatenate([speech, np.zeros(12_000)])
    assert log_spectral_distance(np.concatenate([speech, other]), reference, speech_only=True) < 0.01
    assert log_spectral_distance(np.concatenate([speech, other]), reference) > 3.0


def test_word_edits():
    assert word_edits(words("Your flight is on time."), ["your", "flight", "is", "on", "time"]) == 0
    assert word_edits(words("Your flight is on time."), ["your", "flights", "on", "time"]) == 2
    assert word_edits(words("It's late."), []) == 2 and words("It's late.") == ["it's", "late"]


def test_the_report_shows_the_ratios_and_the_control():
    medians = {f"runtime_{n}_{u}": 100.0 for n in ("plain", "timed", "control") for u in ("ms", "cpu_ms")}
    medians |= {"runtime_timed_ratio": 1.01, "runtime_timed_cpu_ratio": 1.002, "runtime_control_ratio": 0.99,
                "runtime_control_cpu_ratio": 1.004, "server_plain_ms": 900.0, "server_timed_ms": 950.0}
    summary = {"runtime_identical": 18, "runtime_samples": 18, "server_identical": 8, "server_clips": 8,
               "max_lsd_db": 0.0, "wer_plain": 0.2, "wer_timed": 0.2, "word_times_ok": 8}
    text = body({"medians": medians, "summary": summary})
    assert "**1.002x** the CPU time" in text and "control: 1.004x" in text and "18/18" in text
