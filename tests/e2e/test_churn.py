"""The churn suite's quick run (``python -m benchmarks churn --quick --backend fake``: 1,000 short
sessions over every route against a server process, with cancels, barge-ins and vanishing clients):
every table the server keeps per session is back at 0 afterwards (``kokoro_state_entries`` on
``/metrics``), no request was left unanswered, ``/ping`` still answers 200, and the server's memory
after warm-up stays within the suite's goal (20 MiB over the 900 sessions after the 100 of warm-up: a
leak of ~23 KiB a session, a second of audio kept per session among them; the slower leaks are the
100,000-session run's to find, as they were at 2,000 here: the fake runtime's 0.3 KiB a session was)."""

from __future__ import annotations

import json

import pytest

from benchmarks.__main__ import main
from benchmarks.results import validate

pytestmark = [pytest.mark.bench, pytest.mark.subprocess]


def test_churn_quick_leaves_nothing_behind(tmp_path, model_dir, monkeypatch):
    monkeypatch.setenv("KOKORO_MODEL_DIR", str(model_dir))
    status = main(["churn", "--quick", "--backend", "fake", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "churn.json").read_text())
    assert validate(data) == [] and data["command"] == "python -m benchmarks churn --quick --backend fake"
    sample = data["samples"][0]
    assert sample["unanswered"] == 0, sample["unanswered_examples"]
    assert sample["tables_at_rest"] and not any(sample["tables_at_rest"].values()), sample["tables_at_rest"]
    assert sample["ping_after"] == 200
    assert {kind for kind, c in sample["counts"].items() if c["answered"]} == set(data["config"]["mix"])
    judged = [t for t in data["targets"] if t["met"] is not None]  # on fake: every goal but the relative growth
    assert len(judged) == 4 and all(t["met"] for t in judged), data["targets"]
    assert status == 0
