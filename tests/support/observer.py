"""A backend observer that records what it hears — the interface the server's Metrics implements
(``backends.api.BackendObserver``), for tests that look at what the engine reported."""

from __future__ import annotations


class Recorder:
    """Audio seconds per segment, batch sizes, queue depths, underrun and interrupted seconds, in call order.
    Called from worker threads and the loop; list appends are atomic under the GIL."""

    def __init__(self) -> None:
        self.segments: list[float] = []
        self.batches: list[int] = []
        self.depths: list[int] = []
        self.underruns: list[float] = []
        self.interruptions: list[float] = []
        self.loads: list[tuple[float, float]] = []
        self.overloaded: list[bool] = []

    def segment_done(self, synth_seconds: float, audio_seconds: float) -> None:
        self.segments.append(audio_seconds)

    def batch_done(self, size: int) -> None:
        self.batches.append(size)

    def queue_depth(self, n: int) -> None:
        self.depths.append(n)

    def underrun(self, seconds: float) -> None:
        self.underruns.append(seconds)

    def interrupted(self, seconds: float) -> None:
        self.interruptions.append(seconds)

    def load(self, demanded: float, delivered: float, *, overloaded: bool = False) -> None:
        self.loads.append((demanded, delivered))
        self.overloaded.append(overloaded)
