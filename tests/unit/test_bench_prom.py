"""/metrics parsing and deltas, on the exposition the server's own Metrics class renders."""

import math

import pytest

from benchmarks import prom
from server.metrics import Metrics


def scrape(metrics: Metrics) -> prom.Samples:
    return prom.parse(metrics.render().decode())


def test_delta_of_two_scrapes_is_what_happened_between_them():
    m = Metrics()
    m.first_audio("ws", 0.4)
    m.segment_done(1.0, 4.0)
    before = scrape(m)
    for seconds in (0.06, 0.09, 0.12, 0.4):
        m.first_audio("ws", seconds)
    m.first_audio("invocations", 2.5)
    m.segment_done(0.5, 2.0)
    m.batch_done(4)
    m.request_done("ws", 200)
    m.request_done("ws", 503, "overloaded")
    after = scrape(m)

    d = prom.delta(before, after)
    ws = prom.histogram(d, "kokoro_time_to_first_audio_seconds", {"route": "ws"})
    assert ws.count == 4
    assert ws.sum == pytest.approx(0.67)
    everything = prom.histogram(d, "kokoro_time_to_first_audio_seconds")
    assert everything.count == 5
    assert prom.value(d, "kokoro_audio_seconds_total") == pytest.approx(2.0)

    view = prom.server_view(before, after)
    assert view["time_to_first_audio_ms"]["ws"]["count"] == 4
    assert view["time_to_first_audio_ms"]["ws"]["mean"] == pytest.approx(167.5)
    assert view["time_to_first_audio_ms"]["invocations"]["count"] == 1
    assert view["realtime_factor"]["count"] == 1 and view["realtime_factor"]["mean"] == pytest.approx(0.25)
    assert view["batch_size"]["count"] == 1 and view["batch_size"]["mean"] == 4
    assert view["requests"] == {"ws 200": 1.0, "ws 503": 1.0}
    assert view["errors"] == {"ws overloaded": 1.0}


def test_created_timestamps_are_not_samples():
    m = Metrics()
    m.first_audio("ws", 0.1)
    assert not any(name.endswith("_created") for name, _ in scrape(m))


def test_quantile_interpolates_like_prometheus():
    h = prom.Histogram(buckets=((0.1, 2.0), (0.5, 5.0), (math.inf, 5.0)), count=5.0, sum=1.0)
    assert h.quantile(0.5) == pytest.approx(0.1 + 0.4 * (2.5 - 2) / 3)
    assert h.quantile(0.2) == pytest.approx(0.05)
    assert h.mean == pytest.approx(0.2)
    over = prom.Histogram(buckets=((1.0, 0.0), (math.inf, 3.0)), count=3.0, sum=9.0)
    assert over.quantile(0.5) == 1.0  # beyond the last finite bound: that bound, as Prometheus does
    assert prom.Histogram((), 0.0, 0.0).quantile(0.5) is None


def test_parse_reads_hand_written_exposition():
    text = (
        "# TYPE kokoro_batch_size histogram\n"
        'kokoro_batch_size_bucket{le="1.0"} 3\n'
        'kokoro_batch_size_bucket{le="4.0"} 7\n'
        'kokoro_batch_size_bucket{le="+Inf"} 8\n'
        "kokoro_batch_size_count 8\n"
        "kokoro_batch_size_sum 30\n"
    )
    h = prom.histogram(prom.parse(text), "kokoro_batch_size")
    assert h.buckets == ((1.0, 3.0), (4.0, 7.0), (math.inf, 8.0))
    assert h.count == 8 and h.mean == pytest.approx(3.75)
