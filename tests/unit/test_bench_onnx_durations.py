"""The onnx_durations benchmark's measures: the log-spectral distance and the word error rate."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.onnx_durations import log_spectral_distance, word_error_rate


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
