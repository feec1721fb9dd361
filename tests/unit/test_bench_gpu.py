"""benchmarks/gpu.py's bookkeeping on a fake batch synthesizer (the real runtime is timed by the
benchmark itself, never in a test): the closed loop answers every request, batches within the
bound, and the batched-vs-single check catches a batch path that changes durations."""

from __future__ import annotations

import numpy as np

from backends.base import Segment
from benchmarks.gpu import check_batched_vs_single, run_level


class FakeTimedSynth:
    """Implements synthesize_batch / synthesize_batch_timed / synthesize_timed like the torch runtime:
    one frame (600 samples) per phoneme character, a tone whose pitch depends on the text."""

    def __init__(self, batch_shift: int = 0):
        self.deterministic = False
        self.batch_shift = batch_shift  # frames a broken batch path adds
        self.batches: list[int] = []

    def _one(self, seg: Segment, extra: int = 0) -> tuple[np.ndarray, np.ndarray]:
        durations = np.ones(len(seg.phonemes) + 2, np.int64)
        durations[0] += extra
        t = np.arange(int(durations.sum()) * 600) / 24000
        return (0.3 * np.sin(2 * np.pi * (100 + len(seg.text)) * t)).astype(np.float32), durations

    def synthesize_timed(self, seg):
        return self._one(seg)

    def synthesize_batch_timed(self, segs):
        self.batches.append(len(segs))
        return [self._one(s, self.batch_shift) for s in segs]

    def synthesize_batch(self, segs):
        return [a for a, _ in self.synthesize_batch_timed(segs)]


SEGMENTS = [Segment(text=f"sentence {i}", phonemes="abc" * (i + 1), voice="v") for i in range(5)]


def test_closed_loop_answers_every_request_in_bounded_batches():
    synth = FakeTimedSynth()
    level = run_level(synth, SEGMENTS, clients=6, per_client=3, max_batch=4)
    assert level["requests"] == 18 and sum(synth.batches) == 18
    assert max(synth.batches) <= 4 and level["mean_batch"] > 1
    assert level["audio_s"] > 0 and level["audio_s_per_s"] > 0
    assert level["first_audio_ms_p50"] <= level["first_audio_ms_p95"] <= level["first_audio_ms_max"]


def test_batched_vs_single_check_passes_an_exact_batch_path_and_catches_a_broken_one():
    good = check_batched_vs_single(FakeTimedSynth(), SEGMENTS[:3])
    assert good["ok"] and all(i["log_mel_mean_abs_db"] < 1e-6 for i in good["items"])
    broken = FakeTimedSynth(batch_shift=1)
    bad = check_batched_vs_single(broken, SEGMENTS[:3])
    assert not bad["ok"] and not any(i["same_durations_and_length"] for i in bad["items"])
    assert broken.deterministic is False  # restored after the check
