"""Time to first audio on the 267-character, 4-sentence paragraph (``python -m benchmarks ttfa``):
batch vs the streaming modes against live servers, the raw runtime (kokoro-onnx) beside them in the
same run (``--backend fake`` leaves it out), the modes taking turns run by run; then the many
listeners' sweep (:mod:`benchmarks.listeners`, ``summary.listeners``). The modes and the method are
described in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from . import listeners, prom, results
from .clients import RequestFailed, WsSession, post
from .live import LiveServer
from .loop import in_rounds
from .raw import VOICE, RawRuntime
from .results import Result, at_most, command_line, markdown_table, median, medians_by, ms, ratio, rnd
from .texts import PARAGRAPH, SENTENCES, check_paragraph

SERVER_MODES = ("batch", "streamed", "sentence_first", "fast_first", "fragment_first", "clause_first")
RAW_MODES = ("raw_batch", "raw_stream", "raw_sentence_first")
STREAMING_MODE = "fast_first"
#: Goals: streaming first audio over batch at most this fraction; streaming first audio at most this many ms.
TARGET_RATIO, TARGET_MS = 0.12, 1000.0
#: The servers (each sequential) and their settings; ``streamed``, ``fragment_first`` (the early cut read
#: alone, not as a window of its sentence) and ``clause_first`` run on their own.
SERVERS = {"default": {}, "plain": {"KOKORO_FAST_FIRST_SEGMENT": "false"},
           "alone": {"KOKORO_WINDOWED_FIRST_SEGMENT": "false"}, "clause": {"KOKORO_SHORT_FIRST_SEGMENT": "never"}}
OWN_SERVER = {"streamed": "plain", "fragment_first": "alone", "clause_first": "clause"}


def _figures(first_s: float | None, complete_s: float | None, audio_s: float, connect_s: float | None = None,
             server_ttfa_ms: float | None = None) -> dict:
    return {"first_audio_ms": ms(first_s), "complete_ms": ms(complete_s), "audio_s": rnd(audio_s, 3),
            "connect_ms": ms(connect_s or None, 2), "server_ttfa_ms": server_ttfa_ms}


async def _sample(mode: str, servers: dict[str, LiveServer], raw: RawRuntime | None, http: httpx.AsyncClient) -> dict:
    if mode == "batch":
        t = await post(http, f"{servers['default'].url}/invocations",
                       {"text": PARAGRAPH, "format": "pcm", "stream": False, "voice": VOICE})
        if t.error:
            raise RequestFailed(t.error)
        return _figures(t.complete_s, t.complete_s, t.audio_s)  # the whole audio is a batch client's first
    if mode in RAW_MODES:
        assert raw is not None
        if mode == "raw_stream":
            t = await raw.create_stream(PARAGRAPH)
        elif mode == "raw_batch":
            t = await asyncio.to_thread(raw.create, PARAGRAPH)
        else:
            t = await asyncio.to_thread(raw.create_sentences, SENTENCES)
        return _figures(t.first_audio_s, t.complete_s, t.audio_s)
    srv = servers[OWN_SERVER.get(mode, "default")]
    async with WsSession(srv.ws_url, voice=VOICE) as ws:
        timings = await ws.synthesize(list(SENTENCES) if mode == "sentence_first" else [PARAGRAPH])
    return _figures(timings[0].first_audio_s, timings[-1].complete_s, sum(t.audio_s for t in timings),
                    ws.connect_s, timings[0].server_ttfa_ms)


def rounds_over_http(result: Result, sample: Callable[[httpx.AsyncClient, str], Awaitable[dict]], log) -> list[dict]:
    """The result's ``runs_per_mode`` rounds of ``await sample(http, mode)`` for each of its ``modes``
    (:func:`benchmarks.loop.in_rounds`, 0.3 s apart), on one HTTP client."""
    async def main() -> list[dict]:
        async with httpx.AsyncClient(timeout=600) as http:
            return await in_rounds(result.config["modes"], result.config["runs_per_mode"],
                                   lambda mode: sample(http, mode), log=log, pause_s=0.3)

    return asyncio.run(main())


def run(*, quick: bool = False, model_dir=None, log=print, backend: str = "onnx") -> Result:
    check_paragraph()
    runs = 2 if quick else 5
    # quick: the modes that differ; for this paragraph `streamed` packs into one segment (= batch) and
    # create_stream() has one batch (= create()).
    modes = ["batch", "sentence_first", "fast_first", "clause_first", "raw_batch"] if quick else [*SERVER_MODES, *RAW_MODES]
    servers_used = SERVERS
    if backend == "fake":  # the harness without the model: no raw runtime beside it, no server its modes leave idle
        modes = [m for m in modes if not m.startswith("raw_")]
        used = {OWN_SERVER.get(m, "default") for m in modes}
        servers_used = {name: env for name, env in SERVERS.items() if name in used}
    result = Result(
        "ttfa", quick, command_line("ttfa", quick),
        config={
            "paragraph": PARAGRAPH, "paragraph_chars": len(PARAGRAPH), "sentences": list(SENTENCES),
            "voice": VOICE, "lang": "en-us", "runs_per_mode": runs, "modes": modes,
            "servers": {name: " ".join([*(f"{k}={v}" for k, v in env.items()),
                                        f"kokoro-serve serve --backend {backend} --mode sequential"])
                        for name, env in servers_used.items()},
            "streaming_mode": STREAMING_MODE,
        },
    )
    log(f"ttfa: {runs} runs x {len(modes)} modes on a {len(PARAGRAPH)}-character paragraph")
    raw = None
    if any(m.startswith("raw_") for m in modes):
        raw = RawRuntime(model_dir)
        result.config["raw_runtime"] = {"model": str(raw.model_path.name), "load_s": rnd(raw.load_s, 2)}
    with contextlib.ExitStack() as stack:
        servers = {name: stack.enter_context(LiveServer(backend=backend, model_dir=model_dir, env=env, log=log))
                   for name, env in servers_used.items()}
        before = {name: srv.scrape() for name, srv in servers.items()}
        t0 = time.perf_counter()
        result.samples = rounds_over_http(result, lambda http, mode: _sample(mode, servers, raw, http), log)
        result.config["wall_s"] = rnd(time.perf_counter() - t0, 1)
        result.server_view = {name: prom.server_view(before[name], srv.scrape()) for name, srv in servers.items()}
        result.config["server_startup_s"] = {name: rnd(srv.startup_s, 1) for name, srv in servers.items()}
    log("ttfa: many listeners (deadlines on/off, sequential/concurrent)")
    sweep = listeners.sweep(quick=quick, model_dir=model_dir, log=log, backend=backend)
    summarize(result)
    result.summary["listeners"] = sweep
    listeners.targets(result, sweep)
    if not quick and backend == "onnx" and importlib.util.find_spec("torch") is not None:
        log("ttfa: the late listener on the torch runtime (CPU), deadlines on, both modes")
        on_torch = listeners.sweep(quick=quick, model_dir=model_dir, log=log, backend="torch", levels=[1],
                                   configs=(("sequential", True), ("concurrent", True)))
        result.summary["torch_late_listener"] = on_torch
        for mode in ("sequential", "concurrent"):
            late = (on_torch["summary"].get(listeners.config_name(mode, True, "torch"), {}).get("late") or {})
            result.target(f"torch, {mode}: late listener's first audio vs alone", f"<= {listeners.LATE_GOAL:g}x",
                          late.get("vs_alone"), at_most(late.get("vs_alone"), listeners.LATE_GOAL))
    return result


def summarize(result: Result) -> None:
    result.medians = medians_by(result.samples, "mode", {"first_audio_ms": 1, "complete_ms": 1, "audio_s": 3})
    first = {mode: v["first_audio_ms"] for mode, v in result.medians.items()}
    batch, streaming = first.get("batch"), first.get(STREAMING_MODE)
    vs_batch = ratio(streaming, batch, 4)
    result.summary = {
        "batch_ttfa_ms": batch, "streaming_ttfa_ms": streaming, "ratio": vs_batch,
        "streaming_vs_raw_stream": ratio(streaming, first.get("raw_stream"), 4),
        "clause_first_ttfa_ms": first.get("clause_first"),
        "fragment_first_ttfa_ms": first.get("fragment_first"),
        "median_first_audio_ms": first,
        "median_complete_ms": {mode: v["complete_ms"] for mode, v in result.medians.items()},
    }
    result.target("streaming first audio / batch", f"<= {TARGET_RATIO}x", vs_batch, at_most(vs_batch, TARGET_RATIO))
    result.target("streaming first audio", f"<= {TARGET_MS:.0f} ms on this machine", streaming,
                  at_most(streaming, TARGET_MS))
    result.notes.append(
        "streaming_ttfa_ms is the fast_first mode: the whole text over the WebSocket to a server with "
        "default settings (first segment cut short, after a few words); clause_first_ttfa_ms the same with "
        "KOKORO_SHORT_FIRST_SEGMENT=never (the first segment ends at the first clause mark or phrase boundary); "
        "fragment_first_ttfa_ms the default cut with KOKORO_WINDOWED_FIRST_SEGMENT=false (the early fragment read "
        "alone rather than as a window of its sentence, where the runtime decodes windows)."
    )


def body(data: dict[str, Any]) -> str:
    s, m = data["summary"], data["medians"]
    rows = [[mode, v["first_audio_ms"], rnd(median(x.get("server_ttfa_ms") for x in data["samples"] if x["mode"] == mode), 1),
             v["complete_ms"], v["audio_s"], v["runs"]] for mode, v in m.items()]
    head = (
        f"Streaming first audio **{s['streaming_ttfa_ms']} ms** vs batch **{s['batch_ttfa_ms']} ms** "
        f"(ratio {s['ratio']}) on the {data['config']['paragraph_chars']}-character paragraph, "
        f"voice {data['config']['voice']}; medians of {data['config']['runs_per_mode']} runs per mode. "
        "First audio is client-measured; the server's own figure for the first request (`ttfa_ms` of "
        "`synthesis_complete`, WebSocket modes) is beside it."
    )
    table = markdown_table(["mode", "first audio ms", "server-reported ms", "complete ms", "audio s", "runs"], rows)
    view = data["server_view"].get("default", {}).get("time_to_first_audio_ms", {})
    server = (
        "Server's own view (default server, `kokoro_time_to_first_audio_seconds` delta over the run, per request — "
        "sentence_first sends 4 requests a run, the later ones queued behind the earlier; p50 interpolated within "
        "histogram buckets): " + ", ".join(
            f"{route}: n={v['count']:.0f}, mean {v['mean']} ms, p50 ≈{v['p50']} ms"
            for route, v in view.items() if v["count"] and route != "all"
        )
    )
    out = f"{head}\n\n{table}\n\n{server}"
    if s.get("listeners"):
        out += (
            "\n\nMany listeners, each sending the paragraph at once and playing it in real time (underrun: seconds "
            "of silence heard between chunks), then one listener arriving while three stream long texts:\n\n"
            + listeners.table(s["listeners"])
        )
    if s.get("torch_late_listener"):
        out += ("\n\nThe same late arrival on the PyTorch runtime (CPU, float32), against its own first audio "
                "alone:\n\n" + listeners.table(s["torch_late_listener"]))
    return out


def first_audio_plot(data: dict[str, Any], path, *, behind: str, behind_label: str, xlabel: str, title: str) -> None:
    """Per mode: its median first audio over its median ``behind`` (grey), each run's first audio a dot."""
    import matplotlib.pyplot as plt

    m = data["medians"]
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(m) + 1.5))
    ax.barh(range(len(m)), [v[behind] or 0 for v in m.values()], color="#d9d9d9", label=behind_label)
    ax.barh(range(len(m)), [v["first_audio_ms"] or 0 for v in m.values()], color="#3b7dd8", height=0.5,
            label="first audio (median)")
    for i, mode in enumerate(m):
        xs = [s["first_audio_ms"] for s in data["samples"] if s["mode"] == mode]
        ax.scatter(xs, [i] * len(xs), color="black", s=8, zorder=3)
    ax.set_yticks(range(len(m)), list(m))
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    ax.legend(loc="best", fontsize=8)
    results.save_plot(fig, path)


def plot(data: dict[str, Any], path) -> None:
    title = f"Time to first audio, {data['config']['paragraph_chars']}-char paragraph ({data['command']})"
    first_audio_plot(data, path, behind="complete_ms", behind_label="complete (median)", xlabel="milliseconds",
                     title=title)
