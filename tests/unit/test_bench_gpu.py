"""benchmarks/gpu.py's bookkeeping on the fake runtime with a timed batch path (the real runtime is timed by the
benchmark itself, never in a test): the load sweep answers every request through the server's
concurrent mode and reports the batches its scheduler formed, and the batched-vs-single check
catches a batch path that changes durations."""

from __future__ import annotations

import asyncio

import numpy as np

from backends.api import Segment
from backends.config import BackendConfig
from backends.runtimes.fake import FakeSynthesizer
from benchmarks.gpu import check_batched_vs_single
from benchmarks.inprocess import sweep


class TorchLikeFake(FakeSynthesizer):
    """The fake runtime with the torch runtime's capabilities (a timed batch path) and its
    ``deterministic`` switch; ``batch_shift``: frames a broken batch path adds to each item."""

    def __init__(self, batch_shift: int = 0):
        super().__init__(segment_s=0.0, batch=True, timed=True, thread_safe=False, solo_calls=False)
        self.deterministic = False
        self.batch_shift = batch_shift

    def synthesize_batch_timed(self, segments):
        out = super().synthesize_batch_timed(segments)
        if not self.batch_shift:
            return out
        return [(np.concatenate([a, np.zeros(600 * self.batch_shift, np.float32)]), d + self.batch_shift) for a, d in out]


SEGMENTS = [Segment(text=f"sentence {i}", phonemes="abc" * (i + 1), voice="v") for i in range(5)]


def test_the_sweep_answers_every_request_through_the_concurrent_mode_in_bounded_batches(model_dir):
    config = BackendConfig.defaults(backend="fake", mode="concurrent", fake_batch=True, batch_on_cpu=True,
                                    max_batch_size=4, fake_segment_s=0.02, model_dir=model_dir)
    texts = ["One sentence here.", "Another one, a little longer.", "A third."]
    levels = asyncio.run(sweep(config, texts, (1, 6), per_client=3))
    assert [lv["concurrency"] for lv in levels] == [1, 6] and [lv["requests"] for lv in levels] == [3, 18]
    assert levels[0]["mean_batch"] == 1 and 1 < levels[1]["mean_batch"] <= 4
    for level in levels:
        assert level["audio_s"] > 0 and level["audio_s_per_s"] > 0
        assert level["first_audio_ms_p50"] <= level["first_audio_ms_p95"] <= level["first_audio_ms_max"]


def test_batched_vs_single_check_passes_an_exact_batch_path_and_catches_a_broken_one():
    good = check_batched_vs_single(TorchLikeFake(), SEGMENTS[:3])
    assert good["ok"] and all(i["log_mel_mean_abs_db"] < 1e-6 for i in good["items"])
    broken = TorchLikeFake(batch_shift=1)
    bad = check_batched_vs_single(broken, SEGMENTS[:3])
    assert not bad["ok"] and not any(i["same_durations_and_length"] for i in bad["items"])
    assert broken.deterministic is False  # restored after the check
