"""Every suite that can run on the model-free runtime, run with ``--quick --backend fake`` through
the one entry point (``python -m benchmarks <suite>``): it finishes, and writes a result that follows
the schema (the harness, not the figures; the suites of real inference are run on the real runtime by
hand). The suites that measure the model's own output are listed apart, each with the reason."""

from __future__ import annotations

import json

import pytest

from benchmarks.__main__ import NAMES, OWN_OPTIONS, main
from benchmarks.results import validate

pytestmark = [pytest.mark.bench, pytest.mark.subprocess, pytest.mark.timeout(300)]  # a whole benchmark suite each

SUITES = {name: [name, "--quick", "--backend", "fake"] for name in (
    "throughput", "payload", "overhead", "e2e", "agentproto", "load", "soak", "overload", "concurrent_probe",
    "word_timings")}
SUITES["compare"] = ["compare", "--quick", "--backend", "fake"]
#: What only the real model can show: its audio, its phonemes, its word timings, its decoder.
REAL_MODEL_ONLY = {
    "quality": "streamed audio against one reading of the whole text (the model's audio)",
    "languages": "each G2P front end's cost and the intelligibility of its audio",
    "onnx_durations": "two ONNX exports of the model compared",
    "onnx_vnni": "two graphs of the model compared on a CPU with VNNI",
    "windowed_decoder": "the torch decoder over a window of the sentence",
    "gpu": "the PyTorch runtime on a GPU",
    "telephony": "the intelligibility of the model's speech through G.711 (pocketsphinx transcripts)",
}

#: Run quick by a test of their own, which checks their figures too.
TESTED_APART = {"churn": "tests/e2e/test_churn.py", "fuzz": "tests/e2e/test_fuzz_protocols.py",
                "capacity": "tests/e2e/test_bench_capacity.py", "ttfa": "tests/e2e/test_bench_after_serve.py"}


def test_every_suite_is_run_here_or_said_to_need_the_model():
    assert set(SUITES) | set(REAL_MODEL_ONLY) | set(TESTED_APART) == {*NAMES, *OWN_OPTIONS}


# Each suite is a group of its own, so parallel workers share them out (they share no fixture).
@pytest.mark.parametrize("suite", [pytest.param(s, marks=pytest.mark.xdist_group(f"bench-quick-{s}")) for s in SUITES])
def test_the_suite_runs_quick_on_the_fake_runtime(suite, tmp_path, model_dir, monkeypatch):
    monkeypatch.setenv("KOKORO_MODEL_DIR", str(model_dir))
    out = tmp_path / "compare.json" if suite == "compare" else tmp_path
    assert main([*SUITES[suite], "--out", str(out)]) in (0, 1)  # 1: a goal not met, on a fake
    name = f"{suite}_fake" if suite in ("concurrent_probe", "word_timings") else suite
    data = json.loads((tmp_path / f"{name}.json").read_text())
    assert (tmp_path / f"{name}.md").read_text().strip()
    assert validate(data) == [] and data["samples"] and data["quick"] is True
    if suite == "concurrent_probe":
        assert all(m["audio_s_per_s"] > 0 for m in data["medians"].values())
    if suite == "soak":  # both phases: the mixed requests, then the streaming turns with barge-ins
        streaming = [s for s in data["samples"] if s.get("workload") == "streaming"]
        assert len(streaming) == 1 and len(data["samples"]) > 1, data["summary"]
        assert streaming[0]["unanswered"] == 0, streaming[0]["unanswered_examples"]
        assert streaming[0]["barged"] > 0 and not any(streaming[0]["tables_at_rest"].values()), streaming[0]
    if suite == "compare":
        assert not data["summary"].get("_unreachable")
        return
    assert data["command"] == f"python -m benchmarks {suite} --quick --backend fake"
