"""The six rows ``compare`` measures on every target (docs/benchmarks.md describes each), on the
suite's own texts, in interleaved rounds whose first target changes each round.

Every sample is one dict (``target``, ``row``, the figures, ``load1`` — the one-minute load average
then — or ``unsupported``/``error`` with the reason); a target that cannot do a row or cannot be
reached never stops the run. One sentence per target goes first as a warm-up (row ``warmup``, not
summarised), opening the connections a client keeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..clients import Timing, Unsupported
from ..live import rss_mib
from ..loop import closed_loop, rotated
from ..results import load_average, ms
from ..texts import PARAGRAPH, SENTENCES, THROUGHPUT_TEXTS
from .targets import BAD_CASES, over_limit_text

ONE_SENTENCE = SENTENCES[1]
ROWS = ("one_sentence", "paragraph", "sentences", "sweep", "health", "bad_input")
HEALTH_INTERVAL_S = 0.2
#: How long the health route of a target without audio is polled per sweep level.
HEALTH_ALONE_S = 2.0


@dataclass
class Plan:
    runs: int = 5
    levels: tuple[int, ...] = (1, 2, 4, 8)
    per_client: int = 4
    over_limit_chars: int = 5200
    pids: dict[str, int] = field(default_factory=dict)
    sweep_rounds: int = 2


class Runner:
    """Runs the rows over ``clients`` (name -> client), appending samples and printing progress."""

    def __init__(self, clients: dict[str, Any], plan: Plan, log: Callable[[str], None] = print):
        self.clients, self.plan, self.log = clients, plan, log
        self.samples: list[dict[str, Any]] = []
        self.unreachable: dict[str, str] = {}
        #: targets whose warm-up got no audio although their health route answers
        self.no_audio: dict[str, str] = {}

    def _add(self, name: str, row: str, **figures: Any) -> dict[str, Any]:
        sample = {"target": name, "row": row, **figures, "load1": (load_average() or [None])[0]}
        self.samples.append(sample)
        return sample

    async def _guarded(self, name: str, row: str, coro_fn: Callable[[], Any], **tags: Any) -> None:
        """Run one measurement; an unsupported row, a failure or an unreachable target is a sample."""
        figures: dict[str, Any]
        if name in self.unreachable:
            figures = {"error": f"unreachable: {self.unreachable[name]}"}
        elif name in self.no_audio and row not in ("health", "bad_input"):
            figures = {"error": f"no audio at warm-up: {self.no_audio[name]}"}
        else:
            try:
                figures = await coro_fn()
            except Unsupported as exc:
                figures = {"unsupported": str(exc)}
            except Exception as exc:  # unreachable, refused, timed out, a protocol error: reported, never raised
                figures = {"error": f"{type(exc).__name__}: {exc}"}
                if row == "warmup":
                    await self._after_failed_warmup(name, figures["error"])
        sample = self._add(name, row, **tags, **figures)
        self.log(f"  {name:<12} {row:<13} " + " ".join(
            f"{k}={v}" for k, v in sample.items() if k not in ("target", "row") and not isinstance(v, list | dict)))

    async def _after_failed_warmup(self, name: str, why: str) -> None:
        """A target without audio at warm-up: unreachable, unless its health route answers."""
        try:
            path, status, _ = await self.clients[name].health()
        except Exception:  # no health route, or it too fails: the target cannot be measured at all
            self.unreachable[name] = why
            return
        self.no_audio[name] = why
        self.log(f"  {name:<12} health {path} answers {status}: only the rows that need no audio are measured")

    # -- rows 1-3 ---------------------------------------------------------------------------------
    async def _texts(self, client: Any, texts: tuple[str, ...]) -> dict[str, Any]:
        async with client.session() as s:
            timings: list[Timing] = await s.request(texts)
        errors = [t.error for t in timings if t.error]
        if not any(t.audio_bytes for t in timings):
            raise RuntimeError(errors[0] if errors else "answered without audio (an empty body)")
        return {
            "first_audio_ms": ms(timings[0].first_audio_s), "total_ms": ms(timings[-1].complete_s),
            "audio_s": round(sum(t.audio_s for t in timings), 3), "pipelined": client.pipelines and len(texts) > 1,
            "per_text_first_audio_ms": [ms(t.first_audio_s) for t in timings],
            **({"request_errors": errors} if errors else {}),
        }

    async def requests(self) -> None:
        self.log("warm-up: one sentence per target (connections opened, caches filled; not counted)")
        for name, client in self.clients.items():
            await self._guarded(name, "warmup", lambda c=client: self._texts(c, (ONE_SENTENCE,)))
        for run in range(1, self.plan.runs + 1):
            self.log(f"round {run}/{self.plan.runs}: rows 1-3")
            for name, client in rotated(list(self.clients.items()), run - 1):
                for row, texts in (("one_sentence", (ONE_SENTENCE,)), ("paragraph", (PARAGRAPH,)),
                                   ("sentences", SENTENCES)):
                    await self._guarded(name, row, lambda c=client, t=texts: self._texts(c, t), run=run)

    # -- rows 4 and 5 -----------------------------------------------------------------------------
    async def _poll_health(self, name: str, client: Any, level: int, stop: asyncio.Event) -> None:
        polls: list[dict[str, Any]] = []
        why: str | None = None
        while not stop.is_set():
            try:
                path, status, took_ms = await client.health()
            except Unsupported as exc:
                why = str(exc)
                break
            except Exception as exc:  # refused, reset: a failed poll, counted
                polls.append({"error": f"{type(exc).__name__}: {exc}"})
            else:
                polls.append({"route": path, "status": status, "ms": round(took_ms, 2),
                              **({"timed_out": True} if status is None else {})})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), HEALTH_INTERVAL_S)
        self._add(name, "health", concurrency=level, **({"unsupported": why} if why is not None else {"polls": polls}))

    async def _level(self, name: str, client: Any, level: int) -> dict[str, Any]:
        async def request(s: Any, k: int, i: int) -> list[Timing]:
            return await s.request((THROUGHPUT_TEXTS[(k + i) % len(THROUGHPUT_TEXTS)],))

        stop = asyncio.Event()
        poller = asyncio.create_task(self._poll_health(name, client, level, stop))
        try:
            loop = await closed_loop(request, level, per_client=self.plan.per_client, session=lambda _k: client.session())
        finally:
            stop.set()
            await poller
        timings: list[Timing] = [t for ts in loop.records for t in ts]
        failures = [f"{type(r).__name__}: {r}" for r in loop.failures]
        if failures and not timings:
            raise OSError(f"every client failed: {failures[0]}")
        failed = [t.error or "answered without audio" for t in timings if t.error or not t.audio_bytes]
        pid = self.plan.pids.get(name)
        return {
            "first_audio_ms": [ms(t.first_audio_s) for t in timings if t.first_audio_s is not None],
            "audio_s": round(sum(t.audio_s for t in timings), 3), "wall_s": round(loop.wall_s, 3),
            "requests": len(timings), "errors": len(failures) + len(failed),
            "error_messages": failures[:5] + failed[:5],
            **({"rss_mib": rss_mib(pid, peak=True, digits=1)} if pid else {}),
        }

    async def sweep(self) -> None:
        """Every level on every target, round after round; levels and targets interleaved."""
        for rnd in range(1, self.plan.sweep_rounds + 1):
            for level in self.plan.levels:
                self.log(f"sweep round {rnd}/{self.plan.sweep_rounds}: {level} client(s) x {self.plan.per_client} requests")
                for name, client in rotated(list(self.clients.items()), rnd - 1):
                    await self._guarded(name, "sweep", lambda c=client, n=name, lv=level: self._level(n, c, lv),
                                        concurrency=level, run=rnd)
                    if name in self.no_audio:  # no sweep to poll beside: the health route alone, briefly
                        stop = asyncio.Event()
                        asyncio.get_running_loop().call_later(HEALTH_ALONE_S, stop.set)
                        await self._poll_health(name, client, level, stop)

    # -- row 6 ------------------------------------------------------------------------------------
    async def bad_input(self) -> None:
        self.log("bad input")
        texts = {"invalid_json": "", "whitespace_text": "   \n\t  ", "unknown_voice": ONE_SENTENCE,
                 "over_limit": over_limit_text(self.plan.over_limit_chars)}
        for name, client in self.clients.items():
            for case in BAD_CASES:
                await self._guarded(name, "bad_input",
                                    lambda c=client, k=case: c.bad_input(k, texts[k], ONE_SENTENCE), case=case)

    async def run(self) -> list[dict[str, Any]]:
        await self.requests()
        await self.sweep()
        await self.bad_input()
        return self.samples
