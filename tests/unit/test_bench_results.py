"""Result files follow one schema; the summaries compute the figures docs/benchmarks.md quotes."""

import json
import shutil

import pytest

from benchmarks import overhead, results, throughput, ttfa
from benchmarks.results import Result, validate


@pytest.mark.subprocess
def test_a_written_result_follows_the_schema(tmp_path):
    r = Result("ttfa", True, results.command_line("ttfa", True), config={"runs_per_mode": 1})
    r.samples = [
        {"mode": "batch", "run": 1, "first_audio_ms": 2000.0, "complete_ms": 2000.0, "audio_s": 18.0},
        {"mode": "fast_first", "run": 1, "first_audio_ms": 250.0, "complete_ms": 2100.0, "audio_s": 18.0},
        {"mode": "clause_first", "run": 1, "first_audio_ms": 400.0, "complete_ms": 2100.0, "audio_s": 18.0},
    ]
    ttfa.summarize(r)
    r.config.update(paragraph_chars=267, voice="jm_kumo")
    data = results.write(r, title="t", body=ttfa.body, plot=ttfa.plot, out_dir=tmp_path, log=lambda _m: None)

    on_disk = json.loads((tmp_path / "ttfa.json").read_text())
    assert validate(on_disk) == []
    assert on_disk["summary"]["batch_ttfa_ms"] == 2000.0
    assert on_disk["summary"]["streaming_ttfa_ms"] == 250.0
    assert on_disk["summary"]["ratio"] == 0.125
    assert on_disk["machine"]["cpu_count"] >= 1
    assert "load_average_at_end" in on_disk["machine"]
    assert on_disk["summary"]["clause_first_ttfa_ms"] == 400.0
    # one verdict per number: 0.125 is over the 0.12x goal; 250 ms is within 1000 ms
    assert [(t["goal"], t["met"]) for t in on_disk["targets"]] == [("<= 0.12x", False),
                                                                   ("<= 1000 ms on this machine", True)]
    md = (tmp_path / "ttfa.md").read_text()
    assert "`python -m benchmarks ttfa --quick`" in md
    assert "| fast_first | 250.0 |" in md
    assert (tmp_path / "ttfa.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert data["benchmark"] == "ttfa"


@pytest.mark.subprocess
def test_validate_names_what_is_missing():
    data = Result("payload", False, "python -m benchmarks payload").to_dict()
    del data["samples"]
    data["medians"] = []
    problems = validate(data)
    assert "missing 'samples'" in problems
    assert any("'medians'" in p for p in problems)


def test_throughput_gain_compares_the_best_mode_with_raw_at_concurrency_4():
    r = Result("throughput", True, "x")
    for config, c, rate in [
        (throughput.RAW, 4, 1.0), ("onnx/sequential", 4, 1.1), ("onnx/concurrent", 4, 1.5), ("onnx/concurrent", 1, 0.9),
    ]:
        r.samples.append({"config": config, "concurrency": c, "audio_hours_per_hour": rate})
    throughput.summarize(r)
    assert r.summary["best_at_4"] == "onnx/concurrent"
    assert r.summary["gain_at_4"] == pytest.approx(1.5)
    assert r.targets[0]["met"] is True
    assert r.summary["gain_at_4_equal_work"] is None  # no chars_per_s in these samples
    assert r.medians["audio_hours_per_hour"]["onnx/concurrent"] == {"4": 1.5, "1": 0.9}


def test_overhead_is_the_median_paired_difference():
    r = Result("overhead", True, "x")
    for raw_ms, server_ms, runtime_ms in [(100.0, 104.0, 98.0), (200.0, 230.0, 199.0), (300.0, 301.0, 297.0)]:
        r.samples.append({
            "raw_ms": raw_ms, "raw_audio_s": raw_ms / 100, "server_first_audio_ms": server_ms,
            "server_complete_ms": server_ms, "server_audio_s": raw_ms / 100, "server_runtime_ms": runtime_ms,
            "first_audio_overhead_ms": server_ms - raw_ms, "serving_overhead_ms": server_ms - runtime_ms,
        })
    overhead.summarize(r)
    assert r.summary["first_audio_overhead_ms"] == 4.0
    assert r.summary["serving_overhead_ms"] == 6.0
    assert r.summary["throughput_ratio"] == pytest.approx(600 / 635, abs=1e-4)


def test_markdown_table_formats_numbers_for_people():
    table = results.markdown_table(["a", "b"], [[1234567, 0.12345], [None, 12345.678]])
    assert "| 1,234,567 | 0.123 |" in table
    assert "| — | 12,345.7 |" in table


@pytest.mark.subprocess
def test_render_only_rewrites_the_table_from_the_json(tmp_path):
    from benchmarks.__main__ import main

    r = Result("ttfa", False, results.command_line("ttfa", False), config={"runs_per_mode": 1})
    r.samples = [{"mode": "batch", "run": 1, "first_audio_ms": 900.0, "complete_ms": 900.0, "audio_s": 5.0}]
    ttfa.summarize(r)
    r.config.update(paragraph_chars=267, voice="jm_kumo")
    results.write(r, title="t", body=ttfa.body, out_dir=tmp_path, log=lambda _m: None)
    (tmp_path / "ttfa.md").write_text("stale")

    assert main(["ttfa", "--render-only", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "ttfa.md").read_text()
    assert "| batch | 900.0 |" in md and "`python -m benchmarks ttfa`" in md
    assert (tmp_path / "ttfa.png").exists()


def test_a_recorded_command_reads_the_same_on_any_machine():
    import sys
    from pathlib import Path

    argv = [sys.executable, "-m", "agent", "serve", "--reply", "Two words.",
            str(Path(sys.executable).with_name("kokoro-agent")), str(results.REPO_ROOT / "deploy" / "sagemaker" / "serve"),
            "/opt/ml/model"]
    assert results.shown_command(argv) == (
        "python -m agent serve --reply 'Two words.' kokoro-agent deploy/sagemaker/serve /opt/ml/model")


@pytest.mark.parametrize("q", [0, 25, 50, 90, 95, 99, 100])
def test_the_percentile_agrees_with_numpy_and_skips_missing_values(q):
    import numpy as np

    values = [3.0, None, 1.0, 7.5, 2.0, 10.0, 4.25]
    assert results.percentile(values, q) == pytest.approx(np.percentile([v for v in values if v is not None], q))
    assert results.percentile([None], q) is None and results.percentile([5.0], q) == 5.0


@pytest.mark.subprocess
def test_render_only_rewrites_a_suites_per_runtime_results_too(tmp_path):
    """churn writes churn_onnx.json on ONNX, soak soak_streaming.json for its turns: --render-only
    re-renders those beside <name>.json, and leaves a file of another name (a kept copy) alone."""
    from benchmarks.__main__ import main

    shutil.copy(results.RESULTS_DIR / "churn_onnx.json", tmp_path / "churn_onnx.json")
    kept = json.loads((results.RESULTS_DIR / "churn_onnx.json").read_text())
    (tmp_path / "churn_onnx_before.json").write_text(json.dumps(kept))  # benchmark: churn_onnx, not its stem
    (tmp_path / "churn_onnx.md").write_text("stale")

    assert main(["churn", "--render-only", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "churn_onnx.md").read_text()
    assert md.startswith("# Churn") and f"{kept['samples'][0]['sessions']:,} sessions on onnx/concurrent" in md
    assert not (tmp_path / "churn.md").exists() and not (tmp_path / "churn_onnx_before.md").exists()
