"""Time to first audio on the 267-character, 4-sentence paragraph: batch vs streaming, against
live servers, with the raw runtime (kokoro-onnx) side by side in the same run.

Modes (each run goes through every mode in turn, the first one rotating run by run, so load drift hits all
modes alike; ``--backend fake`` leaves out the raw runtime):

* ``batch`` — ``POST /invocations`` with ``stream: false``; first audio is when the whole audio
  has arrived (the AWS sample handler's behaviour).
* ``streamed`` — the whole text over the WebSocket to a server with
  ``KOKORO_FAST_FIRST_SEGMENT=false``: server-side sentence segments, first audio after the first
  whole sentence.
* ``sentence_first`` — the four sentences sent at once over the WebSocket, pipelined, as a
  sentence chunker hands them over (default server).
* ``fast_first`` — the whole text over the WebSocket to the default server, whose first segment
  is cut short, after a few words (``KOKORO_SHORT_FIRST_SEGMENT=always``). This is the default
  client path: ``streaming_ttfa_ms``.
* ``clause_first`` — the same to a server with ``KOKORO_SHORT_FIRST_SEGMENT=never``: the first
  segment ends at the first clause mark or phrase boundary (3–12 words).
* ``raw_batch`` / ``raw_stream`` / ``raw_sentence_first`` — ``Kokoro.create()``,
  ``Kokoro.create_stream()`` (first batch) and ``create()`` per sentence, in this process.

Server-side first audio is measured from the first byte sent (the WebSocket session is opened
before the clock starts; its connect time is recorded apart).

Then many listeners (:mod:`benchmarks.listeners`): 1, 2, 4, 8 sending the paragraph at once, and a
late arrival behind three streaming listeners, with playback deadlines on and off, sequential vs
concurrent (``summary.listeners``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import time
from typing import Any

import httpx

from . import listeners, prom
from .clients import RequestFailed, WsSession, post
from .live import LiveServer
from .loop import in_rounds
from .raw import VOICE, RawRuntime
from .results import Result, command_line, markdown_table, median, medians_by, ms, rnd, save_plot
from .texts import PARAGRAPH, SENTENCES, check_paragraph

SERVER_MODES = ("batch", "streamed", "sentence_first", "fast_first", "clause_first")
RAW_MODES = ("raw_batch", "raw_stream", "raw_sentence_first")
STREAMING_MODE = "fast_first"
TARGET_RATIO, TARGET_MS = 0.15, 1000.0
SHORT_RATIO = 0.12  # the tighter goal for streaming first audio over batch


async def _server_sample(mode: str, servers: dict[str, LiveServer], http: httpx.AsyncClient) -> dict:
    default = servers["default"]
    if mode == "batch":
        t = await post(http, f"{default.url}/invocations",
                       {"text": PARAGRAPH, "format": "pcm", "stream": False, "voice": VOICE})
        if t.error:
            raise RequestFailed(t.error)
        # The whole audio is the first audio a batch client can play.
        return {"first_audio_s": t.complete_s, "complete_s": t.complete_s, "audio_s": t.audio_s, "connect_s": None}
    srv = servers["plain"] if mode == "streamed" else servers["clause"] if mode == "clause_first" else default
    texts = list(SENTENCES) if mode == "sentence_first" else [PARAGRAPH]
    async with WsSession(srv.ws_url, voice=VOICE) as ws:
        timings = await ws.synthesize(texts)
    return {
        "first_audio_s": timings[0].first_audio_s,
        "complete_s": timings[-1].complete_s,
        "audio_s": sum(t.audio_s for t in timings),
        "connect_s": ws.connect_s,
        "server_ttfa_ms": timings[0].server_ttfa_ms,
    }


async def _raw_sample(mode: str, raw: RawRuntime | None) -> dict:
    assert raw is not None
    if mode == "raw_batch":
        t = await asyncio.to_thread(raw.create, PARAGRAPH)
    elif mode == "raw_stream":
        t = await raw.create_stream(PARAGRAPH)
    else:
        t = await asyncio.to_thread(raw.create_sentences, SENTENCES)
    return {"first_audio_s": t.first_audio_s, "complete_s": t.complete_s, "audio_s": t.audio_s}


async def _measure(modes: list[str], runs: int, servers: dict[str, LiveServer], raw: RawRuntime | None, log) -> list[dict]:
    async with httpx.AsyncClient(timeout=600) as http:
        async def one(mode: str) -> dict:
            s = await (_raw_sample(mode, raw) if mode.startswith("raw_") else _server_sample(mode, servers, http))
            return {"first_audio_ms": ms(s["first_audio_s"]), "complete_ms": ms(s["complete_s"]),
                    "audio_s": rnd(s["audio_s"], 3), "connect_ms": ms(s.get("connect_s") or None, 2),
                    "server_ttfa_ms": s.get("server_ttfa_ms")}

        return await in_rounds(modes, runs, one, log=log, pause_s=0.3)


def run(*, quick: bool = False, model_dir=None, log=print, backend: str = "onnx") -> Result:
    check_paragraph()
    runs = 2 if quick else 5
    # quick: the modes that differ; for this paragraph `streamed` packs into one segment (= batch) and
    # create_stream() has one batch (= create()).
    modes = ["batch", "sentence_first", "fast_first", "clause_first", "raw_batch"] if quick else [*SERVER_MODES, *RAW_MODES]
    if backend == "fake":  # the harness without the model: no raw runtime beside it
        modes = [m for m in modes if not m.startswith("raw_")]
    result = Result(
        "ttfa", quick, command_line("ttfa", quick),
        config={
            "paragraph": PARAGRAPH, "paragraph_chars": len(PARAGRAPH), "sentences": list(SENTENCES),
            "voice": VOICE, "lang": "en-us", "runs_per_mode": runs, "modes": modes,
            "servers": {
                "default": f"kokoro-serve serve --backend {backend} --mode sequential",
                "plain": f"KOKORO_FAST_FIRST_SEGMENT=false kokoro-serve serve --backend {backend} --mode sequential",
                "clause": f"KOKORO_SHORT_FIRST_SEGMENT=never kokoro-serve serve --backend {backend} --mode sequential",
            },
            "streaming_mode": STREAMING_MODE,
        },
    )
    log(f"ttfa: {runs} runs x {len(modes)} modes on a {len(PARAGRAPH)}-character paragraph")
    raw = None
    if any(m.startswith("raw_") for m in modes):
        raw = RawRuntime(model_dir)
        result.config["raw_runtime"] = {"model": str(raw.model_path.name), "load_s": rnd(raw.load_s, 2)}
    servers = {name: LiveServer(backend=backend, model_dir=model_dir, env=env, log=log) for name, env in (
        ("default", {}), ("plain", {"KOKORO_FAST_FIRST_SEGMENT": "false"}),
        ("clause", {"KOKORO_SHORT_FIRST_SEGMENT": "never"}))}
    with contextlib.ExitStack() as stack:
        for srv in servers.values():
            stack.enter_context(srv)
        before = {name: srv.scrape() for name, srv in servers.items()}
        t0 = time.perf_counter()
        result.samples = asyncio.run(_measure(modes, runs, servers, raw, log))
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
            ratio = (on_torch["summary"].get(listeners.config_name(mode, True, "torch"), {}).get("late") or {}).get("vs_alone")
            result.target(f"torch, {mode}: late listener's first audio vs alone", f"<= {listeners.LATE_GOAL:g}x",
                          ratio, None if ratio is None else ratio <= listeners.LATE_GOAL)
    return result


def summarize(result: Result) -> None:
    result.medians = medians_by(result.samples, "mode", {"first_audio_ms": 1, "complete_ms": 1, "audio_s": 3})
    batch = (result.medians.get("batch") or {}).get("first_audio_ms")
    streaming = (result.medians.get(STREAMING_MODE) or {}).get("first_audio_ms")
    ratio = round(streaming / batch, 4) if batch and streaming else None
    raw_stream = (result.medians.get("raw_stream") or {}).get("first_audio_ms")
    clause = (result.medians.get("clause_first") or {}).get("first_audio_ms")
    result.summary = {
        "batch_ttfa_ms": batch,
        "streaming_ttfa_ms": streaming,
        "ratio": ratio,
        "streaming_vs_raw_stream": round(streaming / raw_stream, 4) if streaming and raw_stream else None,
        "clause_first_ttfa_ms": clause,
        "median_first_audio_ms": {m: v["first_audio_ms"] for m, v in result.medians.items()},
        "median_complete_ms": {m: v["complete_ms"] for m, v in result.medians.items()},
    }
    result.target("streaming first audio / batch", f"<= {TARGET_RATIO}x", ratio, None if ratio is None else ratio <= TARGET_RATIO)
    result.target(
        "streaming first audio", f"<= {TARGET_MS:.0f} ms on this machine", streaming,
        None if streaming is None else streaming <= TARGET_MS,
    )
    result.target(
        "streaming first audio / batch", f"<= {SHORT_RATIO}x", ratio, None if ratio is None else ratio <= SHORT_RATIO
    )
    result.notes.append(
        "streaming_ttfa_ms is the fast_first mode: the whole text over the WebSocket to a server with "
        "default settings (first segment cut short, after a few words); clause_first_ttfa_ms the same with "
        "KOKORO_SHORT_FIRST_SEGMENT=never (the first segment ends at the first clause mark or phrase boundary)."
    )


def body(data: dict[str, Any]) -> str:
    s, m = data["summary"], data["medians"]
    rows = []
    for mode, v in m.items():
        reported = median(x.get("server_ttfa_ms") for x in data["samples"] if x["mode"] == mode)
        rows.append([mode, v["first_audio_ms"], rnd(reported, 1), v["complete_ms"], v["audio_s"], v["runs"]])
    head = (
        f"Streaming first audio **{s['streaming_ttfa_ms']} ms** vs batch **{s['batch_ttfa_ms']} ms** "
        f"(ratio {s['ratio']}) on the {data['config']['paragraph_chars']}-character paragraph, "
        f"voice {data['config']['voice']}; medians of {data['config']['runs_per_mode']} runs per mode. "
        "First audio is client-measured; the server's own figure for the first request (`ttfa_ms` of "
        "`synthesis_complete`, WebSocket modes) is beside it."
    )
    table = markdown_table(
        ["mode", "first audio ms", "server-reported ms", "complete ms", "audio s", "runs"], rows
    )
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


def plot(data: dict[str, Any], path) -> None:
    import matplotlib.pyplot as plt

    modes = list(data["medians"])
    fig, ax = plt.subplots(figsize=(8, 0.55 * len(modes) + 1.5))
    y = range(len(modes))
    ax.barh(y, [data["medians"][m]["complete_ms"] for m in modes], color="#d9d9d9", label="complete (median)")
    ax.barh(y, [data["medians"][m]["first_audio_ms"] for m in modes], color="#3b7dd8", height=0.5, label="first audio (median)")
    for i, m in enumerate(modes):
        xs = [s["first_audio_ms"] for s in data["samples"] if s["mode"] == m]
        ax.scatter(xs, [i] * len(xs), color="black", s=8, zorder=3)
    ax.set_yticks(list(y), modes)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds")
    ax.set_title(f"Time to first audio, {data['config']['paragraph_chars']}-char paragraph ({data['command']})", fontsize=9)
    ax.legend(loc="best", fontsize=8)
    save_plot(fig, path)
