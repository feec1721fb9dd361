"""The listeners' sweep: its summary, targets and tables (from samples; nothing is timed here),
and the real-time listener's underrun count against a live fake-runtime server."""

from __future__ import annotations

import asyncio
import json

import pytest

from benchmarks import listeners, results, ttfa
from benchmarks.clients import PlaybackClock
from benchmarks.results import Result, validate
from tests.support.live import ServerProcess


def _samples() -> list[dict]:
    out = []
    for name, firsts, underrun in [
        (listeners.config_name("sequential", True), {1: 900.0, 4: 1500.0}, 0.0),
        (listeners.config_name("sequential", False), {1: 950.0, 4: 6000.0}, 0.4),
        (listeners.config_name("concurrent", True), {1: 850.0, 4: 1400.0}, 0.0),
        (listeners.config_name("concurrent", False), {1: 900.0, 4: 2000.0}, 0.0),
    ]:
        for n, first in firsts.items():
            out.append({"config": name, "kind": "level", "listeners": n, "first_audio_ms_median": first,
                        "first_audio_ms_worst": first * 1.5, "underrun_s": underrun, "audio_s": 20.0 * n,
                        "wall_s": 10.0, "audio_hours_per_hour": 2.0 * n})
        out.append({"config": name, "kind": "late", "late_first_audio_ms": firsts[1] * 1.5,
                    "streams_underrun_s": underrun})
    return out


def test_summary_compares_the_late_listener_with_itself_alone_and_sets_the_goals():
    samples = _samples()
    sweep = {"levels": [1, 4], "samples": samples, "summary": listeners.summarize(samples)}
    on = sweep["summary"][listeners.config_name("sequential", True)]
    assert on["late"]["vs_alone"] == pytest.approx(1.5)
    assert on["levels"]["4"]["first_audio_ms_median"] == 1500.0
    r = Result("ttfa", True, "x")
    listeners.targets(r, sweep)
    met = {t["name"]: t["met"] for t in r.targets}
    assert met["sequential: late listener's first audio vs alone"] is True
    assert met["sequential: 4 listeners' median first audio, deadlines on vs off"] is True  # 1500 / 6000
    assert met["concurrent: 4 listeners' median first audio, deadlines on vs off"] is False  # 1400 / 2000
    assert met["sequential: underrun seconds over the sweep, deadlines on vs off"] is True


def test_each_level_is_the_median_of_its_rounds_so_one_slow_sample_does_not_decide_a_goal():
    rounds = []
    for round_no, (first, rate) in enumerate([(400.0, 4.0), (900.0, 2.0), (420.0, 4.2)], start=1):
        for name in (listeners.config_name("sequential", True), listeners.config_name("concurrent", True)):
            slow = name.endswith("concurrent deadlines on") and round_no == 2  # one outlier, concurrent only
            rounds.append({"config": name, "kind": "level", "round": round_no, "listeners": 1,
                           "first_audio_ms_median": first if slow else 410.0, "first_audio_ms_worst": 500.0,
                           "underrun_s": 1.0 * round_no, "audio_s": 20.0, "wall_s": 10.0,
                           "audio_hours_per_hour": rate if slow else 4.1,
                           **({"errors": 1, "error_codes": ["timeout"]} if slow else {})})
    summary = listeners.summarize(rounds)
    con = summary[listeners.config_name("concurrent", True)]["levels"]["1"]
    assert con["first_audio_ms_median"] == 410.0 and con["audio_hours_per_hour"] == 4.1 and con["rounds"] == 3
    assert con["underrun_s"] == 2.0 and con["listeners"] == 1
    assert con["errors"] == 1 and con["error_codes"] == ["timeout"]  # a failure in any round is kept
    r = Result("ttfa", True, "x")
    listeners.targets(r, {"levels": [1], "samples": rounds, "summary": summary})
    met = {t["name"]: t["met"] for t in r.targets}
    assert met["concurrent vs sequential: one listener's first audio"] is True
    assert met["concurrent vs sequential: audio-h/h at every level (lowest ratio)"] is True


@pytest.mark.subprocess
def test_ttfa_result_with_the_sweep_writes_and_renders(tmp_path):
    r = Result("ttfa", True, results.command_line("ttfa", True), config={"runs_per_mode": 1})
    r.samples = [
        {"mode": "batch", "run": 1, "first_audio_ms": 2000.0, "complete_ms": 2000.0, "audio_s": 18.0},
        {"mode": "fast_first", "run": 1, "first_audio_ms": 250.0, "complete_ms": 2100.0, "audio_s": 18.0},
    ]
    ttfa.summarize(r)
    samples = _samples()
    r.summary["listeners"] = {"levels": [1, 4], "samples": samples, "summary": listeners.summarize(samples)}
    r.config.update(paragraph_chars=267, voice="jm_kumo")
    results.write(r, title="t", body=ttfa.body, plot=ttfa.plot, out_dir=tmp_path, log=lambda _m: None)
    assert validate(json.loads((tmp_path / "ttfa.json").read_text())) == []
    md = (tmp_path / "ttfa.md").read_text()
    assert "| onnx/sequential deadlines off | 4 | 6,000.0 | 9,000.0 | 0.400 | 8.000 |" in md
    assert "| onnx/concurrent deadlines on | 1,275.0 | 1.500 | 0.000 |" in md


@pytest.mark.subprocess
def test_a_real_time_listener_counts_the_gaps_of_a_server_slower_than_playback(tmp_path):
    text = "Go. Go on. Go on now. Go on now please."
    slow = ServerProcess(tmp_path / "server.log", KOKORO_BACKEND="fake", KOKORO_FAKE_SEGMENT_S="0.8").wait_ready()
    try:
        heard = asyncio.run(listeners.listen(slow.ws_url, text))
    finally:
        slow.stop()
    assert heard.first_audio_s is not None and heard.complete_s is not None and heard.audio_s > 0
    assert heard.underrun_s > 0  # each call outlasts the short segment before it


@pytest.mark.subprocess
@pytest.mark.timeout(300)  # every configuration of the sweep, each against its own server
def test_the_quick_sweep_runs_every_configuration_and_the_late_arrival(tmp_path):
    """The whole --quick sweep, on the model-free runtime (the harness, not the figures)."""
    data = listeners.sweep(quick=True, backend="fake", log=lambda _m: None)
    assert data["levels"] == [1, 2]
    names = {listeners.config_name(m, d, "fake") for m, d in listeners.CONFIGS}
    assert set(data["summary"]) == names
    for row in data["summary"].values():
        assert set(row["levels"]) == {"1", "2"}
        assert all(v["first_audio_ms_median"] > 0 and v["audio_s"] > 0 for v in row["levels"].values())
        assert row["late"]["late_first_audio_ms"] > 0 and row["late"]["vs_alone"] is not None
        assert row["late"]["interrupted_calls"] >= 0
    r = Result("throughput", True, "x")
    listeners.targets(r, data)
    assert len(r.targets) == 8  # per mode: late, 4 listeners, underruns; concurrent vs sequential: two
    assert all(t["value"] is not None for t in r.targets if "4 listeners" not in t["name"])  # (quick: no level 4)
    assert "fake/concurrent deadlines off" in listeners.table(data)


def test_the_playback_clock_starts_at_first_audio_and_sums_the_silences_between_chunks():
    clock = PlaybackClock()
    assert clock.heard(1.0, 2.0) == 0.0  # plays 1.0-3.0
    assert clock.heard(2.5, 1.0) == 0.0 and not clock.behind(3.5)  # early: queued, plays 3.0-4.0
    assert clock.behind(4.5)
    assert clock.heard(5.0, 1.0) == pytest.approx(1.0)  # a second of silence, plays 5.0-6.0
    assert clock.underrun_s == pytest.approx(1.0)


@pytest.mark.subprocess
def test_a_listener_the_server_times_out_is_counted_and_the_level_goes_on(tmp_path):
    slow = ServerProcess(tmp_path / "server.log", KOKORO_BACKEND="fake", KOKORO_FAKE_SEGMENT_S="0.3",
                         KOKORO_REQUEST_TIMEOUT_S="2").wait_ready()
    try:
        figures = asyncio.run(listeners.level(slow.ws_url, 2))
    finally:
        slow.stop()
    assert figures["listeners"] == 2 and figures["errors"] == 2 and figures["error_codes"] == ["timeout"]
    assert figures["audio_s"] > 0  # what they heard before the timeout still counts
    sweep = {"levels": [2], "samples": [], "summary": {"onnx/x": {"levels": {"2": figures}}}}
    assert "| onnx/x | 2 |" in listeners.table(sweep) and "| 2 (timeout) |" in listeners.table(sweep)
