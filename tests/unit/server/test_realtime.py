"""The slow-machine warning: the window's judgement (on a clock the test moves), its log line at
most once per window, and ``/ping``'s ``warnings`` on a server whose runtime is slower than real
time; ``process_*`` series on ``/metrics``."""

from __future__ import annotations

import logging

import pytest

from server.realtime_watch import CODE, RealtimeWatch, default_advice
from tests.support.app import fake_synth
from tests.support.inproc import client


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def watching(window_s: float, clock: Clock, **kw) -> RealtimeWatch:
    watch = RealtimeWatch(window_s, clock=clock, **kw)
    watch.arm()
    return watch


def test_nothing_is_judged_before_it_is_armed(clock):
    watch = RealtimeWatch(60, clock=clock)
    watch.segment_done(5.0, 1.0)  # the warm-up: slow by nature
    watch.arm()
    assert watch.warnings() == []


def test_faster_than_real_time_gives_no_warning(clock):
    watch = watching(60, clock)
    for _ in range(20):
        watch.segment_done(0.3, 1.0)
        watch.underrun(0.01)  # a few late milliseconds are not falling behind
        clock.now += 1
    assert watch.warnings() == []


def test_a_realtime_factor_above_one_warns_with_the_figures_and_what_to_do(clock):
    watch = watching(30, clock, advice=default_advice(threads=2, mode="sequential"))
    for _ in range(5):
        watch.segment_done(4.0, 1.0)  # a real-time factor of 4, as on the slow machine
        clock.now += 4
    [warning] = watch.warnings()
    assert warning["code"] == CODE and warning["realtime_factor"] == 4.0
    assert "KOKORO_THREADS" in warning["advice"] and "now 2" in warning["advice"]
    assert "KOKORO_MODE=concurrent" in warning["advice"] and "--device cuda" in warning["advice"]


def test_growing_underruns_warn_even_when_each_segment_is_fast(clock):
    watch = watching(30, clock)
    watch.segment_done(0.2, 1.0)
    watch.underrun(0.4)
    assert watch.warnings() == []
    watch.underrun(0.4)
    [warning] = watch.warnings()
    assert warning["underrun_seconds"] == 0.8 and warning["realtime_factor"] == 0.2


def test_side_by_side_calls_each_slower_than_real_time_are_judged_by_the_gaps(clock):
    watch = watching(30, clock, serial=False)  # the concurrent mode: two calls at a time
    for _ in range(10):
        watch.segment_done(1.5, 1.0)  # each call slower than real time, both together faster
        clock.now += 0.75
    assert watch.warnings() == []
    watch.underrun(0.6)
    [warning] = watch.warnings()
    assert warning["realtime_factor"] == 1.5 and warning["underrun_seconds"] == 0.6


def test_the_warning_clears_once_the_window_has_moved_past(clock):
    watch = watching(30, clock)
    watch.segment_done(3.0, 1.0)
    assert watch.warnings()
    clock.now += 31
    assert watch.warnings() == []
    watch.segment_done(0.1, 1.0)
    assert watch.figures() == (pytest.approx(0.1), 0.0, pytest.approx(1.0))


def test_too_little_audio_is_not_judged_and_zero_turns_it_off(clock):
    watch = watching(30, clock)
    watch.segment_done(0.3, 0.1)  # one tiny segment: not enough to say
    assert watch.warnings() == []
    off = watching(0, clock)
    off.segment_done(9.0, 1.0)
    off.underrun(9.0)
    assert off.warnings() == []


def test_the_log_line_comes_at_most_once_per_window_and_once_when_it_clears(clock, caplog):
    watch = watching(10, clock)
    with caplog.at_level(logging.INFO, logger="kokoro.realtime"):
        for _ in range(30):  # 30 s of slow segments: three windows
            watch.segment_done(2.0, 1.0)
            clock.now += 1
        clock.now += 11
        watch.segment_done(0.1, 1.0)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert "falling behind real time" in warnings[0].getMessage() and "KOKORO_THREADS" in warnings[0].getMessage()
    assert caplog.records[-1].getMessage() == "synthesis keeps up with real time again"


def test_ping_lists_the_warning_and_stays_200_on_a_runtime_slower_than_real_time(caplog):
    # 0.15 s per phoneme of 0.075 s of audio: a real-time factor of about 2
    with caplog.at_level(logging.WARNING, logger="kokoro.realtime"), \
            client(fake_synth(phoneme_s=0.15), realtime_window_s=30, threads=1) as c:
        before = c.get("/ping").json()
        r = c.post("/invocations", json={"text": "Hello there.", "format": "pcm"})
        ping = c.get("/ping")
    assert r.status_code == 200 and "warnings" not in before
    assert ping.status_code == 200
    [warning] = ping.json()["warnings"]
    assert warning["code"] == CODE and warning["realtime_factor"] > 1.5
    assert "now 1" in warning["advice"]  # the threads it runs with
    assert any("falling behind real time" in r.getMessage() for r in caplog.records)


def test_metrics_carry_the_process_series(make_client):
    with make_client() as c:
        text = c.get("/metrics").text
    for series in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                   "process_start_time_seconds"):
        assert f"\n{series} " in text, series
