"""Read the server's own view from two ``/metrics`` scrapes (before and after a run).

Counters and histograms only grow, so what a run did is ``after - before``; a histogram delta is
summarised like Prometheus' ``histogram_quantile`` (linear interpolation inside a bucket). Pure
functions over the text exposition format; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

#: (sample name, sorted label pairs) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of a scrape, keyed by name and labels. ``*_created`` timestamps are dropped."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def delta(before: Samples, after: Samples) -> Samples:
    """``after - before`` for every sample in ``after`` (a sample absent before counts from 0)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def _matches(labels: tuple[tuple[str, str], ...], want: Mapping[str, str] | None) -> bool:
    return not want or want.items() <= dict(labels).items()


@dataclass(frozen=True)
class Histogram:
    """One histogram (summed over the label sets that matched): cumulative ``buckets``
    ``[(upper_bound, count), ...]`` ending with ``+Inf``, plus ``count`` and ``sum``."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def quantile(self, q: float) -> float | None:
        """Prometheus' ``histogram_quantile``: linear within the bucket holding rank ``q*count``;
        a rank in the ``+Inf`` bucket answers the highest finite bound. None when empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError("q must be within [0, 1]")
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        prev_bound, prev_count = 0.0, 0.0
        for bound, cum in self.buckets:
            if cum >= rank and cum > prev_count:
                if math.isinf(bound):
                    return prev_bound
                return prev_bound + (bound - prev_bound) * (rank - prev_count) / (cum - prev_count)
            prev_bound, prev_count = (bound if not math.isinf(bound) else prev_bound), cum
        return prev_bound


def histogram(samples: Samples, name: str, labels: Mapping[str, str] | None = None) -> Histogram:
    """The histogram ``name`` from parsed samples (or a delta), summed over matching label sets."""
    buckets: dict[float, float] = {}
    count = total = 0.0
    for (sample, lbls), value in samples.items():
        if not _matches(lbls, labels):
            continue
        if sample == f"{name}_bucket":
            bound = float(dict(lbls).get("le", "+Inf"))  # float() reads "+Inf"
            buckets[bound] = buckets.get(bound, 0.0) + value
        elif sample == f"{name}_count":
            count += value
        elif sample == f"{name}_sum":
            total += value
    return Histogram(tuple(sorted(buckets.items())), count, total)


def value(samples: Samples, name: str, labels: Mapping[str, str] | None = None) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(v for (s, lbls), v in samples.items() if s == name and _matches(lbls, labels))


def _by(samples: Samples, name: str, *labels: str) -> dict[str, float]:
    """The non-zero samples called ``name``, keyed by the values of ``labels`` ("?" where absent)."""
    return {" ".join(dict(lbls).get(k, "?") for k in labels): v
            for (s, lbls), v in sorted(samples.items()) if s == name and v}


def _summary(h: Histogram, scale: float = 1.0, digits: int = 3) -> dict[str, float | None]:
    figures = {"mean": h.mean, "p50": h.quantile(0.5), "p90": h.quantile(0.9)}
    return {"count": h.count} | {k: None if v is None else round(v * scale, digits) for k, v in figures.items()}


def server_view(before: Samples, after: Samples) -> dict:
    """What the server says happened between two scrapes: first audio per route (ms), real-time
    factor and segment time per segment, batch sizes, audio seconds and requests by status."""
    d = delta(before, after)
    ttfa = "kokoro_time_to_first_audio_seconds"
    routes = sorted({dict(lbls)["route"] for (s, lbls) in d if s == f"{ttfa}_count" and "route" in dict(lbls)})
    return {
        "time_to_first_audio_ms": {"all": _summary(histogram(d, ttfa), 1000.0, 1),
                                   **{r: _summary(histogram(d, ttfa, {"route": r}), 1000.0, 1) for r in routes}},
        "realtime_factor": _summary(histogram(d, "kokoro_realtime_factor")),
        "segment_synthesis_ms": _summary(histogram(d, "kokoro_segment_synthesis_seconds"), 1000.0, 1),
        "batch_size": _summary(histogram(d, "kokoro_batch_size"), 1.0, 2),
        "audio_seconds": round(value(d, "kokoro_audio_seconds_total"), 3),
        "requests": _by(d, "kokoro_requests_total", "route", "status"),
        "errors": _by(d, "kokoro_errors_total", "route", "code"),
    }
