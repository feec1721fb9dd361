"""Every suite that can run on the model-free runtime, run with ``--quick`` through the one entry
point (``python -m benchmarks <suite>``): it finishes, and writes a result that follows the schema
(the harness, not the figures; the suites of real inference are run on the real runtime by hand)."""

from __future__ import annotations

import json

import pytest

from benchmarks.__main__ import main
from benchmarks.results import validate

SUITES = {
    "load": ["load", "--quick", "--backend", "fake"],
    "soak": ["soak", "--quick", "--backend", "fake"],
    "overload": ["overload", "--quick", "--backend", "fake"],
    "concurrent_probe": ["concurrent_probe", "--quick", "--runtime", "fake"],
}


@pytest.mark.parametrize("suite", list(SUITES))
def test_the_suite_runs_quick_on_the_fake_runtime(suite, tmp_path, model_dir, monkeypatch):
    monkeypatch.setenv("KOKORO_MODEL_DIR", str(model_dir))
    assert main([*SUITES[suite], "--out", str(tmp_path)]) in (0, 1)  # 1: a goal not met, on a fake
    name = "concurrent_probe_fake" if suite == "concurrent_probe" else suite
    data = json.loads((tmp_path / f"{name}.json").read_text())
    assert (tmp_path / f"{name}.md").read_text().strip()
    if suite == "concurrent_probe":
        assert all(m["audio_s_per_s"] > 0 for m in data["medians"].values())
        return
    assert validate(data) == [] and data["samples"] and data["quick"] is True
    assert data["command"] == f"python -m benchmarks {suite} --quick --backend fake"
