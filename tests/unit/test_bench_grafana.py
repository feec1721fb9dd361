"""The Grafana dashboard plots only series the server really exposes."""

import json
import re
from pathlib import Path

from benchmarks import prom
from server.metrics import Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "benchmarks" / "grafana" / "kokoro.json"


def test_every_series_in_the_dashboard_exists_on_metrics():
    m = Metrics()
    m.first_audio("ws", 0.1)
    m.segment_done(0.1, 1.0)
    m.batch_done(2)
    m.underrun(0.25)
    m.request_done("ws", 500, "backend_error")
    m.inflight.labels(route="ws").inc()
    exposed = {name for name, _ in prom.parse(m.render().decode())}
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"kokoro_[a-z_]+", e)}
    assert used, "the dashboard plots nothing"
    assert used <= exposed, f"not exposed by the server: {sorted(used - exposed)}"
    assert {"kokoro_time_to_first_audio_seconds_bucket", "kokoro_realtime_factor_bucket",
            "kokoro_batch_size_sum", "kokoro_audio_seconds_total",
            "kokoro_playback_underrun_seconds_total"} <= used
