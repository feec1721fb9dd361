"""Many listeners at once (the sweep ``ttfa`` and ``throughput`` both report): N listeners send the
paragraph together, each playing it in real time on its own :class:`~benchmarks.clients.PlaybackClock`,
then a late arrival behind three long streams; playback deadlines on and off, sequential vs concurrent.
Method: docs/benchmarks.md ("Many listeners").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from .clients import BYTES_PER_SECOND, PlaybackClock, RequestFailed, Timing, WsSession
from .live import LiveServer
from .loop import audio_rate, closed_loop, rotated
from .raw import VOICE
from .results import at_least, at_most, markdown_table, median, ms, ratio, rnd
from .texts import PARAGRAPH, THROUGHPUT_TEXTS

CONFIGS = (("sequential", True), ("sequential", False), ("concurrent", True), ("concurrent", False))
LONG_TEXT = " ".join(THROUGHPUT_TEXTS)
LATE_GOAL = 2.0  # the late listener's first audio within this many times its first audio alone
#: Rounds of every level in a full run (each figure the median of them): one sample a level made a goal
#: between two configurations close to each other a coin flip.
ROUNDS = 3


def config_name(mode: str, deadlines: bool, backend: str = "onnx") -> str:
    return f"{backend}/{mode} deadlines {'on' if deadlines else 'off'}"


@dataclass
class Heard(Timing):
    """One request as a listener playing it in real time heard it (seconds from its send), on its
    own :class:`~benchmarks.clients.PlaybackClock`."""

    clock: PlaybackClock = field(default_factory=PlaybackClock)
    sent_at: float = 0.0  # time.perf_counter() at the send

    @property
    def underrun_s(self) -> float:
        return self.clock.underrun_s

    def behind(self) -> bool:
        """Whether this listener hears silence now (its audio ran out, more is due)."""
        return self.complete_s is None and self.clock.behind(time.perf_counter() - self.sent_at)


async def listen(
    url: str, text: str, *, heard: Heard | None = None, started: asyncio.Event | None = None, first_only: bool = False,
    raise_on_error: bool = True,
) -> Heard:
    """Send ``text`` on a fresh session and play it in real time in the head; ``started`` is set at
    first audio; ``first_only`` hangs up there. Cancel it to hang up. A refusal raises
    :class:`RequestFailed`, or with ``raise_on_error=False`` is kept in ``error`` (its code in ``code``)."""
    heard = heard if heard is not None else Heard()

    def on_audio(t: Timing, now: float, pcm: bytes) -> bool:
        heard.clock.heard(now, len(pcm) / BYTES_PER_SECOND)
        vars(heard).update(vars(t))  # the session's timing so far: a listener hung up mid-stream keeps it
        if started is not None:
            started.set()
        return first_only

    async with WsSession(url, voice=VOICE) as ws:
        heard.sent_at = time.perf_counter()
        (t,) = await ws.synthesize([text], raise_on_error=raise_on_error, on_audio=on_audio)
    vars(heard).update(vars(t))
    return heard


async def level(url: str, n: int) -> dict[str, Any]:
    """N listeners send the paragraph at once. A listener the server refuses or times out is
    counted in ``errors`` (with what it heard before); the level, and the sweep, go on."""
    loop = await closed_loop(lambda _s, _c, _r: listen(url, PARAGRAPH, raise_on_error=False), n, per_client=1)
    if loop.failures:
        raise loop.failures[0]
    failed = [h.code or "error" for h in loop.records if h.error]
    return {"listeners": n, **({"errors": len(failed), "error_codes": sorted(set(failed))} if failed else {}),
            **audio_rate(loop.records, loop.wall_s), "underrun_s": rnd(sum(h.underrun_s for h in loop.records), 3)}



async def late_arrival(url: str, streams: int = 3, *, behind_wait_s: float = 0.0, after_s: float = 0.0,
                       raise_on_error: bool = True) -> dict[str, Any]:
    """``streams`` listeners stream long texts; once all hear audio (and, within ``behind_wait_s``,
    one of them is behind: its audio ran out on its own playback clock) one more sends the
    paragraph and hangs up at first audio; the streams go on ``after_s`` more, then hang up."""
    heard = [Heard() for _ in range(streams)]
    playing = [asyncio.Event() for _ in range(streams)]
    tasks = [asyncio.create_task(listen(url, LONG_TEXT, heard=h, started=e)) for h, e in zip(heard, playing, strict=True)]
    try:
        await asyncio.gather(*(e.wait() for e in playing))
        t0 = time.perf_counter()
        # Silence is the absence of an event: the streams' own playback clocks are read.
        while time.perf_counter() - t0 < behind_wait_s and not any(h.behind() for h in heard):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        behind = any(h.behind() or h.underrun_s for h in heard)
        late = await listen(url, PARAGRAPH, first_only=True, raise_on_error=raise_on_error)
        before = sum(h.underrun_s for h in heard)
        await asyncio.sleep(after_s)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, RequestFailed):
                await task
    return {"newcomer": late, "streams_behind": behind, "streams_underrun_s": rnd(sum(h.underrun_s for h in heard), 3),
            "streams_underrun_until_newcomer_s": rnd(before, 3)}


def settle(servers) -> None:
    """Every server idle (the previous sample's hung-up clients leave a runtime call to finish)."""
    for srv in servers:
        srv.wait_idle()


def _interrupted(srv: LiveServer) -> float:
    """Runtime calls the server has interrupted for a listener's first audio so far."""
    return srv.scrape().get(("kokoro_interrupted_calls_total", ()), 0.0)


def sweep(*, quick: bool, model_dir=None, log=print, late: bool = True, backend: str = "onnx",
          levels: list[int] | None = None, configs=CONFIGS, rounds: int | None = None) -> dict[str, Any]:
    """Every configuration through every level ``rounds`` times (and the late arrival); returns
    samples + summary, each level's figures the median of its rounds. ``backend="fake"`` runs the
    same sweep on the model-free runtime (to check the harness); ``levels``/``configs`` narrow it (the
    torch late listener: level 1 and the late arrival only)."""
    levels = levels or ([1, 2] if quick else [1, 2, 4, 8])
    rounds = rounds or (1 if quick else ROUNDS)
    samples: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        servers = {config_name(mode, deadlines, backend): stack.enter_context(LiveServer(
            backend=backend, mode=mode, env={"KOKORO_DEADLINES": str(deadlines).lower()}, model_dir=model_dir, log=log))
            for mode, deadlines in configs}
        names = list(servers)
        for i, (round_no, n) in enumerate((r, n) for r in range(1, rounds + 1) for n in levels):
            for name in rotated(names, i):
                settle(servers.values())
                sample = {"config": name, "kind": "level", "round": round_no, **asyncio.run(level(servers[name].ws_url, n))}
                samples.append(sample)
                log(f"  {name:<32} {n} listener(s): first audio median {sample['first_audio_ms_median']} ms, worst "
                    f"{sample['first_audio_ms_worst']} ms, underrun {sample['underrun_s']} s, "
                    f"{sample['audio_hours_per_hour']} audio-h/h")
        if late:
            for name in names:
                settle(servers.values())
                before = _interrupted(servers[name])
                late = asyncio.run(late_arrival(servers[name].ws_url))
                sample = {"config": name, "kind": "late", "streams_underrun_s": late["streams_underrun_s"],
                          "late_first_audio_ms": ms(late["newcomer"].first_audio_s or 0.0)}
                settle(servers.values())
                sample["interrupted_calls"] = int(_interrupted(servers[name]) - before)
                samples.append(sample)
                log(f"  {name:<32} late arrival: first audio {sample['late_first_audio_ms']} ms")
    return {"levels": levels, "rounds": rounds, "samples": samples, "summary": summarize(samples)}


def _median_of_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One level's figures over its rounds: the median of each number (failed listeners summed)."""
    figures = {k: v for r in rounds for k, v in r.items() if k not in ("config", "kind", "round")}
    for key, value in figures.items():
        values = [r[key] for r in rounds if isinstance(r.get(key), int | float)]
        if key == "errors":
            figures[key] = sum(values)
        elif key == "error_codes":
            figures[key] = sorted({c for r in rounds for c in r.get(key, [])})
        elif isinstance(value, int | float) and key != "listeners" and values:
            figures[key] = rnd(median(values), 4)
    figures["rounds"] = len(rounds)
    return figures


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per configuration: each level's figures (the median of its rounds), the late arrival against
    its first audio alone."""
    by_level: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for s in samples:
        levels = by_level.setdefault(s["config"], {})
        if s["kind"] == "level":
            levels.setdefault(str(s["listeners"]), []).append(s)
    out: dict[str, Any] = {config: {"levels": {n: _median_of_rounds(r) for n, r in levels.items()}}
                           for config, levels in by_level.items()}
    for s in samples:
        if s["kind"] != "level":
            row = out[s["config"]]
            figures = {k: v for k, v in s.items() if k not in ("config", "kind")}
            row["late"] = {**figures, "vs_alone": ratio(s["late_first_audio_ms"], _at(row, "1", "first_audio_ms_median"))}
    return out


def table(sweep_data: dict[str, Any]) -> str:
    """The table of docs/benchmarks.md: one row per configuration and level, then the late arrival."""
    # a column of failed listeners only where some failed (a request over KOKORO_REQUEST_TIMEOUT_S)
    failures = any(v.get("errors") for row in sweep_data["summary"].values() for v in row["levels"].values())
    rows = [[name, int(n), v["first_audio_ms_median"], v["first_audio_ms_worst"], v["underrun_s"],
             v["audio_hours_per_hour"], *([f"{v['errors']} ({', '.join(v['error_codes'])})" if v.get("errors") else 0] if failures else [])]
            for name, row in sweep_data["summary"].items() for n, v in row["levels"].items()]
    levels = markdown_table(
        ["config", "listeners", "first audio median ms", "first audio worst ms", "underrun s", "audio-h/h",
         *(["failed (codes)"] if failures else [])], rows
    )
    late_rows = [
        [name, row["late"]["late_first_audio_ms"], row["late"]["vs_alone"], row["late"]["streams_underrun_s"],
         row["late"].get("interrupted_calls")]
        for name, row in sweep_data["summary"].items() if "late" in row
    ]
    if not late_rows:
        return levels
    late = markdown_table(
        ["config", "late listener first audio ms", f"vs alone (goal <= {LATE_GOAL:g}x)", "streams' underrun s",
         "calls interrupted"], late_rows
    )
    return f"{levels}\n\n{late}"


def _at(row: dict[str, Any], level: str, figure: str) -> Any:
    return (row.get("levels", {}).get(level) or {}).get(figure)


def targets(result, sweep_data: dict[str, Any]) -> None:
    """The goals, each from this one run: the late listener within 2x of alone; with deadlines,
    4 listeners' median first audio at most half of it without; underruns no worse than without;
    concurrent mode never below sequential (deadlines on) in audio-hours per hour at any level (the
    lowest ratio), nor in one listener's first audio."""
    summary = sweep_data["summary"]
    backend = next(iter(summary), "onnx/").split("/")[0]
    for mode in ("sequential", "concurrent"):
        on = summary.get(config_name(mode, True, backend), {})
        off = summary.get(config_name(mode, False, backend), {})
        late = (on.get("late") or {}).get("vs_alone")
        result.target(f"{mode}: late listener's first audio vs alone", f"<= {LATE_GOAL:g}x", late, at_most(late, LATE_GOAL))
        half = ratio(_at(on, "4", "first_audio_ms_median"), _at(off, "4", "first_audio_ms_median"))
        result.target(f"{mode}: 4 listeners' median first audio, deadlines on vs off", "<= 0.5x", half, at_most(half, 0.5))
        under_on, under_off = (sum(v["underrun_s"] or 0 for v in row["levels"].values()) if row else None for row in (on, off))
        result.target(f"{mode}: underrun seconds over the sweep, deadlines on vs off", "no more than off",
                      rnd(under_on, 3), None if under_on is None or under_off is None else under_on <= under_off)
    seq, con = (summary.get(config_name(mode, True, backend), {}) for mode in ("sequential", "concurrent"))
    ratios = [c / s for n in seq.get("levels", {})
              if (s := _at(seq, n, "audio_hours_per_hour")) and (c := _at(con, n, "audio_hours_per_hour"))]
    worst = rnd(min(ratios, default=None), 3)
    result.target("concurrent vs sequential: audio-h/h at every level (lowest ratio)", ">= 1.0x", worst, at_least(worst, 1.0))
    alone = ratio(_at(con, "1", "first_audio_ms_median"), _at(seq, "1", "first_audio_ms_median"))
    result.target("concurrent vs sequential: one listener's first audio", "<= 1.0x", alone, at_most(alone, 1.0))
