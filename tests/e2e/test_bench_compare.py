"""``python -m benchmarks compare`` against real servers of this project (sequential and concurrent,
over the fake runtime), an OpenAI-only stand-in (no WebSocket, no ``/ping``), a SageMaker endpoint
this interpreter cannot reach (no SDK) and a port nothing listens on: every row of every target is
filled, "unsupported" with a reason, or a per-target connection failure; the ratios are against the
first target; the JSON, Markdown and PNG are written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks.compare.report import ratio
from tests.support.live import REPO, ServerProcess, ThreadServer, free_port
from tests.support.openai_standin import openai_standin

pytestmark = [pytest.mark.bench, pytest.mark.subprocess]

REQUEST_ROWS = ("one_sentence", "paragraph", "sentences")
BAD = ("invalid_json", "whitespace_text", "unknown_voice", "over_limit")


@pytest.fixture(scope="module")
def servers(model_dir, tmp_path_factory):
    logs = tmp_path_factory.mktemp("compare")
    env = {"KOKORO_BACKEND": "fake", "KOKORO_FAKE_SEGMENT_S": "0.01", "KOKORO_MODEL_DIR": str(model_dir)}
    seq = ServerProcess(logs / "seq.log", KOKORO_MODE="sequential", **env)
    conc = ServerProcess(logs / "conc.log", KOKORO_MODE="concurrent", **env)
    try:
        seq.wait_ready()
        conc.wait_ready()
        with ThreadServer(openai_standin(), ready_path="/health") as oai:
            yield seq, conc, oai
    finally:
        seq.stop()
        conc.stop()


@pytest.fixture(scope="module")
def result(servers, tmp_path_factory):
    seq, conc, oai = servers
    out = tmp_path_factory.mktemp("out") / "cmp.json"
    argv = [sys.executable, "-m", "benchmarks", "compare", "--quick", "--runs", "1", "--requests-per-client", "1",
            "--target", f"seq={seq.ws_url}", "--target", f"conc=ws://127.0.0.1:{conc.port}",
            "--target", f"conc-post={conc.url}/invocations", "--target", f"oai=openai+{oai.url}/v1#voice=af_heart",
            "--target", "sm=sagemaker://my-endpoint?region=us-east-1",
            "--target", f"gone=ws://127.0.0.1:{free_port()}", "--pid", f"seq={seq.proc.pid}", "--out", str(out)]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.exists(), proc.stdout + proc.stderr
    return proc, out, json.loads(out.read_text())


def test_every_row_of_every_reachable_target_is_measured(result):
    proc, out, data = result
    assert proc.returncode == 1  # one target could not be reached
    assert out.with_suffix(".md").exists() and out.with_suffix(".png").stat().st_size > 0
    assert "4 client(s)" in proc.stdout  # progress as it goes
    for name in ("seq", "conc", "conc-post", "oai"):
        s = data["summary"][name]
        for row in REQUEST_ROWS:
            assert s[row]["first_audio_ms"]["median"] > 0, (name, row, s[row])
            assert s[row]["total_ms"]["mean"] >= s[row]["first_audio_ms"]["mean"]
        for level in ("1", "4"):
            assert s["sweep"][level]["first_audio_ms_p95"] > 0 and s["sweep"][level]["errors"] == 0, s["sweep"]
            assert s["sweep"][level]["audio_s_per_s"] > 0
        assert s["health"]["median_ms"] > 0 and s["health"]["not_200"] == 0
        assert set(s["bad_input"]) == set(BAD)
        assert all(b["next_ok"] for b in s["bad_input"].values()), s["bad_input"]
    assert data["summary"]["seq"]["sentences"]["pipelined"] and not data["summary"]["oai"]["sentences"]["pipelined"]
    assert data["summary"]["seq"]["rss_mib_max"] > 10


def test_each_target_answers_bad_input_its_own_way(result):
    _, _, data = result
    seq, oai = data["summary"]["seq"]["bad_input"], data["summary"]["oai"]["bad_input"]
    assert "invalid_json" in seq["invalid_json"]["answer"] and "unknown_voice" in seq["unknown_voice"]["answer"]
    assert "text_too_long" in seq["over_limit"]["answer"]
    post = data["summary"]["conc-post"]["bad_input"]
    assert post["invalid_json"]["answer"].startswith("HTTP 400") and post["over_limit"]["answer"].startswith("HTTP 413")
    assert oai["invalid_json"]["answer"].startswith("HTTP 422") and "not found" in oai["unknown_voice"]["answer"]
    assert oai["over_limit"]["answer"].startswith("HTTP 200: audio")  # no limit: it just speaks
    assert oai["whitespace_text"]["answer"] == "HTTP 200 with an empty body"
    assert data["summary"]["oai"]["health"]["route"] == "/health"
    assert data["summary"]["seq"]["health"]["route"] == "/ping"


def test_unsupported_and_unreachable_targets_are_reported_per_row(result):
    _, out, data = result
    sm, gone = data["summary"]["sm"], data["summary"]["gone"]
    for row in REQUEST_ROWS:
        assert "Python >= 3.12" in sm[row]["unsupported"]
        assert gone[row]["error"]
    assert "unsupported" in sm["health"]
    assert all("unsupported" in b for b in sm["bad_input"].values())
    assert "gone" in data["summary"]["_unreachable"]
    md = out.with_suffix(".md").read_text()
    assert "| figure | seq | conc | conc-post | oai | sm | gone |" in md and "unsupported" in md


def test_ratios_are_against_the_first_target(result):
    _, _, data = result
    table = data["medians"]["side_by_side"]
    label = "1. one sentence: first audio ms (median)"
    base = data["summary"]["seq"]["one_sentence"]["first_audio_ms"]["median"]
    assert table[label]["seq"]["ratio"] == 1.0
    for name in ("conc", "oai"):
        value = data["summary"][name]["one_sentence"]["first_audio_ms"]["median"]
        assert table[label][name] == {"value": value, "ratio": round(value / base, 2)}
    assert table[label]["sm"] == {"value": "unsupported", "ratio": None}
    assert ratio(3.0, 2.0) == 1.5 and ratio("unsupported", 2.0) is None and ratio(1.0, 0) is None
