"""The suite's one closed loop and one rotation: every client sends its requests back to back, one
client's failure stops only that client, and each round starts one target further along."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from benchmarks.loop import closed_loop, in_rounds, rotated


def test_each_client_sends_its_requests_one_after_another_on_its_own_session():
    opened: list[int] = []

    @contextlib.asynccontextmanager
    async def session(c: int):
        opened.append(c)
        yield f"session {c}"

    async def request(s: str, c: int, r: int) -> tuple[str, int, int]:
        await asyncio.sleep(0)
        return s, c, r

    loop = asyncio.run(closed_loop(request, 3, per_client=2, session=session))
    assert sorted(opened) == [0, 1, 2]
    assert sorted(loop.records) == [(f"session {c}", c, r) for c in range(3) for r in range(2)]
    for c in range(3):  # in order within a client
        assert [r for _s, cc, r in loop.records if cc == c] == [0, 1]
    assert loop.failures == [] and loop.wall_s >= 0


def test_a_failing_client_stops_alone_and_its_failure_is_kept():
    async def request(_s: None, c: int, r: int) -> tuple[int, int]:
        if c == 1 and r == 1:
            raise ConnectionError("dropped")
        return c, r

    loop = asyncio.run(closed_loop(request, 3, per_client=3))
    assert sorted(loop.records) == [(0, 0), (0, 1), (0, 2), (1, 0), (2, 0), (2, 1), (2, 2)]
    assert [str(e) for e in loop.failures] == ["dropped"]


def test_a_loop_bounded_by_time_stops_sending_once_it_has_passed():
    async def request(_s: None, c: int, r: int) -> int:
        await asyncio.sleep(0.01)
        return r

    loop = asyncio.run(closed_loop(request, 2, duration_s=0.0))
    assert loop.records == []  # nothing is sent after the deadline
    with pytest.raises(ValueError):
        asyncio.run(closed_loop(request, 1))


def test_each_round_starts_one_target_further_along():
    targets = ["a", "b", "c"]
    assert [rotated(targets, k) for k in range(4)] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"],
                                                        ["a", "b", "c"]]
    assert rotated([], 3) == []


def test_variants_are_measured_one_at_a_time_round_by_round_the_first_rotating():
    order: list[str] = []

    async def measure(variant: str) -> dict:
        order.append(variant)
        return {"first_audio_ms": 1.0}

    samples = asyncio.run(in_rounds(("a", "b", "c"), 2, measure, key="variant", log=lambda _m: None))
    assert order == ["a", "b", "c", "b", "c", "a"]
    assert [(s["variant"], s["run"]) for s in samples] == [("a", 1), ("b", 1), ("c", 1), ("b", 2), ("c", 2), ("a", 2)]
    assert all(s["first_audio_ms"] == 1.0 and "load_1m" in s for s in samples)
