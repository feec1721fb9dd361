"""``python -m benchmarks capacity --quick`` on the fake runtime (the GPU-timed stand-in), through
the one entry point: every workload answered at every level, the calibration stated, and a
recommended per-instance target that ``deploy up --dry-run --capacity-from`` then sets; with
``KOKORO_OVERLOAD=refuse``, offered 4x the capacity the concurrent plan held, the server turns
newcomers away with 503 ``overloaded`` and answers the rest. The target is made loose
(``--target-ms``) so the harness, not this shared machine's speed, is what is checked; the figures
live in benchmarks/results/capacity.json."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.__main__ import main
from benchmarks.capacity import HEADROOM, REFUSE_PLAN
from benchmarks.results import validate
from deploy.sagemaker.deploy import main as deploy_main

pytestmark = [pytest.mark.bench, pytest.mark.subprocess]


def test_capacity_quick_measures_every_workload_and_recommends_a_target_deploy_sets(tmp_path, model_dir,
                                                                                      monkeypatch, capsys):
    monkeypatch.setenv("KOKORO_MODEL_DIR", str(model_dir))
    assert main(["capacity", "--quick", "--backend", "fake", "--target-ms", "20000", "--out", str(tmp_path)]) in (0, 1)
    data = json.loads((tmp_path / "capacity.json").read_text())
    assert validate(data) == [] and data["quick"] is True
    assert data["command"] == "python -m benchmarks capacity --quick --backend fake --target-ms 20000.0"
    assert data["config"]["gpu_standin"]["calibration"]["sources"]  # the stand-in says what it stands for
    seen = {(s["plan"], s["workload"], s["loop"]) for s in data["samples"]}
    assert {("fake-gpu/concurrent", w, "closed") for w in ("sentence", "bidi", "deepgram")} <= seen
    assert ("fake-gpu/sequential", "sentence", "open") in seen
    refuse = [s for s in data["samples"] if s["plan"] == REFUSE_PLAN]
    assert [s["loop"] for s in refuse] == ["open", "open"]
    assert refuse[-1]["refused"] > 0  # 4x capacity: newcomers told `overloaded`, not queued ...
    assert refuse[-1]["refused_with_retry_after"] == refuse[-1]["refused"]  # ... and when to come back
    hol = [s for s in data["samples"] if s["workload"] == "head_of_line"]
    assert hol and all(s["behind_long_ms"] > 0 and s["long_own_ms"] > 0 and s["long_alone_ms"] > 0 for s in hol)
    for sample in (s for s in data["samples"] if s["workload"] != "head_of_line"):
        assert sample["answered"] > 0 and sample["failed"] == 0, sample
        assert sample["first_audio_ms_p50"] <= sample["first_audio_ms_p95"] <= sample["first_audio_ms_p99"]
        assert sample["cpu_ms_per_request"] > 0
        assert sample["server_first_audio_ms_p95"] > 0  # the server's own view beside the client's
    rec = data["summary"]["recommendation"]
    assert rec["from"] == "fake-gpu/concurrent" and rec["target_sessions"] == max(1, math.floor(
        rec["sessions_within_target"] * HEADROOM))

    assert "Recommended autoscaling target" in (tmp_path / "capacity.md").read_text()

    capsys.readouterr()
    assert deploy_main(["up", "--dry-run", "--name", "kokoro-tts", "--capacity-from", str(tmp_path / "capacity.json")]) == 0
    said = capsys.readouterr().out
    assert f'"TargetValue":{float(rec["target_sessions"])}' in said
    assert f"target {rec['target_sessions']:g} concurrent requests per instance" in said


def test_deploy_refuses_a_capacity_file_that_holds_no_target(tmp_path, capsys):
    empty = tmp_path / "capacity.json"
    empty.write_text(json.dumps({"benchmark": "capacity", "summary": {"recommendation": None}}))
    assert deploy_main(["up", "--dry-run", "--name", "kokoro-tts", "--capacity-from", str(empty)]) == 1
    assert "no recommended target" in capsys.readouterr().err
    assert deploy_main(["scale", "--dry-run", "--name", "kokoro-tts", "--capacity-from", str(empty),
                        "--target-sessions", "4"]) == 1
