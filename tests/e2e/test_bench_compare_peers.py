"""``compare`` against stand-ins shaped like the peers that used to trip it: a POST that refuses
``pcm`` (the AWS sample), an empty 200 (a server without the voice's pipeline), a health route that
stalls, and a WebSocket server that drops the socket after an error. Each fault is now measured as
what it is — the target's — and never shows up as a fast server or a failure of this client."""

from __future__ import annotations

import pytest

from benchmarks.compare import measure, parse_args
from benchmarks.compare.report import SHORT_AUDIO_RATIO, body, summarize, target_colours
from benchmarks.compare.rows import Plan
from benchmarks.compare.targets import parse_target
from tests.support.live import ThreadServer
from tests.support.peer_standins import (
    SECONDS_PER_CHAR,
    dropping_socket,
    empty_ok,
    stalling_health,
    wav_only_post,
)

pytestmark = pytest.mark.bench

HEALTH_TIMEOUT_S = 0.5
REQUEST_ROWS = ("one_sentence", "paragraph", "sentences")


@pytest.fixture(scope="module")
def peers():
    aws, empty, stall, drop = wav_only_post(), empty_ok(), stalling_health(), dropping_socket()
    with ThreadServer(aws) as a, ThreadServer(empty, ready_path="/health") as e, \
            ThreadServer(stall, ready_path="/ping?ready=1") as s, ThreadServer(drop) as d:
        yield {"aws": (a, aws), "empty": (e, empty), "stall": (s, stall), "drop": (d, drop)}


@pytest.fixture(scope="module")
def run(peers):
    import asyncio

    specs = [f"aws={peers['aws'][0].url}/invocations#lang=a&speed=1.0",
             f"empty=openai+{peers['empty'][0].url}/v1",
             f"stall={peers['stall'][0].url}/invocations",
             f"drop=ws://127.0.0.1:{peers['drop'][0].port}"]
    targets = [parse_target(spec, default_voice="jm_kumo") for spec in specs]
    plan = Plan(runs=2, levels=(1, 2), per_client=1, over_limit_chars=5200, sweep_rounds=2)
    runner = asyncio.run(measure(targets, plan, api_key=None, timeout_s=30, health_timeout_s=HEALTH_TIMEOUT_S))
    summary = summarize(runner.samples, [t.name for t in targets])
    data = {"config": {"targets": [t.to_dict() for t in targets], "runs": plan.runs, "levels": list(plan.levels),
                       "per_client": plan.per_client},
            "summary": summary, "medians": {}}
    from benchmarks.compare.report import side_by_side

    data["medians"]["side_by_side"] = side_by_side(summary)
    return runner, summary, body(data)


def test_a_post_that_refuses_pcm_is_asked_for_wav_and_measured(run, peers):
    runner, summary, _ = run
    s = summary["aws"]
    for row in REQUEST_ROWS:
        assert s[row]["first_audio_ms"]["median"] > 0, s[row]
    # the header is not audio: one sentence's tone, to the sample
    from benchmarks.texts import SENTENCES

    assert s["one_sentence"]["audio_s"] == pytest.approx(len(SENTENCES[1]) * SECONDS_PER_CHAR, abs=1e-3)
    assert runner.clients["aws"].audio_format == "wav"
    assert s["health"]["route"] == "/ping" and s["health"]["polls"] > 0
    # the per-target fields went with every request, as JSON values
    bodies = peers["aws"][1].state.bodies
    assert bodies and all(b.get("lang") == "a" and b.get("speed") == 1.0 for b in bodies if "text" in b)


def test_an_empty_200_is_a_failure_not_the_fastest_server(run):
    runner, summary, md = run
    s = summary["empty"]
    assert "empty" not in runner.unreachable and "empty" in runner.no_audio
    for row in REQUEST_ROWS:
        assert "error" in s[row] and "without audio" in s[row]["error"], s[row]
    assert s["health"]["route"] == "/health" and s["health"]["polls"] > 0  # rows without audio still run
    fa_row = next(line for line in md.splitlines() if line.startswith("| 1. one sentence: first audio ms (median)"))
    assert "failed" in fa_row


def test_audio_far_shorter_than_the_others_fails_the_row():
    def sample(target, secs):
        return {"target": target, "row": "one_sentence", "first_audio_ms": 5.0, "total_ms": 6.0, "audio_s": secs,
                "pipelined": False}

    samples = [sample("a", 3.0), sample("b", 3.1), sample("c", 3.0 * SHORT_AUDIO_RATIO * 0.9)]
    summary = summarize(samples, ["a", "b", "c"])
    assert "first_audio_ms" in summary["a"]["one_sentence"] and "first_audio_ms" in summary["b"]["one_sentence"]
    assert "far shorter" in summary["c"]["one_sentence"]["error"]


def test_a_stalling_health_route_counts_every_poll_at_its_timeout(run):
    _, summary, md = run
    h = summary["stall"]["health"]
    assert h["polls"] > 0 and h["timeouts"] == h["polls"]
    assert h["median_ms"] == pytest.approx(HEALTH_TIMEOUT_S * 1000) and h["max_ms"] == pytest.approx(500.0)
    assert f"| 5. health during the sweep: polls (n) | {summary['aws']['health']['polls']}" in md
    # synthesis itself was fine
    assert summary["stall"]["one_sentence"]["first_audio_ms"]["median"] > 0


def test_a_dropped_socket_after_an_error_is_the_targets_and_a_new_session_is_tried(run):
    _, summary, md = run
    bad = summary["drop"]["bad_input"]
    for case in ("invalid_json", "unknown_voice"):
        assert bad[case]["next_ok"] and bad[case]["next_on_new_session"], bad[case]
        assert bad[case]["same_session_error"]
    assert "the target broke the session" in md
    # the HTTP targets send the next request on a new connection too
    assert all(b["next_on_new_session"] for b in summary["aws"]["bad_input"].values())


def test_the_sweep_is_repeated_and_interleaved_with_the_load_recorded(run):
    runner, summary, _ = run
    sweep = [s for s in runner.samples if s["row"] == "sweep"]
    assert {s["run"] for s in sweep} == {1, 2}
    first_by_round = [next(s["target"] for s in sweep if s["run"] == r) for r in (1, 2)]
    assert first_by_round[0] != first_by_round[1]  # the order rotates round by round
    assert all("load1" in s for s in runner.samples)
    assert summary["aws"]["sweep"]["2"]["rounds"] == 2 and summary["aws"]["sweep"]["2"]["requests"] == 4


def test_labels_ratios_colours_and_where_results_go(run):
    _, _, md = run
    assert "below 1x is less" in md and "this target / aws" in md
    colours = target_colours(12)
    assert len(set(colours)) == 12
    args = parse_args(["--target", "a=ws://127.0.0.1:1"])
    assert not args.out.is_absolute() and args.out.name == "compare.json"  # the current directory, not the repo
