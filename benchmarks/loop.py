"""The closed loop (:func:`closed_loop`) and the rotation (:func:`rotated`, :func:`in_rounds`) that every
suite runs its targets through.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .results import load_average, median, ms, rnd

T = TypeVar("T")


@dataclass
class Loop:
    """What one closed loop produced: every answered request's record (``request``'s return value,
    in the order they finished), the failures of clients that stopped, and the wall time."""

    records: list[Any] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)
    wall_s: float = 0.0


async def closed_loop(request: Callable[[Any, int, int], Awaitable[Any]], clients: int, *,
                      per_client: int | None = None, duration_s: float | None = None,
                      session: Callable[[int], contextlib.AbstractAsyncContextManager[Any]] | None = None) -> Loop:
    """``clients`` clients at once, each sending its next request as soon as the previous one is answered
    (zero think time): ``await request(s, c, r)`` is client ``c``'s ``r``-th request on its own session
    ``s`` (``None`` without ``session``), for ``per_client`` requests or until ``duration_s`` (at least one
    of them; a request in flight at the deadline is finished and counted, the wall time runs until the
    last one is done). A client that fails stops, its failure kept, and the others go on."""
    if per_client is None and duration_s is None:
        raise ValueError("closed_loop needs per_client or duration_s")
    loop = Loop()
    deadline = None if duration_s is None else time.perf_counter() + duration_s

    async def client(c: int) -> None:
        try:
            async with session(c) if session is not None else contextlib.nullcontext() as s:
                r = 0
                while (per_client is None or r < per_client) and (deadline is None or time.perf_counter() < deadline):
                    loop.records.append(await request(s, c, r))
                    r += 1
        except Exception as exc:  # this client stops; the loop and the other clients go on
            loop.failures.append(exc)

    t0 = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    loop.wall_s = time.perf_counter() - t0
    return loop


def audio_rate(timings: Sequence[Any], wall_s: float, first: tuple[str, str] = ("median", "worst")) -> dict[str, Any]:
    """What a closed loop's answered requests add up to: audio seconds, and per hour of ``wall_s``,
    and their first audio's median and latest (``first_audio_ms_<first>``)."""
    audio = sum(t.audio_s for t in timings)
    firsts = [t.first_audio_s for t in timings if t.first_audio_s is not None]
    middle, worst = (f"first_audio_ms_{name}" for name in first)
    return {middle: ms(median(firsts)), worst: ms(max(firsts, default=None)), "audio_s": rnd(audio, 3),
            "wall_s": rnd(wall_s, 3), "audio_hours_per_hour": rnd(audio / wall_s if wall_s > 0 else 0.0, 4)}


def rotated(items: Sequence[T], k: int) -> list[T]:
    """``items`` in the order of round ``k`` (0-based): starting at ``items[k % len(items)]``, one further
    along each round, so no target always runs first or right after the same other one and load drift
    on shared cores hits all alike."""
    if not items:
        return []
    k %= len(items)
    return [*items[k:], *items[:k]]


async def in_rounds(variants: Sequence[str], runs: int, measure: Callable[[str], Awaitable[dict[str, Any]]], *,
                    key: str = "mode", log: Callable[[str], None] = print, pause_s: float = 0.0) -> list[dict[str, Any]]:
    """``runs`` rounds of ``await measure(variant)`` for each variant, one at a time, the first one
    rotating round by round; each sample is the figures with its variant under ``key``, its round
    (``run``) and the one-minute load average (``load_1m``)."""
    samples = []
    for run in range(1, runs + 1):
        for variant in rotated(variants, run - 1):
            sample = {key: variant, "run": run, **await measure(variant), "load_1m": (load_average() or [None])[0]}
            samples.append(sample)
            log(f"  run {run}/{runs} {variant:<19} " + "  ".join(
                f"{k} {v}" for k, v in sample.items() if k not in (key, "run", "load_1m") and not isinstance(v, list | dict)))
            await asyncio.sleep(pause_s)
    return samples


def paired_calls(calls: dict[str, Callable[[T], Any]], items: Sequence[T], rounds: int,
                 compare: Callable[[T, dict[str, Any]], dict[str, Any]],
                 log: Callable[[dict[str, Any]], None] = lambda _sample: None) -> list[dict[str, Any]]:
    """Each item through every call in turn, ``rounds`` times, who goes first rotating item by item and
    round by round (one call of each on the first item first, off the clock). Per item and round: each
    call's wall and CPU time of this process (``<name>_ms``, ``<name>_cpu_ms``), each one's ratio to the
    first call's (``<name>_ratio``, ``<name>_cpu_ratio``), and ``compare(item, outputs by name)``'s
    figures; ``log`` sees each sample as it is taken."""
    names = list(calls)
    for call in calls.values():
        call(items[0])
    samples = []
    for round_no in range(1, rounds + 1):
        for i, item in enumerate(items):
            order = rotated(names, round_no + i)
            took, cpu, out = {}, {}, {}
            for name in order:
                t0, c0 = time.perf_counter(), time.process_time()
                out[name] = calls[name](item)
                took[name], cpu[name] = time.perf_counter() - t0, time.process_time() - c0
            sample: dict[str, Any] = {"round": round_no, "segment": i, "order": order}
            for name in names:
                sample[f"{name}_ms"], sample[f"{name}_cpu_ms"] = rnd(took[name] * 1000, 2), rnd(cpu[name] * 1000, 2)
            for name in names[1:]:
                sample[f"{name}_ratio"] = rnd(took[name] / took[names[0]], 4)
                sample[f"{name}_cpu_ratio"] = rnd(cpu[name] / cpu[names[0]], 4)
            samples.append({**sample, **compare(item, out)})
            log(samples[-1])
    return samples
