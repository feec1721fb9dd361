"""The onnx_durations benchmark's measures (log-spectral distance, word error rate) and its report."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.onnx_durations import body, log_spectral_distance, word_error_rate


def test_log_spectral_distance_is_zero_for_the_same_audio_and_counts_decibels():
    rng = np.random.default_rng(0)
    audio = rng.standard_normal(24_000).astype(np.float32)
    assert log_spectral_distance(audio, audio.copy()) == 0.0
    assert log_spectral_distance(audio, 0.5 * audio) == pytest.approx(20 * np.log10(2), abs=1e-6)  # 6.02 dB
    assert log_spectral_distance(audio, rng.standard_normal(24_000)) > 3.0  # other sound


def test_word_error_rate():
    assert word_error_rate("Your flight is on time.", ["your", "flight", "is", "on", "time"]) == 0.0
    assert word_error_rate("Your flight is on time.", ["your", "flights", "on", "time"]) == pytest.approx(2 / 5)
    assert word_error_rate("It's late.", []) == 1.0


def test_the_report_shows_the_ratios_and_the_control():
    medians = {f"runtime_{n}_{u}": 100.0 for n in ("plain", "timed", "control") for u in ("ms", "cpu_ms")}
    medians |= {"runtime_timed_ratio": 1.01, "runtime_timed_cpu_ratio": 1.002, "runtime_control_ratio": 0.99,
                "runtime_control_cpu_ratio": 1.004, "server_plain_ms": 900.0, "server_timed_ms": 950.0}
    summary = {"runtime_identical": 18, "runtime_samples": 18, "server_identical": 8, "server_clips": 8,
               "max_lsd_db": 0.0, "wer_plain": 0.2, "wer_timed": 0.2, "word_times_ok": 8}
    text = body({"medians": medians, "summary": summary})
    assert "**1.002x** the CPU time" in text and "control: 1.004x" in text and "18/18" in text
