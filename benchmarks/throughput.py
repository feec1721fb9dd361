"""Throughput (``python -m benchmarks throughput``): audio-hours synthesised per hour of wall time at
concurrency 1–8, each server mode and runtime against the raw runtime (``Kokoro.create()`` on N
threads), each level a closed loop of N clients; then the listeners' sweep (:mod:`benchmarks.listeners`,
``summary.listeners``). Method: docs/benchmarks.md ("Throughput").
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import listeners, prom, results
from .clients import Timing, WsSession
from .live import LiveServer, ServerFailed
from .loop import audio_rate, closed_loop, rotated
from .raw import VOICE, RawRuntime, model_files
from .results import Result, at_least, command_line, markdown_table, medians_by, ratio, rnd
from .texts import THROUGHPUT_TEXTS

TARGET_GAIN = 1.2
RAW = "raw kokoro-onnx"


def _level(call, concurrency: int, duration_s: float, session=None) -> dict:
    """N clients in a closed loop, each request ``await call(s, text)`` on the client's ``session``."""
    async def request(s: Any, i: int, n: int) -> tuple[str, Timing]:
        text = THROUGHPUT_TEXTS[(i + n) % len(THROUGHPUT_TEXTS)]
        return text, await call(s, text)

    loop = asyncio.run(closed_loop(request, concurrency, duration_s=duration_s, session=session))
    done = [(text, t) for text, t in loop.records if not t.error]
    wall = loop.wall_s
    return {
        **audio_rate([t for _, t in done], wall, first=("p50", "max")),
        "requests": len(done),
        "errors": len(loop.records) - len(done) + len(loop.failures),
        "chars_per_s": rnd(sum(len(text) for text, _ in done) / wall if wall > 0 else 0.0, 3),
    }


def _server_level(srv: LiveServer, concurrency: int, duration_s: float) -> dict:
    """N clients, one WebSocket session each; the server's own view of the level beside the figures."""
    async def call(ws: WsSession, text: str) -> Timing:
        (t,) = await ws.synthesize([text], raise_on_error=False)
        if t.error:
            await asyncio.sleep(0.1)
        return t

    before = srv.scrape()
    figures = _level(call, concurrency, duration_s, session=lambda _i: WsSession(srv.ws_url, voice=VOICE))
    return {**figures, "server_view": prom.server_view(before, srv.scrape())}


def _raw_level(raw: RawRuntime | None, concurrency: int, duration_s: float) -> dict:
    """One thread per client calling ``create()`` on the one shared runtime."""
    assert raw is not None
    with ThreadPoolExecutor(concurrency, thread_name_prefix="raw-client") as pool:
        return _level(lambda _s, text: asyncio.get_running_loop().run_in_executor(pool, raw.create, text),
                      concurrency, duration_s)


def torch_available(model_dir=None) -> tuple[bool, str]:
    """Whether the torch runtime can serve here; the reason when not."""
    if importlib.util.find_spec("torch") is None:
        return False, "torch is not installed"
    try:
        files = model_files(model_dir, torch=True)
    except Exception as e:  # a failed rebuild leaves the ONNX configurations to measure: report it
        return False, f"torch checkpoint could not be built: {type(e).__name__}: {str(e)[:200]}"
    if files.torch_checkpoint is None:
        return False, "no torch checkpoint in the model directory"
    return True, ""


def run(*, quick: bool = False, model_dir=None, log=print, backend: str = "onnx") -> Result:
    levels = [1, 4] if quick else [1, 2, 4, 8]
    # a fake runtime answers in milliseconds: half a second a level (about fifty requests) checks the
    # harness as well as twelve
    duration = (0.5 if backend == "fake" else 12.0) if quick else 25.0
    rounds = 1 if quick else 2
    configs: list[tuple[str, str]] = [(backend, "sequential"), (backend, "concurrent")]
    result = Result("throughput", quick, command_line("throughput", quick))
    raw_too = backend != "fake"  # the harness without the model: no raw runtime beside it
    if not quick and backend == "onnx":
        ok, why = torch_available(model_dir)
        if ok:
            configs += [("torch", "sequential"), ("torch", "concurrent")]
        else:
            result.notes.append(f"torch runtime skipped: {why}")
            log(f"  torch skipped: {why}")
    else:
        result.notes.append("torch runtime not run (quick run; the full run includes it when available)")
    result.config = {
        "concurrency_levels": levels, "duration_per_level_s": duration, "rounds": rounds, "voice": VOICE,
        "texts": list(THROUGHPUT_TEXTS), "configs": [*([RAW] if raw_too else []), *(f"{b}/{m}" for b, m in configs)],
        "client": "one WebSocket session per client, one request at a time",
        "raw_client": "one thread per client calling Kokoro.create() on one shared instance",
        "order": "every server is up (idle) at once; each round runs every level through every config in "
                 "turn, the config order rotating by round, so load drift on shared cores hits all alike",
    }
    log(f"throughput: levels {levels}, {duration:.0f} s each, {rounds} round(s), configs {result.config['configs']}")

    raw = RawRuntime(model_dir) if raw_too else None
    with contextlib.ExitStack() as stack:
        servers: dict[str, LiveServer | None] = {RAW: None} if raw_too else {}
        for runtime, mode in configs:
            try:
                servers[f"{runtime}/{mode}"] = stack.enter_context(
                    LiveServer(backend=runtime, mode=mode, model_dir=model_dir, log=log))
            except ServerFailed as e:
                result.notes.append(f"{runtime}/{mode} did not start: {str(e)[:300]}")
                log(f"  {runtime}/{mode} did not start")
        for rnd_i in range(rounds):
            for c in levels:
                for name in rotated(list(servers), rnd_i + levels.index(c)):
                    srv, load = servers[name], results.load_average()
                    figures = _raw_level(raw, c, duration) if srv is None else _server_level(srv, c, duration)
                    sample = {"config": name, "concurrency": c, "round": rnd_i + 1, "load_before": load, **figures}
                    if srv is not None:
                        result.server_view[f"{name} c={c} round {rnd_i + 1}"] = sample["server_view"]
                    result.samples.append(sample)
                    log(f"  round {rnd_i + 1} {name:<18} c={c}: {sample['audio_hours_per_hour']:.3f} audio-h/h, "
                        f"{sample['chars_per_s']:.1f} chars/s ({sample['requests']} requests, {sample['errors']} errors, "
                        f"load {load[0] if load else '?'})")
    result.summary["peak_rss_mib"] = {name: srv.peak_rss_mib for name, srv in servers.items() if srv is not None}
    log("throughput: many listeners (deadlines on/off, sequential/concurrent)")
    result.summary["listeners"] = listeners.sweep(quick=quick, model_dir=model_dir, log=log, late=False, backend=backend,
                                                  rounds=1)
    summarize(result)
    return result


def _gain_at_4(table: dict[str, dict[str, float]]) -> tuple[str | None, float | None, float | None, float | None]:
    at4 = {name: row["4"] for name, row in table.items() if name != RAW and row.get("4") is not None}
    best = max(at4, key=lambda name: at4[name], default=None)
    raw4 = table.get(RAW, {}).get("4")
    return best, at4.get(best or ""), raw4, ratio(at4.get(best or ""), raw4)


def summarize(result: Result) -> None:
    digits = {"audio_hours_per_hour": 4, "chars_per_s": 3}
    by_config = {config: medians_by([s for s in result.samples if s["config"] == config], "concurrency", digits)
                 for config in dict.fromkeys(s["config"] for s in result.samples)}
    result.medians = {figure: {config: {str(c): v[figure] for c, v in by_level.items()}
                               for config, by_level in by_config.items()} for figure in digits}
    best_name, best4, raw4, gain = _gain_at_4(result.medians["audio_hours_per_hour"])
    work_name, _, _, work_gain = _gain_at_4(result.medians["chars_per_s"])
    result.summary.update({
        "best_at_4": best_name, "best_at_4_audio_hours_per_hour": best4, "raw_at_4": raw4, "gain_at_4": gain,
        "best_at_4_equal_work": work_name, "gain_at_4_equal_work": work_gain,
    })
    result.target("best mode vs raw runtime at concurrency 4, audio-hours per hour", f">= {TARGET_GAIN}x", gain,
                  at_least(gain, TARGET_GAIN))
    result.target("the same at equal work (text characters per second; kokoro-onnx trims silence, so it returns "
                  "less audio for the same text)", f">= {TARGET_GAIN}x", work_gain, at_least(work_gain, TARGET_GAIN))


def body(data: dict[str, Any]) -> str:
    levels = data["config"]["concurrency_levels"]
    rss = data["summary"].get("peak_rss_mib", {})
    rows = [[name, *(row.get(str(c)) for c in levels), rss.get(name)]
            for name, row in data["medians"]["audio_hours_per_hour"].items()]
    table = markdown_table(["config", *(f"c={c}" for c in levels), "peak RSS MiB"], rows)
    s = data["summary"]
    head = (
        f"Audio-hours per hour of wall time ({data['config']['duration_per_level_s']:.0f} s per level, median of "
        f"{data['config'].get('rounds', 1)} round(s)). At concurrency 4 the "
        f"best server mode ({s.get('best_at_4')}) gives {s.get('best_at_4_audio_hours_per_hour')} vs the raw runtime's "
        f"{s.get('raw_at_4')} ({s.get('gain_at_4')}x; at equal work, text characters per second, "
        f"{s.get('gain_at_4_equal_work')}x)."
    )
    detail = markdown_table(
        ["config", "c", "round", "requests", "errors", "chars/s", "first audio p50 ms", "server RTF mean", "batch size mean", "load 1m"],
        [[x["config"], x["concurrency"], x.get("round", 1), x["requests"], x["errors"], x.get("chars_per_s"),
          x["first_audio_ms_p50"], *((x.get("server_view") or {}).get(figure, {}).get("mean")
                                     for figure in ("realtime_factor", "batch_size")),
          (x.get("load_before") or [None])[0]] for x in data["samples"]],
    )
    out = f"{head}\n\n{table}\n\n{detail}"
    if data["summary"].get("listeners"):
        out += ("\n\nListeners sending the paragraph at once, playing it in real time (deadlines on vs off):\n\n"
                + listeners.table(data["summary"]["listeners"]))
    return out


def plot(data: dict[str, Any], path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    levels = data["config"]["concurrency_levels"]
    for name, row in data["medians"]["audio_hours_per_hour"].items():
        xs = [c for c in levels if row.get(str(c)) is not None]
        ax.plot(xs, [row[str(c)] for c in xs], marker="o", label=name, linestyle="--" if name == RAW else "-")
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("audio-hours per hour")
    ax.set_title(f"Throughput ({data['command']})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    results.save_plot(fig, path)
