"""Which segment runs next: the deadline queue and the playback clock, in virtual time.

A tiny simulator stands for one worker (the sequential mode, or the concurrent mode's single
calls): a fake runtime whose segment costs are known, listeners that each offer their next
segment when the previous one is ready (as both modes do), and a clock that only moves when a
segment is synthesised. Pure logic: nothing sleeps, so the orders asserted here are exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from backends.api import Interrupt
from backends.config import BackendConfig
from backends.engine.policy import SchedulingPolicy
from backends.engine.schedule import Listeners, Playout, Preemption, RunningCall, SegmentQueue
from tests.support.observer import Recorder


def make_queue(order: str = "deadline", window_s: float = 0.0, clock=None) -> SegmentQueue:
    """The queue of a policy with ``order`` (``deadline``: deadlines on; else that plain order),
    ``window_s`` as its due-together window, and ``clock`` as "now" (none: never overloaded)."""
    config = BackendConfig.defaults(deadlines=order == "deadline", due_together_ms=window_s * 1000)
    policy = SchedulingPolicy(config, plain_order="fifo" if order == "deadline" else order, sample_rate=24000,
                              observer=Recorder(), clock=clock or (lambda: float("-inf")))
    return policy.new_queue()


@dataclass
class Listener:
    name: str
    arrives: float
    #: (synthesis seconds, audio seconds) of each segment, in text order
    segments: list[tuple[float, float]]
    session: str = ""
    playout: Playout = field(init=False)
    next: int = 0

    def __post_init__(self):
        self.session = self.session or self.name
        self.playout = Playout(self.arrives, margin_s=0.1)


def simulate(
    listeners: list[Listener], order: str, starts: list[float] | None = None, *, clock: bool = True
) -> list[tuple[str, int]]:
    """Run every segment on one worker, picking from the queue; the (listener, index) run order
    (and, into ``starts``, when each began). ``clock``: the queue knows the time, as the modes'
    queues do (its overload rule); without, earliest due first throughout."""
    now = 0.0
    queue = make_queue(order, clock=(lambda: now) if clock else None)
    pending = sorted(listeners, key=lambda x: x.arrives)
    ran, seq = [], {x.name: i for i, x in enumerate(listeners)}

    def offer(x: Listener) -> None:
        queue.push(x, session=x.session, request_seq=seq[x.name], due=x.playout.due,
                   playing=x.playout.runs_out is not None)

    while pending or len(queue):
        while pending and pending[0].arrives <= now:
            offer(pending.pop(0))
        entry = queue.pop()
        if entry is None:  # idle until the next arrival
            now = pending[0].arrives
            continue
        x: Listener = entry.item
        cost, audio = x.segments[x.next]
        if starts is not None:
            starts.append(now)
        now += cost
        x.playout.delivered(now, audio)
        ran.append((x.name, x.next))
        x.next += 1
        if x.next < len(x.segments):
            offer(x)
    return ran


def streaming(name: str, arrives: float = 0.0, n: int = 6) -> Listener:
    """A long text: a short first segment (4 s of audio), then long ones with 6 s each."""
    return Listener(name, arrives, [(0.3, 4.0)] + [(1.0, 6.0)] * (n - 1))


def test_a_newcomers_first_segment_goes_ahead_of_later_segments_with_slack():
    a, b, c = streaming("a"), streaming("b"), streaming("c")
    late = Listener("late", 2.5, [(0.3, 2.0), (0.6, 3.0)])
    starts: list[float] = []
    order = simulate([a, b, c, late], "deadline", starts)
    # the newcomer arrives while the three stream; its first segment runs next, not after their backlog
    first_after_arrival = next(i for i, t in enumerate(starts) if t >= late.arrives)
    assert order[first_after_arrival] == ("late", 0)
    assert late.playout.first_ready is not None and late.playout.first_ready - late.arrives <= 1.0
    assert late.playout.underrun_s == 0 and all(x.playout.underrun_s == 0 for x in (a, b, c))


def test_without_deadlines_the_newcomer_waits_behind_the_backlog():
    a, b, c = streaming("a"), streaming("b"), streaming("c")
    late = Listener("late", 2.5, [(0.3, 1.5), (0.6, 3.0)])
    simulate([a, b, c, late], "round_robin")
    on = [streaming("a"), streaming("b"), streaming("c"), Listener("late", 2.5, [(0.3, 1.5), (0.6, 3.0)])]
    simulate(on, "deadline")
    waited_off = late.playout.first_ready - late.arrives
    waited_on = on[3].playout.first_ready - on[3].arrives
    assert waited_on < waited_off


def test_first_segments_of_listeners_arriving_together_come_before_anyones_second():
    listeners = [streaming(f"l{i}") for i in range(4)]
    order = simulate(listeners, "deadline")
    assert order[:4] == [("l0", 0), ("l1", 0), ("l2", 0), ("l3", 0)]


def paragraph(name: str) -> Listener:
    """The benchmark paragraph's shape: a short first segment, then four long ones (~3x real time)."""
    return Listener(name, 0.0, [(0.4, 0.8)] + [(1.0, 3.0)] * 4)


def test_overloaded_streams_go_in_arrival_order_and_less_silence_is_heard():
    """Eight listeners at once, each needing ~4.4 s of the runtime for 12.8 s of audio: more than
    one worker gives. Earliest-due-first serves the most overdue stream in turn and every
    listener hears gaps; in arrival order the oldest streams play on and the gaps are fewer."""
    edf = [paragraph(f"l{i}") for i in range(8)]
    simulate(edf, "deadline", clock=False)
    fair = [paragraph(f"l{i}") for i in range(8)]
    order = simulate(fair, "deadline")
    assert order[:8] == [(f"l{i}", 0) for i in range(8)]  # first audio for everyone first, as before
    assert [x.playout.first_ready for x in fair] == [x.playout.first_ready for x in edf]
    total = sum(x.playout.underrun_s for x in fair)
    assert total < 0.8 * sum(x.playout.underrun_s for x in edf)
    assert fair[0].playout.underrun_s < fair[-1].playout.underrun_s  # the oldest stream waits least
    assert order[8:13] == [("l0", i) for i in (1, 2, 3, 4)] + [("l1", 1)]


def test_equal_deadlines_take_turns_by_session():
    q = make_queue("deadline")
    for session, rid in [("s1", 0), ("s1", 1), ("s1", 2), ("s2", 3), ("s3", 4)]:
        q.push(f"{session}-r{rid}", session=session, request_seq=rid, due=5.0)
    taken = [q.pop().item for _ in range(5)]
    # round-robin over sessions, each session's oldest request first
    assert taken == ["s1-r0", "s2-r3", "s3-r4", "s1-r1", "s1-r2"]


def test_round_robin_order_is_the_concurrent_modes_plain_order():
    q = make_queue("round_robin")
    q.push("a0", session="a", request_seq=0, due=9.0)
    q.push("b0", session="b", request_seq=1, due=1.0)  # deadlines ignored
    q.push("a1", session="a", request_seq=2, due=0.0)
    assert [q.pop().item for _ in range(3)] == ["a0", "b0", "a1"]


def test_fifo_order_is_the_sequential_modes_plain_order():
    q = make_queue("fifo")
    for i, due in enumerate([3.0, 1.0, 2.0]):
        q.push(i, session=f"s{i % 2}", request_seq=i, due=due)
    assert [q.pop().item for _ in range(3)] == [0, 1, 2]
    assert q.pop() is None


def test_no_starvation_a_waiting_segment_is_reached_before_anything_due_later():
    """A later segment with slack is passed over while newcomers keep arriving, but as its
    deadline passes it gives way to at most two newcomers' first segments, then runs."""
    long = Listener("long", 0.0, [(0.2, 2.0), (0.2, 2.0)])
    # a stream of short requests, one every 0.25 s, each costing 0.25 s: the worker never idles
    others = [Listener(f"n{i}", 0.25 * i + 0.01, [(0.25, 1.0)]) for i in range(40)]
    order = simulate([long, *others], "deadline")
    second = order.index(("long", 1))
    assert second < len(order) - 1, "the long request's second segment waited for the flood to end"
    # its first 2 s of audio were ready at 0.2, so it was due at 2.2 - 0.1 (margin): ahead of it ran
    # requests that arrived before then and, the server being overloaded, at most
    # KOKORO_OVERLOAD_YIELDS (2) newcomers that arrived after
    ahead = {name for name, _ in order[:second] if name != "long"}
    assert ahead and sum(x.arrives > 2.1 for x in others if x.name in ahead) == 2


def test_a_batch_spreads_over_sessions_and_skips_what_does_not_fit():
    q = make_queue("deadline")
    q.push(("a", 10), session="a", request_seq=0, due=1.0)
    q.push(("a", 12), session="a", request_seq=1, due=1.5)
    q.push(("b", 100), session="b", request_seq=2, due=2.0)
    q.push(("c", 11), session="c", request_seq=3, due=3.0)

    def fits(taken, entry):
        lengths = [e.item[1] for e in taken] + [entry.item[1]]
        return max(lengths) <= 2 * min(lengths)

    assert [e.item for e in q.take(3, fits)] == [("a", 10), ("c", 11), ("a", 12)]
    assert [e.item for e in q] == [("b", 100)]  # passed over, keeps its place


def test_remove_drops_a_cancelled_requests_entries():
    q = make_queue("deadline")
    q.push("x", session="s", request_seq=0, due=0.0)
    q.push("y", session="t", request_seq=1, due=1.0)
    assert q.remove(lambda item: item == "x") == 1
    assert len(q) == 1 and q.pop().item == "y"


@pytest.mark.parametrize(
    ("ready", "late"),
    [([0.5, 1.0, 2.0], [0.0, 0.0]), ([0.5, 2.0, 3.0], [0.5, 0.0]), ([0.5, 2.0, 5.0], [0.5, 2.0])],
)
def test_playout_counts_the_silence_a_real_time_listener_hears(ready, late):
    """Each segment is 1 s of audio; playback shifts by every gap, as a real player's does."""
    p = Playout(arrived=0.0, margin_s=0.25)
    assert p.due == 0.0  # the first segment is due at once
    assert p.delivered(ready[0], 1.0) == 0.0
    assert p.due == pytest.approx(ready[0] + 1.0 - 0.25)  # before the first second of audio runs out
    got = [p.delivered(t, 1.0) for t in ready[1:]]
    assert got == pytest.approx(late)
    assert p.underrun_s == pytest.approx(sum(late))


def test_segments_due_together_go_shortest_first():
    """Four listeners arrive within a moment: the short first segments are heard before the long one."""
    q = make_queue("deadline", window_s=0.5)
    q.push("long", session="a", request_seq=0, due=0.00, phonemes=60)
    for i, name in enumerate(["b", "c", "d"], 1):
        q.push(name, session=name, request_seq=i, due=0.01 * i, phonemes=15)
    q.push("later", session="e", request_seq=4, due=0.9, phonemes=5)  # not due together: waits its turn
    assert [q.pop().item for _ in range(5)] == ["b", "c", "d", "long", "later"]
    plain = make_queue("deadline")  # no window: earliest due first
    for i, cost in enumerate([60, 15]):
        plain.push(i, session=str(i), request_seq=i, due=0.01 * i, phonemes=cost)
    assert plain.pop().item == 0


def test_shortest_first_never_starves_a_long_segment():
    """A flood of short newcomers, one every 0.25 s: the long overdue segment runs once the
    newcomers' due times pass its own by more than the window."""
    q = make_queue("deadline", window_s=0.5)
    q.push("long", session="long", request_seq=0, due=0.0, phonemes=300)
    ran, now = [], 0.0
    for i in range(20):
        q.push(f"n{i}", session=f"n{i}", request_seq=i + 1, due=now, phonemes=10)
        ran.append(q.pop().item)
        now += 0.25
    assert "long" in ran and ran.index("long") <= 3


def test_listeners_know_who_hears_something():
    ls = Listeners()
    assert not ls.hears_something("a", now=0.0) and not ls.others_served("a")
    with ls.serving("a"):
        assert ls.hears_something("a", now=0.0)  # a request in progress
        assert ls.others_served("b") and not ls.others_served("a")
        ls.played("a", runs_out=5.0)
    assert ls.hears_something("a", now=4.9)  # its audio still plays
    assert not ls.hears_something("a", now=5.0)  # ran out: forgotten
    assert not ls.hears_something("a", now=1.0)


def test_a_listener_whose_audio_ran_out_mid_request_is_forgotten_when_the_request_ends():
    ls = Listeners()
    with ls.serving("a"):
        ls.played("a", runs_out=1.0)
        ls.played("a", runs_out=2.0)  # more audio delivered: the first time no longer counts
        assert ls.hears_something("a", now=1.5) and ls.sizes(1.5)["listeners_playing"] == 1
        assert ls.hears_something("a", now=3.0)  # ran out, but its request is still in progress
    assert not ls.hears_something("a", now=3.0)
    assert not any(ls.sizes(3.0).values())  # nothing of it kept


def test_many_listeners_are_forgotten_as_their_audio_runs_out():
    ls = Listeners()
    for i in range(1000):
        with ls.serving(f"s{i}"):
            ls.played(f"s{i}", runs_out=float(i))
    assert ls.sizes(499.5)["listeners_playing"] == 500 and ls.hears_something("s999", now=999.0 - 0.5)
    assert not any(ls.sizes(1000.0).values())


def _later_call(queue: SegmentQueue, name: str, *, due: float, started: float, expected_s: float) -> RunningCall:
    """A running call of a later segment: its listener already hears its first one."""
    playout = Playout(arrived=0.0)
    playout.delivered(0.0, due)
    taken = queue.push(name, session=name, request_seq=0, due=due, phonemes=30)
    queue.remove(lambda item: item == name)
    return RunningCall(taken, playout, started, expected_s, Interrupt())


def test_a_silent_listeners_segment_interrupts_the_later_call_with_most_left():
    q, pre, now = make_queue("deadline", window_s=0.5), Preemption(), 10.0
    early = _later_call(q, "a", due=12.0, started=9.9, expected_s=1.0)  # 0.9 s left
    late = _later_call(q, "b", due=13.0, started=9.95, expected_s=2.0)  # 1.95 s left
    for call in (early, late):
        pre.started(call)
    newcomer = Playout(arrived=now)
    entry = q.push("new", session="new", request_seq=1, due=now, phonemes=10)
    assert pre.victim(q, entry, newcomer, now) is late
    late.playout.interrupted = True  # a segment is interrupted at most once
    assert pre.victim(q, entry, newcomer, now) is early
    pre.ended(early)
    assert pre.victim(q, entry, newcomer, now) is None


@pytest.mark.parametrize(
    ("why", "started", "heard_before", "victim_due"),
    [
        ("the running call is past half its expected time", 9.4, False, 12.0),
        ("the newcomer's listener hears audio already", 9.9, True, 12.0),
        ("the running segment is due well before the newcomer's", 9.9, False, 8.0),
    ],
)
def test_no_interruption_when_it_costs_more_than_it_gains(why, started, heard_before, victim_due):
    q, pre, now = make_queue("deadline", window_s=0.5), Preemption(), 10.0
    pre.started(_later_call(q, "a", due=victim_due, started=started, expected_s=1.0))
    entry = q.push("new", session="new", request_seq=1, due=now, phonemes=10)
    assert pre.victim(q, entry, Playout(arrived=now, heard_before=heard_before), now) is None, why


def test_a_running_first_segment_is_never_interrupted():
    q, pre, now = make_queue("deadline", window_s=0.5), Preemption(), 10.0
    first = q.push("a", session="a", request_seq=0, due=9.9, phonemes=60)
    q.remove(lambda item: item == "a")
    pre.started(RunningCall(first, Playout(arrived=9.9), 9.95, 2.0, Interrupt()))  # its listener hears nothing
    entry = q.push("new", session="new", request_seq=1, due=now, phonemes=10)
    assert pre.victim(q, entry, Playout(arrived=now), now) is None
