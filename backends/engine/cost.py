"""The cost of a runtime call, as the scheduling policy expects it (``backends/engine/policy.py``):
seconds per input token, a running average per call kind of the calls measured.

Threading: :meth:`CostModel.measured` runs on worker threads (one float store per kind); the rest
is read on the event loop.
"""

from __future__ import annotations

from typing import Literal

from backends.api import Segment

#: How a call runs: alone with every core, beside other calls, or as one batch of segments.
CallKind = Literal["solo", "shared", "batch"]


def input_tokens(segment: Segment) -> int:
    """The model's input length for ``segment`` (its phonemes plus the start and end tokens)."""
    return len(segment.phonemes) + 2


class CostModel:
    """Seconds per input token, a running average per call kind (and batch size) of measured calls;
    a window of a sentence (a segment with its :attr:`~backends.api.Segment.sentence`) apart, since
    its call also decodes the frames around the window and, the first of its sentence, predicts the
    whole sentence."""

    def __init__(self, smoothing: float = 0.2):
        self.smoothing = smoothing
        self._rate: dict[tuple[CallKind, int, bool], float] = {}

    def measured(self, kind: CallKind, seconds: float, tokens: int, n: int = 1, *, windowed: bool = False) -> None:
        """Fold in a finished call of ``kind`` over ``tokens`` input tokens (``n`` segments);
        ``windowed``: a window of its sentence."""
        if tokens <= 0:
            return
        key = (kind, n if kind == "batch" else 1, windowed)
        rate, known = seconds / tokens, self._rate.get(key)
        self._rate[key] = rate if known is None else known + self.smoothing * (rate - known)

    def rate(self, kind: CallKind, n: int = 1, *, windowed: bool = False) -> float:
        """Seconds per token of ``kind``; of the nearest kind measured when this one is not yet
        (solo, shared, any batch; a window as a whole segment until one is measured); 0 when
        nothing is measured."""
        key = (kind, n if kind == "batch" else 1, windowed)
        if key in self._rate:
            return self._rate[key]
        if windowed:
            return self.rate(kind, n)
        for other in ("shared", "solo") if kind != "solo" else ("solo", "shared"):
            if (other, 1, False) in self._rate:
                return self._rate[(other, 1, False)]
        return next(iter(self._rate.values()), 0.0)

    def expected_s(self, segment: Segment, kind: CallKind = "solo") -> float:
        """How long a call of ``kind`` for ``segment`` is expected to take (0 until one is measured)."""
        return self.rate(kind, windowed=segment.sentence is not None) * input_tokens(segment)

    def snapshot(self) -> dict[str, float]:
        """Seconds per token by kind, e.g. ``{"solo": ..., "batch_4": ..., "solo_windowed": ...}``."""
        return {(k if k != "batch" else f"batch_{n}") + ("_windowed" if w else ""): v
                for (k, n, w), v in list(self._rate.items())}
