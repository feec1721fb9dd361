"""The scheduling policy's rules, in virtual time: the policy's clock is injected and a tiny
simulator stands for one worker (segments of known cost; each request offers its next segment when
the previous one is ready, as both modes do). Nothing sleeps, so the orders asserted are exact."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from backends.api import Segment, SentenceContext, SynthesisRequest
from backends.config import BackendConfig
from backends.engine.cost import CostModel, input_tokens
from backends.engine.policy import SchedulingPolicy
from backends.engine.schedule import Playout
from tests.support.observer import Recorder

#: phonemes per second of runtime in the simulator (cost and work left are counted in phonemes)
RATE = 100


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_policy(clock: Clock, **settings) -> tuple[SchedulingPolicy, Recorder]:
    recorder = Recorder()
    policy = SchedulingPolicy(BackendConfig.defaults(deadline_margin_ms=100, **settings), plain_order="fifo",
                              sample_rate=RATE, observer=recorder, clock=clock)
    return policy, recorder


def segment(seconds: float, index: int = 0) -> Segment:
    return Segment(text="x", phonemes="a" * max(1, round(seconds * RATE) - 2), voice="v", index=index)


@dataclass
class Stream:
    """A request: when it arrives and its segments as (runtime seconds, audio seconds)."""

    name: str
    arrives: float
    segments: list[tuple[float, float]]
    playout: Playout = field(init=False)
    next: int = 0
    done_at: float | None = None


def simulate(policy: SchedulingPolicy, clock: Clock, streams: list[Stream], until: float = 1e9) -> list[tuple[str, int]]:
    """Run every segment on one worker through ``policy``; the (stream, index) run order."""
    queue = policy.new_queue()
    pending = sorted(streams, key=lambda s: s.arrives)
    ran: list[tuple[str, int]] = []
    seq = {s.name: i for i, s in enumerate(streams)}

    def offer(s: Stream) -> None:
        left = sum(c for c, _ in s.segments[s.next:]) * RATE
        policy.offer(queue, s, segment(s.segments[s.next][0], s.next), s.playout, session=s.name,
                     request_seq=seq[s.name], remaining=left, busy=True, interrupts=False)

    while (pending or len(queue)) and clock.now < until:
        while pending and pending[0].arrives <= clock.now:
            s = pending.pop(0)
            s.playout = policy.playout(SynthesisRequest(text="x", session=s.name, created=s.arrives))
            offer(s)
        entry = queue.pop()
        if entry is None:
            clock.now = pending[0].arrives
            continue
        s = entry.item
        cost, audio = s.segments[s.next]
        clock.now += cost
        s.playout.delivered(clock.now, audio)
        ran.append((s.name, s.next))
        s.next += 1
        if s.next < len(s.segments):
            offer(s)
        else:
            s.done_at = clock.now
    return ran


def test_a_sentence_is_not_kept_behind_streams_that_are_behind():
    """Two long streams ask for twice what the worker makes (their clients may not even read: the
    server cannot tell while buffers take the audio); a one-sentence request 20 s later completes
    within its time alone plus one of their segments."""
    clock = Clock()
    policy, _ = make_policy(clock)
    a, b = (Stream(n, 0.0, [(0.3, 1.0)] + [(1.0, 1.0)] * 200) for n in "ab")
    sentence = [(0.3, 1.5), (0.6, 3.0)]
    late = Stream("late", 20.0, sentence)
    simulate(policy, clock, [a, b, late], until=40.0)
    alone = sum(c for c, _ in sentence)
    assert late.done_at is not None and late.done_at - late.arrives <= alone + 1.0
    assert late.playout.first_ready - late.arrives <= 1.0  # first audio: at most the running segment


def test_overloaded_streams_first_audio_first_then_least_work_left():
    """Listeners arriving together: everyone's first segment first; then, behind, the stream with
    least work left plays on (of equal streams the oldest), and nothing waits forever."""
    clock = Clock()
    policy, recorder = make_policy(clock)
    streams = [Stream(f"l{i}", 0.0, [(0.4, 0.8)] + [(1.0, 3.0)] * 4) for i in range(6)]
    short = Stream("short", 0.0, [(0.4, 0.8), (0.5, 2.0)])
    order = simulate(policy, clock, [*streams, short])
    assert {name for name, i in order[:7]} == {s.name for s in [*streams, short]} and all(i == 0 for _, i in order[:7])
    assert order[7] == ("short", 1)  # least work left
    assert order[8:12] == [("l0", i) for i in (1, 2, 3, 4)]  # then the oldest stream plays on
    assert all(s.done_at is not None for s in streams)
    assert recorder.underruns == []  # (the simulator reports nothing; the modes do)


def test_a_late_stream_gives_way_to_a_bounded_number_of_newcomers():
    clock = Clock()
    policy, _ = make_policy(clock, overload_yields=1)
    stream = Stream("s", 0.0, [(0.2, 0.5), (0.2, 0.5), (0.2, 0.5)])
    flood = [Stream(f"n{i}", 0.25 * i + 0.05, [(0.25, 1.0)]) for i in range(20)]
    order = simulate(policy, clock, [stream, *flood])
    second = order.index(("s", 1))
    due = 0.2 + 0.5 - 0.1
    overtook = [name for name, _ in order[:second] if name != "s" and next(f for f in flood if f.name == name).arrives > due]
    assert len(overtook) <= 1


def request(session: str, created: float = 0.0) -> SynthesisRequest:
    return SynthesisRequest(text="x", session=session, created=created)


def test_under_overload_with_admit_a_newcomer_interrupts_a_call_however_far_it_ran():
    for overload, interrupted in (("admit", True), ("refuse", False)):
        clock = Clock()
        policy, _ = make_policy(clock, overload=overload)
        policy.cost.measured("solo", 1.0, 100)
        queue = policy.new_queue()
        late = Playout(0.0, 0.0)
        late.delivered(0.0, 1.0)
        seg = segment(1.0)
        running = queue.push("s1", session="s", request_seq=0, due=late.due, playing=True)
        queue.pop()
        call = policy.call_started(running, late, seg, "solo", interruptible=True)
        clock.now = 1.8  # past its due, and past half its expected second
        newcomer = Playout(1.8, 0.0)
        policy.offer(queue, "n0", segment(0.3), newcomer, session="n", request_seq=1, remaining=30, busy=True,
                     interrupts=True)
        assert call.interrupt.is_set == interrupted, overload


def test_the_cost_model_keeps_each_call_kind_apart():
    cost = CostModel(smoothing=0.5)
    seg = segment(1.0)
    assert cost.expected_s(seg) == 0.0  # nothing measured yet
    cost.measured("solo", 1.0, input_tokens(seg))
    assert cost.expected_s(seg, "shared") == pytest.approx(1.0)  # the nearest kind measured stands in
    cost.measured("shared", 2.0, input_tokens(seg))
    cost.measured("batch", 3.0, 4 * input_tokens(seg), n=4)
    assert cost.expected_s(seg, "solo") == pytest.approx(1.0)
    assert cost.expected_s(seg, "shared") == pytest.approx(2.0)
    cost.measured("shared", 4.0, input_tokens(seg))
    assert cost.expected_s(seg, "shared") == pytest.approx(3.0)  # smoothed: 2 + 0.5 * (4 - 2)
    assert cost.snapshot()["batch_4"] == pytest.approx(3.0 / (4 * input_tokens(seg)))  # per token, its own


def test_the_cost_model_knows_a_window_of_a_sentence_costs_its_own():
    cost = CostModel(smoothing=0.5)
    plain = segment(1.0)
    window = Segment(plain.text, plain.phonemes, plain.voice,
                     sentence=SentenceContext(plain.phonemes + " " + plain.phonemes, 0, len(plain.phonemes) + 1))
    cost.measured("solo", 1.0, input_tokens(plain))
    assert cost.expected_s(window) == pytest.approx(1.0)  # until a window is measured, a segment's cost
    cost.measured("solo", 1.6, input_tokens(window), windowed=True)  # a window decodes more than its own frames
    assert cost.expected_s(window) == pytest.approx(1.6)
    assert cost.expected_s(plain) == pytest.approx(1.0)  # the plain segment's cost is its own
    assert cost.snapshot()["solo_windowed"] == pytest.approx(1.6 / input_tokens(window))


def test_holding_a_worker_and_solo_calls_read_the_shared_cost():
    clock = Clock()
    policy, _ = make_policy(clock, hold_factor=2.0)
    policy.cost.measured("solo", 0.5, 100)
    policy.cost.measured("shared", 1.0, 100)
    queue = policy.new_queue()
    seg = segment(1.0)  # 100 tokens: 1 s beside another call
    queue.push(seg, session="s", request_seq=0, due=5.0, playing=True)

    def segment_of(entry):
        return entry.item

    # start by 5 - 2 x 1 = 3
    assert policy.hold_s(queue, segment_of, free=1, workers=2) == pytest.approx(3.0)
    assert policy.hold_s(queue, segment_of, free=2, workers=2) == 0.0  # nothing runs: no hold
    assert policy.runs_alone(queue, segment_of, taken=1, free=2, workers=2)  # queued, but with slack
    clock.now = 3.0
    assert not policy.runs_alone(queue, segment_of, taken=1, free=2, workers=2)  # it must start now
    assert not policy.runs_alone(queue, segment_of, taken=1, free=1, workers=2)


def test_a_first_segment_joins_a_batch_led_by_a_later_segment():
    clock = Clock()
    policy, _ = make_policy(clock)
    queue = policy.new_queue()
    late = queue.push("late", session="a", request_seq=0, due=0.0, phonemes=300, playing=True)
    first = queue.push("first", session="b", request_seq=1, due=0.0, phonemes=20, playing=False)
    long_later = queue.push("later", session="c", request_seq=2, due=0.0, phonemes=300, playing=True)

    def tokens(e):
        return int(e.phonemes) + 2

    assert policy.fits([late], first, tokens)  # never left for the next batch behind a later one
    assert not policy.fits([first], long_later, tokens)  # a first segment is not padded to a long one
    assert policy.fits([late], long_later, tokens)


def test_a_call_still_running_for_a_request_that_ended_is_not_a_late_stream():
    """A client hung up (or its request timed out) while its late segment runs: that work is lost,
    not a stream the server is behind on, so a newcomer is not refused for it."""
    clock = Clock()
    policy, _ = make_policy(clock, overload="refuse")
    queue = policy.new_queue()
    gone = Playout(0.0, 0.0)
    gone.delivered(0.0, 1.0)
    with policy.tracked(request("gone"), gone):
        entry = queue.push("g1", session="gone", request_seq=0, due=gone.due, playing=True)
        queue.pop()
        policy.call_started(entry, gone, segment(1.0), "solo", interruptible=False)
        clock.now = 2.0
        assert policy.behind(queue)
    assert not policy.behind(queue)
    policy.admit(policy.session_of(request("new", 2.0)))


def test_the_load_is_reported_as_streams_begin_and_end():
    clock = Clock()
    policy, recorder = make_policy(clock)
    playout = Playout(0.0, 0.0)
    with policy.tracked(request("s"), playout):
        assert recorder.loads[-1] == (0.0, 0.0)  # (averaged over the 10 s window)
        clock.now = 5.0
        policy.segment_ready(playout, [0.0] * RATE * 2, request("s"))  # two seconds of audio made
        assert recorder.loads[-1] == (pytest.approx(0.5), pytest.approx(0.2))  # one stream for 5 s of 10
        reports = len(recorder.loads)
    assert len(recorder.loads) == reports + 1 and playout.ended  # reported as it ends
    assert recorder.overloaded == [False] * len(recorder.loads)


def test_a_sessions_newest_turn_goes_before_what_is_left_of_its_older_turns():
    """Rule 9. A client that barges in opens a new context on the same socket and leaves the old
    one to run out (LiveKit's ElevenLabs plugin): the old reply's next piece, queued earlier, waits
    behind the new reply's segments; another session's order is untouched by it."""
    clock = Clock()
    policy, _ = make_policy(clock)
    queue = policy.new_queue()

    def offer(name: str, session: str, created: float, turn: int) -> None:
        clock.now = created
        playout = policy.playout(SynthesisRequest(text="x", session=session, created=created, turn=turn))
        policy.offer(queue, name, segment(0.5), playout, session=session, request_seq=0, remaining=50,
                     busy=True, interrupts=False, turn=turn)

    offer("old reply, next piece", "s", 0.0, turn=1)
    offer("other session", "t", 1.0, turn=0)
    offer("new reply", "s", 2.0, turn=2)
    clock.now = 2.5
    assert [queue.pop().item for _ in range(3)] == ["other session", "new reply", "old reply, next piece"]


def test_a_new_turn_is_a_listener_who_hears_nothing_though_the_old_turn_still_plays():
    """Rule 9 with rule 2: the old context's audio still plays (its later piece would follow it),
    but the new context's first request is due at once and gets a short first segment."""
    clock = Clock()
    policy, _ = make_policy(clock, short_first_segment="always")
    old = SynthesisRequest(text="x", session="s", created=0.0, turn=1)
    playout = policy.playout(old)
    with policy.tracked(old, playout):
        policy.segment_ready(playout, [0.0] * (RATE * 10), old)  # ten seconds of the old reply delivered
        clock.now = 1.0
        later_piece = SynthesisRequest(text="x", session="s", created=1.0, turn=1)
        new_turn = SynthesisRequest(text="y", session="s", created=1.0, turn=2)
        assert not policy.short_first(later_piece) and policy.short_first(new_turn)
        assert policy.playout(later_piece).heard_before
        assert not policy.playout(new_turn).heard_before
        assert policy.playout(SynthesisRequest(text="z", session="s", created=1.0, turn=2)).heard_before
