"""The load the runtime is under and when it is an overload (``backends/engine/load.py``, the
policy's rule 10), in virtual time: streams are opened on the policy, a call is kept running and
audio is handed in as a mode would, so every figure is exact. Overload is demand above supply over
the window — a stream that is late for a moment while the runtime makes more than is asked is
none — with hysteresis; ``refuse`` also refuses while an admitted newcomer waits too long for the
runtime."""

from __future__ import annotations

import asyncio
import contextlib
import time

import numpy as np
import pytest

from backends.api import Overloaded, Segment, SynthesisRequest
from backends.config import BackendConfig
from backends.engine.load import LOOP_STEPS, LoadMeter, LoopLag
from backends.engine.policy import SchedulingPolicy
from backends.engine.schedule import Playout
from tests.support.observer import Recorder
from tests.support.virtual_time import VirtualClock

RATE = 100  # samples per audio-second (the policy's sample rate here)
STEP = 0.1


def request(session: str, clock: VirtualClock) -> SynthesisRequest:
    return SynthesisRequest(text="x", session=session, created=clock())


def segment() -> Segment:
    return Segment(text="x", phonemes="abc", voice="v")


class Rig:
    """A policy with ``streams`` streams in progress since the clock's start and, with ``busy``,
    a runtime call running throughout; :meth:`run` hands in audio at a steady rate."""

    def __init__(self, streams: int, *, busy: bool = True, **settings):
        self.clock = VirtualClock()
        self.recorder = Recorder()
        self.policy = SchedulingPolicy(BackendConfig.defaults(**settings), plain_order="fifo", sample_rate=RATE,
                                       observer=self.recorder, clock=self.clock)
        self.queue = self.policy.new_queue()
        self.stack = contextlib.ExitStack()
        self.requests = [request(f"s{i}", self.clock) for i in range(streams)]
        self.playouts = [self.policy.playout(r) for r in self.requests]
        for r, p in zip(self.requests, self.playouts, strict=True):
            self.stack.enter_context(self.policy.tracked(r, p))
        if busy:
            entry = self.queue.push("running", session="s0", request_seq=0, playing=True)
            self.queue.pop()
            self.policy.call_started(entry, self.playouts[0], segment(), "batch", interruptible=False)
        self.turn = 0

    def run(self, seconds: float, made_per_s: float) -> None:
        """Advance ``seconds``, the runtime making ``made_per_s`` audio-seconds a second."""
        for _ in range(round(seconds / STEP)):
            self.clock.advance(STEP)
            i = self.turn % len(self.requests)
            self.turn += 1
            audio = np.zeros(round(made_per_s * STEP * RATE), dtype=np.float32)
            self.policy.segment_ready(self.playouts[i], audio, self.requests[i])

    def newcomer(self) -> None:
        self.policy.admit(self.policy.session_of(request(f"new-{self.clock()}", self.clock)))


def overload_logs(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "overloaded" in r.getMessage()]


def test_a_stream_behind_while_the_runtime_makes_more_than_is_asked_is_no_overload(caplog):
    """12 listeners ask for 12 audio-s/s and the runtime makes 25: one stream's queued segment
    past its due is a moment's lateness (the scheduler's rule 4 puts it first), not an overload —
    nothing logged, the gauge says 0, nobody is refused."""
    rig = Rig(12, overload="refuse")
    with caplog.at_level("INFO", logger="kokoro.backend"):
        rig.run(10.0, made_per_s=25.0)
        late = Playout(0.0)
        late.delivered(rig.clock() - 2.0, 1.0)  # its audio ran out a second ago
        rig.queue.push("late", session="s1", request_seq=1, due=late.due, playing=True)
        assert rig.policy.behind(rig.queue)
        assert not rig.policy.report_load()
        rig.newcomer()  # admitted
    assert rig.recorder.loads[-1] == (pytest.approx(12.0), pytest.approx(25.0))
    assert not any(rig.recorder.overloaded)
    assert overload_logs(caplog) == []


def test_demand_above_supply_is_an_overload_logged_measured_and_refused_with_the_same_figures(caplog):
    rig = Rig(12, overload="refuse")
    with caplog.at_level("INFO", logger="kokoro.backend"):
        rig.run(10.0, made_per_s=6.0)
    assert rig.recorder.overloaded[-1] is True
    assert rig.recorder.loads[-1] == (pytest.approx(12.0), pytest.approx(6.0))
    began = rig.recorder.overloaded.index(True)  # once a call had run half the window: at 5 s
    demanded, delivered = rig.recorder.loads[began]
    assert (demanded, delivered) == (pytest.approx(6.0), pytest.approx(3.0))  # (averaged over the 10 s window)
    [said] = overload_logs(caplog)  # the log says what the gauges said then
    assert said.startswith(f"overloaded: the listeners asked for {demanded:.1f} audio-s/s over the last 10 s, "
                           f"the runtime made {delivered:.1f} (calls running 50% of the time; 12 streams now)")
    with pytest.raises(Overloaded) as refused:
        rig.newcomer()
    assert refused.value.code == "overloaded" and refused.value.retryable and "12.0" in str(refused.value)
    rig.policy.admit(rig.policy.session_of(request("s3", rig.clock)))  # a session's next sentence belongs to an admitted stream


def test_overload_with_admit_serves_the_newcomer():
    rig = Rig(12, overload="admit")
    rig.run(10.0, made_per_s=6.0)
    assert rig.policy.report_load()
    rig.newcomer()


def test_overload_has_hysteresis_it_neither_flaps_nor_ends_while_demand_still_exceeds_supply(caplog):
    """Supply hovering just under and over demand changes nothing; an overload ends only once
    what is made covers what is asked, and does not begin again for a shortfall inside the margin."""
    rig = Rig(12)
    with caplog.at_level("INFO", logger="kokoro.backend"):
        for made in (11.5, 12.5, 11.5, 12.5):  # within the margin: never begins
            rig.run(10.0, made)
            assert not rig.policy.report_load()
        rig.run(10.0, 6.0)  # begins
        assert rig.policy.report_load()
        rig.run(10.0, 11.5)  # still short of demand: goes on
        assert rig.policy.report_load()
        rig.run(10.0, 12.5)  # covered: ends
        assert not rig.policy.report_load()
        rig.run(10.0, 11.5)  # short, inside the margin: does not begin again
        assert not rig.policy.report_load()
    said = overload_logs(caplog)
    assert len(said) == 2 and said[0].startswith("overloaded:") and said[1].startswith("no longer overloaded:")
    flips = sum(a != b for a, b in zip(rig.recorder.overloaded, rig.recorder.overloaded[1:], strict=False))
    assert flips == 2


def test_streams_whose_clients_do_not_read_leave_the_runtime_idle_and_are_no_overload():
    rig = Rig(12, busy=False, overload="refuse")
    rig.run(10.0, made_per_s=0.0)
    assert rig.recorder.loads[-1] == (pytest.approx(12.0), 0.0)
    assert not rig.policy.report_load()
    rig.newcomer()


def test_the_first_moments_of_a_stream_before_its_audio_is_made_are_no_overload():
    rig = Rig(1, overload="refuse", overload_first_audio_ms=0)
    rig.clock.advance(1.0)
    assert not rig.policy.report_load()
    rig.newcomer()


class Door:
    """A policy with ``overload=refuse`` at a budget of ``budget_ms`` whose newcomers
    :meth:`arrive` one by one: each asked at admission, then streamed with its first segment queued
    behind a busy runtime (``queue`` pops or takes them as their calls start)."""

    def __init__(self, budget_ms: float):
        self.clock = VirtualClock()
        self.policy = SchedulingPolicy(BackendConfig.defaults(overload="refuse", overload_first_audio_ms=budget_ms),
                                       plain_order="fifo", sample_rate=RATE, observer=Recorder(), clock=self.clock)
        self.queue = self.policy.new_queue()
        self.stack = contextlib.ExitStack()

    def arrive(self, name: str) -> None:
        policy = self.policy
        policy.admit(policy.session_of(request(name, self.clock)))
        r = request(name, self.clock)
        playout = policy.playout(r)
        self.stack.enter_context(policy.tracked(r, playout))
        policy.offer(self.queue, name, segment(), playout, session=name, request_seq=0, remaining=3, busy=True,
                     interrupts=False)


@pytest.mark.parametrize("planned", [False, True])
def test_refuse_turns_newcomers_away_while_an_admitted_one_waits_too_long_for_its_first_call(planned, caplog):
    """Refused before first audio runs late: while a newcomer admitted earlier has waited over
    KOKORO_OVERLOAD_FIRST_AUDIO_MS for the runtime (being planned, or queued), the next is refused;
    once its call starts, newcomers are admitted again."""
    door = Door(150)
    clock, policy, queue = door.clock, door.policy, door.queue
    first = request("first", clock)
    playout = policy.playout(first)
    with caplog.at_level("INFO", logger="kokoro.backend"):
        with policy.tracked(first, None if planned else playout):
            if not planned:
                policy.offer(queue, "first-0", segment(), playout, session="first", request_seq=0, remaining=3,
                             busy=True, interrupts=False)
            clock.advance(0.1)
            policy.admit(policy.session_of(request("second", clock)))  # 100 ms: within the budget
            clock.advance(0.1)
            with pytest.raises(Overloaded, match="would wait 200 ms"):
                policy.admit(policy.session_of(request("third", clock)))
            policy.admit(policy.session_of(request("first", clock)))  # its own session's next request is no newcomer
            with pytest.raises(Overloaded):
                policy.admit(policy.session_of(request("fifth", clock)))
            if not planned:
                queue.pop()  # its first call starts
        policy.admit(policy.session_of(request("fourth", clock)))
        clock.advance(policy.config.load_window_s + 0.1)
        policy.admit(policy.session_of(request("sixth", clock)))
    said = [r.getMessage() for r in caplog.records]
    assert said[0].startswith("refusing newcomers: a newcomer would wait 200 ms for its first audio to start "
                              "(1 waiting")
    assert len(said) == 2 and "again" in said[-1] and "(2 refused" in said[-1]  # one line as it begins, one as it ends
    assert policy.table_sizes()["first_audio_waits"] == 0


def test_refuse_turns_a_burst_away_before_anyone_has_waited_the_budget(caplog):
    """Waiting for the longest wait to pass the budget would let in every arrival until then, to
    queue behind each other: a newcomer is refused once those waiting ahead of it, at the pace
    newcomers were served at, would keep it past the budget."""
    door = Door(150)
    with door.stack:
        for name in ("a", "b", "c"):
            door.arrive(name)
        for _ in range(3):  # the runtime starts a first call every 100 ms while others wait
            door.clock.advance(0.1)
            door.queue.pop()
        door.arrive("d")  # nobody waits: admitted
        door.arrive("e")  # d ahead of it: 100 ms
        door.clock.advance(0.01)
        with pytest.raises(Overloaded, match="would wait 200 ms"):  # d and e ahead, 100 ms each
            door.arrive("f")  # (although d has waited only 10 ms, under the budget)
        door.arrive("c")  # a session already heard is no newcomer
        door.queue.pop()  # d's call starts
        door.arrive("g")


def test_the_pace_counts_the_whole_wait_not_the_gaps_between_first_calls(caplog):
    """Four newcomers wait 200 ms (being planned, the runtime busy), then one batch starts all
    their first calls at once: the gaps between those starts are nil, but each waited 200 ms for
    the three, two, one or none ahead of it, and that is the pace the next ones are judged by —
    with one waiting a newcomer would wait ~180 ms, with two ~360 ms: refused at a 250 ms budget."""
    door = Door(250)
    with door.stack:
        for name in "abcd":
            door.arrive(name)
        door.clock.advance(0.2)
        door.queue.take(4)  # one batch: four first calls start together
        assert door.policy.table_sizes()["first_audio_waits"] == 0
        door.arrive("e")
        door.arrive("f")  # e ahead of it: ~180 ms
        with caplog.at_level("WARNING", logger="kokoro.backend"), pytest.raises(Overloaded, match="would wait 3"):
            door.arrive("g")


def test_a_request_planned_is_not_refused_for_the_wait_as_its_stream_starts():
    """Its planning is spent: as its stream starts (``planned``) a newcomer is no longer refused
    for how long newcomers wait, which the next arrivals are refused for."""
    clock = VirtualClock()
    policy = SchedulingPolicy(BackendConfig.defaults(overload="refuse", overload_first_audio_ms=150),
                              plain_order="fifo", sample_rate=RATE, observer=Recorder(), clock=clock)
    with policy.tracked(request("first", clock)):
        clock.advance(0.2)  # first has waited 200 ms, past the budget
        with pytest.raises(Overloaded, match="would wait 200 ms"):
            policy.admit(policy.session_of(request("second", clock)))
        policy.admit("second", planned=True)


def test_admit_and_a_zero_budget_never_refuse_for_a_wait():
    for settings in ({"overload": "admit"}, {"overload": "refuse", "overload_first_audio_ms": 0}):
        clock = VirtualClock()
        policy = SchedulingPolicy(BackendConfig.defaults(**settings), plain_order="fifo", sample_rate=RATE,
                                  observer=Recorder(), clock=clock)
        with policy.tracked(request("first", clock)):
            clock.advance(5.0)
            policy.admit(policy.session_of(request("second", clock)))


def test_the_load_meter_averages_demand_and_delivery_over_the_window():
    clock = VirtualClock(0.0)
    meter = LoadMeter(window_s=10.0, clock=clock)
    meter.streams = 3
    meter.calls = 1
    for t in range(1, 11):
        clock.now = float(t)
        meter.made(1.6)
    assert meter.demanded == pytest.approx(3.0) and meter.delivered == pytest.approx(1.6)
    assert meter.busy == pytest.approx(1.0)
    meter.streams, meter.calls = 1, 0
    clock.now = 15.0  # 3 streams for 5 s of the window, 1 for the other 5; a call for 5 s
    assert meter.demanded == pytest.approx(2.0) and meter.delivered == pytest.approx(6 * 1.6 / 10)  # made at 5-10 s
    assert meter.busy == pytest.approx(0.5)
    meter.streams = 0
    clock.now = 30.0
    assert (meter.demanded, meter.delivered, meter.busy) == (0.0, 0.0, 0.0)


async def test_the_lag_probe_sees_a_blocked_event_loop_and_forgets_it():
    """The event loop held 300 ms by one callback (what a host-bound overload does to every step of
    a request): the probe wakes that late and says so; a few probes later it no longer does."""
    lag = LoopLag(interval_s=0.005, samples=3)
    loop = asyncio.get_running_loop()
    probe = loop.create_task(lag.probe())
    try:
        await asyncio.sleep(0.02)
        loop.call_soon(time.sleep, 0.3)
        await asyncio.sleep(0.01)
        assert lag.behind >= 0.25
        await asyncio.sleep(0.1)
        assert lag.behind < 0.25
    finally:
        probe.cancel()


def test_refuse_counts_the_event_loops_lateness_into_a_newcomers_wait():
    """Nobody waits for the runtime, but the event loop runs late (the host saturated, as in front
    of a fast GPU): each of a newcomer's LOOP_STEPS steps on the loop waits that long, so past the
    budget it is refused; a session already heard is not; the loop on time again, admitted."""
    clock = VirtualClock()
    policy = SchedulingPolicy(BackendConfig.defaults(overload="refuse", overload_first_audio_ms=200),
                              plain_order="fifo", sample_rate=RATE, observer=Recorder(), clock=clock)
    heard = request("heard", clock)
    playout = policy.playout(heard)
    with policy.tracked(heard, playout):
        policy.segment_ready(playout, np.zeros(RATE, dtype=np.float32), heard)
        policy.loop_lag.note(0.19 / LOOP_STEPS)
        policy.admit(policy.session_of(request("a", clock)))
        policy.loop_lag.note(0.21 / LOOP_STEPS)
        with pytest.raises(Overloaded, match="would wait 210 ms for its first audio"):
            policy.admit(policy.session_of(request("b", clock)))
        policy.admit("b", planned=True)  # as its stream starts: the host work the lateness stood for is spent
        policy.admit("heard")
        for _ in range(5):
            policy.loop_lag.note(0.0)
        policy.admit(policy.session_of(request("c", clock)))
