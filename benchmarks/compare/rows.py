"""The six rows ``compare`` measures on every target, on the suite's own texts, in interleaved
rounds (target A, B, C, then again) so drift on a shared machine hits all alike:

1. one sentence — first audio and total; 2. the 267-character paragraph sent whole; 3. the same
paragraph sentence by sentence (pipelined on one session where the protocol allows it, else one
request after another); 4. a concurrency sweep (closed-loop clients, each on its own session);
5. the health route's latency, polled while the sweep runs; 6. bad input and whether the next normal
request still works. Server RSS after each sweep level where a ``--pid`` names the target's process.

Every sample is one dict (``target``, ``row``, the figures, or ``unsupported``/``error`` with the
reason); a target that cannot do a row or cannot be reached never stops the run. One sentence per
target goes first as a warm-up (row ``warmup``, not summarised): it opens the HTTP connections a
client keeps, and a target that fails it is reported unreachable and not asked again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..clients import Timing
from ..texts import PARAGRAPH, SENTENCES, THROUGHPUT_TEXTS
from .targets import BAD_CASES, Unsupported, over_limit_text

ONE_SENTENCE = SENTENCES[1]
ROWS = ("one_sentence", "paragraph", "sentences", "sweep", "health", "bad_input")
HEALTH_INTERVAL_S = 0.2


@dataclass
class Plan:
    runs: int = 5
    levels: tuple[int, ...] = (1, 2, 4, 8)
    per_client: int = 4
    over_limit_chars: int = 6000
    pids: dict[str, int] = field(default_factory=dict)


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 1)


def rss_mib(pid: int) -> float | None:
    """Resident memory of ``pid`` and its children (psutil), else of ``pid`` alone (/proc)."""
    try:
        import psutil

        proc = psutil.Process(pid)
        return round((proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True)))
                     / (1 << 20), 1)
    except ImportError:
        pass
    except Exception:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError):
        return None
    return None


class Runner:
    """Runs the rows over ``clients`` (name -> client), appending samples and printing progress."""

    def __init__(self, clients: dict[str, Any], plan: Plan, log: Callable[[str], None] = print):
        self.clients, self.plan, self.log = clients, plan, log
        self.samples: list[dict[str, Any]] = []
        self.unreachable: dict[str, str] = {}

    def _add(self, name: str, row: str, **figures: Any) -> dict[str, Any]:
        sample = {"target": name, "row": row, **figures}
        self.samples.append(sample)
        return sample

    async def _guarded(self, name: str, row: str, coro_fn: Callable[[], Any], **tags: Any) -> None:
        """Run one measurement; an unsupported row, a failure or an unreachable target is a sample."""
        if name in self.unreachable:
            self._add(name, row, error=f"unreachable: {self.unreachable[name]}", **tags)
            return
        try:
            figures = await coro_fn()
        except Unsupported as exc:
            self._add(name, row, unsupported=str(exc), **tags)
            self.log(f"  {name:<12} {row:<13} unsupported: {exc}")
            return
        except Exception as exc:  # unreachable, refused, timed out, a protocol error: reported, never raised
            why = f"{type(exc).__name__}: {exc}"
            if row == "warmup":
                self.unreachable[name] = why
            self._add(name, row, error=why, **tags)
            self.log(f"  {name:<12} {row:<13} FAILED: {why}")
            return
        sample = self._add(name, row, **tags, **figures)
        self.log(f"  {name:<12} {row:<13} " + " ".join(
            f"{k}={v}" for k, v in sample.items() if k not in ("target", "row") and not isinstance(v, list | dict)))

    # -- rows 1-3 ---------------------------------------------------------------------------------
    async def _texts(self, client: Any, texts: tuple[str, ...]) -> dict[str, Any]:
        async with client.session() as s:
            timings: list[Timing] = await s.request(texts)
        errors = [t.error for t in timings if t.error]
        if errors and not any(t.audio_bytes for t in timings):
            raise RuntimeError(errors[0])
        return {
            "first_audio_ms": _ms(timings[0].first_audio_s), "total_ms": _ms(timings[-1].complete_s),
            "audio_s": round(sum(t.audio_s for t in timings), 3), "pipelined": client.pipelines and len(texts) > 1,
            "per_text_first_audio_ms": [_ms(t.first_audio_s) for t in timings],
            **({"request_errors": errors} if errors else {}),
        }

    async def requests(self) -> None:
        self.log("warm-up: one sentence per target (connections opened, caches filled; not counted)")
        for name, client in self.clients.items():
            await self._guarded(name, "warmup", lambda c=client: self._texts(c, (ONE_SENTENCE,)))
        for run in range(1, self.plan.runs + 1):
            self.log(f"round {run}/{self.plan.runs}: rows 1-3")
            for name, client in self.clients.items():
                for row, texts in (("one_sentence", (ONE_SENTENCE,)), ("paragraph", (PARAGRAPH,)),
                                   ("sentences", SENTENCES)):
                    await self._guarded(name, row, lambda c=client, t=texts: self._texts(c, t), run=run)

    # -- rows 4 and 5 -----------------------------------------------------------------------------
    async def _client_loop(self, client: Any, k: int, timings: list[Timing]) -> None:
        async with client.session() as s:
            for i in range(self.plan.per_client):
                timings.extend(await s.request((THROUGHPUT_TEXTS[(k + i) % len(THROUGHPUT_TEXTS)],)))

    async def _poll_health(self, name: str, client: Any, level: int, stop: asyncio.Event) -> None:
        polls: list[dict[str, Any]] = []
        why: str | None = None
        while not stop.is_set():
            try:
                path, status, ms = await client.health()
                polls.append({"route": path, "status": status, "ms": round(ms, 2)})
            except Unsupported as exc:
                why = str(exc)
                break
            except Exception as exc:
                polls.append({"error": f"{type(exc).__name__}: {exc}"})
            with_timeout = asyncio.create_task(stop.wait())
            await asyncio.wait({with_timeout}, timeout=HEALTH_INTERVAL_S)
            with_timeout.cancel()
        if why is not None:
            self._add(name, "health", concurrency=level, unsupported=why)
        else:
            self._add(name, "health", concurrency=level, polls=polls)

    async def _level(self, name: str, client: Any, level: int) -> dict[str, Any]:
        timings: list[Timing] = []
        stop = asyncio.Event()
        poller = asyncio.create_task(self._poll_health(name, client, level, stop))
        t0 = time.perf_counter()
        try:
            results = await asyncio.gather(*(self._client_loop(client, k, timings) for k in range(level)),
                                           return_exceptions=True)
        finally:
            wall = time.perf_counter() - t0
            stop.set()
            await poller
        failures = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
        if failures and not timings:
            raise failures_error(failures)
        pid = self.plan.pids.get(name)
        return {
            "first_audio_ms": [_ms(t.first_audio_s) for t in timings if t.first_audio_s is not None],
            "audio_s": round(sum(t.audio_s for t in timings), 3), "wall_s": round(wall, 3),
            "requests": len(timings), "errors": len(failures) + sum(1 for t in timings if t.error),
            "error_messages": failures[:5] + [t.error for t in timings if t.error][:5],
            **({"rss_mib": rss_mib(pid)} if pid else {}),
        }

    async def sweep(self) -> None:
        for level in self.plan.levels:
            self.log(f"sweep: {level} client(s) x {self.plan.per_client} requests")
            for name, client in self.clients.items():
                await self._guarded(name, "sweep", lambda c=client, n=name, lv=level: self._level(n, c, lv),
                                    concurrency=level)

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


def failures_error(failures: list[str]) -> Exception:
    return OSError(f"every client failed: {failures[0]}")
