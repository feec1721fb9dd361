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
    m.send_timed_out("ws")
    m.interrupted(0.1)
    exposed = {name for name, _ in prom.parse(m.render().decode())}
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"(?:kokoro|process)_[a-z_]+", e)}
    assert used, "the dashboard plots nothing"
    assert used <= exposed, f"not exposed by the server: {sorted(used - exposed)}"
    assert {"kokoro_time_to_first_audio_seconds_bucket", "kokoro_realtime_factor_bucket",
            "kokoro_batch_size_sum", "kokoro_audio_seconds_total",
            "kokoro_playback_underrun_seconds_total", "kokoro_send_timeouts_total", "kokoro_interrupted_calls_total",
            "process_cpu_seconds_total", "process_resident_memory_bytes"} <= used


def test_every_panel_has_a_place_of_its_own():
    dash = json.loads(DASHBOARD.read_text())
    cells = [(x, y) for p in dash["panels"] for x in range(p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"])
             for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])]
    assert len(cells) == len(set(cells))  # no panel drawn over another
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
