"""Serving overhead: the server against the raw runtime on identical segments, at concurrency 1 —
first audio over one WebSocket session to a server with ``KOKORO_FAST_FIRST_SEGMENT=false`` against
``Kokoro.create()`` in this process, the two alternating segment by segment. Run as
``python -m benchmarks overhead``; docs/benchmarks.md defines its three figures.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from . import prom, results
from .clients import WsSession
from .live import LiveServer
from .raw import VOICE, RawRuntime
from .results import Result, at_least, at_most, command_line, markdown_table, median, ms, ratio, rnd
from .texts import SENTENCES, THROUGHPUT_TEXTS

TARGET_MS, TARGET_RATIO = 10.0, 0.97


def segments(quick: bool, backend: str = "onnx") -> list[str]:
    """The segments measured. A quick run on the fake runtime checks the harness, not the figures (the
    raw side is still the model): the pool's two shortest segments, so each order of a pair (raw first,
    server first) runs once, at the least of the raw model's time."""
    from backends.text.planner import split_sentences

    pool = [s for text in THROUGHPUT_TEXTS for s in split_sentences(text)] + list(SENTENCES)
    if quick and backend == "fake":
        return sorted(pool, key=len)[:2]
    return pool[:4] if quick else pool[:12]


async def _measure(srv: LiveServer, raw: RawRuntime, texts: list[str], reps: int, log) -> list[dict]:
    samples = []
    async with WsSession(srv.ws_url, voice=VOICE) as ws:
        await ws.synthesize(["Warming up the session."])
        for rep in range(1, reps + 1):
            for i, text in enumerate(texts):
                raw_first = (rep + i) % 2 == 0  # alternate who goes first, so neither always follows the other
                if raw_first:
                    r = await asyncio.to_thread(raw.create, text)
                before = await asyncio.to_thread(srv.scrape)
                (t,) = await ws.synthesize([text])
                after = await asyncio.to_thread(srv.scrape)
                runtime_s = prom.value(prom.delta(before, after), "kokoro_segment_synthesis_seconds_sum")
                if not raw_first:
                    r = await asyncio.to_thread(raw.create, text)
                sample = {
                    "segment": i, "rep": rep, "text": text, "raw_ms": ms(r.complete_s, 2), "raw_audio_s": rnd(r.audio_s, 3),
                    "server_first_audio_ms": ms(t.first_audio_s, 2), "server_complete_ms": ms(t.complete_s, 2),
                    "server_audio_s": rnd(t.audio_s, 3), "server_reported_ttfa_ms": t.server_ttfa_ms,
                    "server_runtime_ms": ms(runtime_s, 2),
                }
                sample["first_audio_overhead_ms"] = rnd(sample["server_first_audio_ms"] - sample["raw_ms"], 2)
                sample["serving_overhead_ms"] = rnd(sample["server_first_audio_ms"] - sample["server_runtime_ms"], 2)
                samples.append(sample)
                log(
                    f"  rep {rep} segment {i:>2}: raw {sample['raw_ms']:8.1f} ms   server first audio "
                    f"{sample['server_first_audio_ms']:8.1f} ms (runtime {sample['server_runtime_ms']:8.1f} ms)   "
                    f"vs raw {sample['first_audio_overhead_ms']:+7.1f} ms   serving {sample['serving_overhead_ms']:+6.1f} ms"
                )
    return samples


def run(*, quick: bool = False, model_dir=None, log=print, backend: str = "onnx") -> Result:
    texts = segments(quick, backend)
    reps = 1 if quick else 3
    result = Result(
        "overhead", quick, command_line("overhead", quick),
        config={
            "segments": texts, "reps": reps, "voice": VOICE, "concurrency": 1,
            "server": f"KOKORO_FAST_FIRST_SEGMENT=false kokoro-serve serve --backend {backend} --mode sequential",
            "raw": "kokoro_onnx.Kokoro.create(text, voice, lang='en-us') in the benchmark process",
        },
    )
    log(f"overhead: {len(texts)} segments x {reps} reps, raw and server alternating")
    raw = RawRuntime(model_dir)
    with LiveServer(backend=backend, model_dir=model_dir, env={"KOKORO_FAST_FIRST_SEGMENT": "false"}, log=log) as srv:
        before, t0 = srv.scrape(), time.perf_counter()
        result.samples = asyncio.run(_measure(srv, raw, texts, reps, log))
        result.config["wall_s"] = rnd(time.perf_counter() - t0, 1)
        after = srv.scrape()
        result.server_view = {"plain": prom.server_view(before, after)}
        result.config["server_segments_synthesised"] = prom.value(prom.delta(before, after),
                                                                   "kokoro_segment_synthesis_seconds_count")
    summarize(result)
    return result


def summarize(result: Result) -> None:
    s = result.samples
    result.medians = {key: rnd(median(x[key] for x in s), 2) for key in (
        "raw_ms", "server_first_audio_ms", "server_complete_ms", "first_audio_overhead_ms", "serving_overhead_ms",
        "server_runtime_ms")}
    overhead, serving = result.medians["first_audio_overhead_ms"], result.medians["serving_overhead_ms"]
    raw_total, server_total = sum(x["raw_ms"] for x in s), sum(x["server_complete_ms"] for x in s)
    throughput = ratio(raw_total, server_total, 4)
    raw_rate = sum(x["raw_audio_s"] for x in s) / (raw_total / 1000.0) if raw_total else None
    server_rate = sum(x["server_audio_s"] for x in s) / (server_total / 1000.0) if server_total else None
    view = result.server_view.get("plain", {})
    result.medians["server_segment_synthesis_ms_mean"] = view.get("segment_synthesis_ms", {}).get("mean")
    result.summary = {
        "first_audio_overhead_ms": overhead,
        "serving_overhead_ms": serving,
        "throughput_ratio": throughput,
        "audio_rate_ratio": ratio(server_rate, raw_rate, 4),
        "raw_audio_s_per_s": rnd(raw_rate, 3),
        "server_audio_s_per_s": rnd(server_rate, 3),
        "pairs": len(s),
        "expected_segments": len(s) + 1,  # the pairs and one session warm-up
        "server_segments": result.config.get("server_segments_synthesised"),
    }
    result.target("first-audio overhead vs raw", f"<= {TARGET_MS:.0f} ms", overhead, at_most(overhead, TARGET_MS))
    result.target("serving overhead around the server's own model call (supplementary)", f"<= {TARGET_MS:.0f} ms",
                  serving, at_most(serving, TARGET_MS))
    result.target("throughput vs raw at concurrency 1", f">= {TARGET_RATIO}x", throughput,
                  at_least(throughput, TARGET_RATIO))


def body(data: dict[str, Any]) -> str:
    s, m = data["summary"], data["medians"]
    rows = [
        ["raw kokoro-onnx create()", m["raw_ms"], m["raw_ms"], s["raw_audio_s_per_s"]],
        ["server (WebSocket, one segment)", m["server_first_audio_ms"], m["server_complete_ms"], s["server_audio_s_per_s"]],
        ["server's own model call (metrics)", m["server_runtime_ms"], m["server_runtime_ms"], None],
    ]
    table = markdown_table(["path", "first audio ms (median)", "complete ms (median)", "audio s per s"], rows)
    spread = _spread([x["first_audio_overhead_ms"] for x in data["samples"]])
    serving = _spread([x["serving_overhead_ms"] for x in data["samples"]])
    model_call = _spread([x["server_runtime_ms"] - x["raw_ms"] for x in data["samples"]])
    noise = (
        f"Where the difference comes from (p10 / p50 / p90, ms): paired server − raw {spread}; of it, serving around "
        f"the model call (G2P, planning, queueing, framing, loopback) {serving}, and the model call inside the "
        f"server vs kokoro-onnx's whole create() {model_call}. The paired spread comes from sharing the cores with "
        "other work; the serving figure does not depend on it."
    )
    return (
        f"{s['pairs']} identical segments at concurrency 1: first-audio overhead **{s['first_audio_overhead_ms']} ms** "
        f"(median of paired differences with the raw runtime); serving overhead around the server's own model call "
        f"**{s['serving_overhead_ms']} ms** (median); throughput ratio **{s['throughput_ratio']}x** raw (wall time over the same "
        f"segments; audio-rate ratio {s['audio_rate_ratio']}x). Server segments synthesised: {s['server_segments']} "
        f"(expected {s['expected_segments']}: the pairs plus one session warm-up); the server's own mean runtime time "
        f"per segment: {m['server_segment_synthesis_ms_mean']} ms.\n\n{table}\n\n{noise}"
    )


def _spread(values: list[float]) -> str:
    """p10 / p50 / p90 of ``values``, each the nearest sample."""
    xs = [v for v in values if v is not None]
    return " / ".join(f"{v:+.1f}" for v in np.percentile(xs, (10, 50, 90), method="nearest")) if xs else "—"


def plot(data: dict[str, Any], path) -> None:
    import matplotlib.pyplot as plt

    s = data["samples"]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.scatter([x["raw_ms"] for x in s], [x["first_audio_overhead_ms"] for x in s], s=14)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.axhline(TARGET_MS, color="#c55", linestyle="--", linewidth=0.8, label=f"target {TARGET_MS:.0f} ms")
    ax.set_xlabel("raw create() ms (segment length)")
    ax.set_ylabel("server first audio - raw, ms")
    ax.set_title(f"Serving overhead per segment ({data['command']})", fontsize=9)
    ax.legend(fontsize=8)
    results.save_plot(fig, path)
