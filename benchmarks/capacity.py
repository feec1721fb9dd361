"""Capacity: the highest voice-agent load a server keeps under a first-audio target, and the
per-instance autoscaling target that follows from it (``deploy up --capacity-from``). Runs:
docs/benchmarks.md ("Capacity"), docs/deploy.md (the table, and how to rerun it on the instance).

For each plan (a runtime and mode, started as a live server), each workload of
:mod:`benchmarks.voiceload` runs as a closed loop at rising client counts until p95 first audio
passes the target; the one-sentence workload then runs as an open loop at 0.5x, 1x, 2x and 4x the
rate the closed loop held (throughput must level off, not fall). Per level: requests/s, first
audio p50/p95/p99, underruns, refusals and the server's CPU per answered request.

``fake-gpu/concurrent refuse`` runs only the open loop, at the rates of ``fake-gpu/concurrent``'s
capacity, with ``KOKORO_OVERLOAD=refuse`` (``--quick``: 1x and 4x): newcomers beyond capacity are
told 503 ``overloaded`` early enough that the admitted keep p95 first audio within the target, and
throughput levels off instead of falling.

Plans: ``fake-gpu`` — the GPU-timed stand-in: the fake runtime with each call timed like Kokoro on
an A10G (:data:`GPU_STANDIN`, its calibration and sources in the result), batched as the concurrent
mode batches a GPU runtime (``KOKORO_BATCH_ON_CPU``: the fake declares a CPU device) — and the
runtimes here (``onnx``; ``torch`` on a GPU machine, ``--backend torch``), each sequential and
concurrent. The recommendation: the sessions (SageMaker's concurrent requests per instance) the
GPU plan held within the target, times :data:`HEADROOM` — from ``torch/concurrent`` when it was
measured on the instance, else from the stand-in.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from . import prom
from .live import LiveServer
from .results import Result, command_line, load_average, markdown_table, ratio
from .texts import PARAGRAPH, THROUGHPUT_TEXTS
from .voiceload import WORKLOADS, CpuMeter, head_of_line, level_figures, run_closed, run_open, workload

#: A 4,900-character request (the texts of the suite, over and over): its planning must hold up
#: neither its own first audio nor a one-sentence request sent 50 ms after it.
LONG_TEXT = " ".join([PARAGRAPH, *THROUGHPUT_TEXTS] * 40)[:4900].rsplit(" ", 1)[0]
#: p95 first audio a level must keep (the flag ``--target-ms``).
TARGET_MS = 300.0
#: Share of the measured capacity the autoscaler aims for (room for a burst while a new instance starts).
HEADROOM = 0.75
#: The open loop again with KOKORO_OVERLOAD=refuse, at the rates of fake-gpu/concurrent's capacity.
REFUSE_PLAN = "fake-gpu/concurrent refuse"
#: The GPU-timed stand-in: per call, per phoneme of the call's longest segment, batched free.
GPU_STANDIN = {"KOKORO_FAKE_SEGMENT_S": "0.015", "KOKORO_FAKE_PHONEME_S": "0.0003", "KOKORO_FAKE_BATCH": "true",
               "KOKORO_BATCH_ON_CPU": "true"}
CALIBRATION = {
    "per_call_ms": 15.0, "per_phoneme_ms": 0.3, "batching": "a batch costs what its longest segment costs "
    "(up to KOKORO_MAX_BATCH_SIZE, 16)",
    "instance": "ml.g5.xlarge (one NVIDIA A10G, 4 vCPUs)",
    "sources": [
        "AWS's capacity run of its SageMaker bidirectional-streaming TTS sample on ml.g5.xlarge (one sentence a "
        "request, one synthesis at a time): p95 first audio under 300 ms up to ~9.7 requests/s, a ceiling near 17 "
        "requests/s with the host CPU at 100 % and the GPU 39 % busy — 0.39 / 17 = ~23 ms of GPU a request",
        "a one-sentence request here is 40-60 phonemes: 15 ms + 0.3 ms x 50 = 30 ms a call, within the 23 ms "
        "measured plus the sample's host-side share; the split between per-call and per-phoneme time is assumed "
        "(Kokoro's 82 M parameters run launch-bound at batch 1 on an A10G), and batching is taken as free while "
        "the GPU is 39 % busy",
    ],
}


def _plans(quick: bool, backend: str | None) -> list[dict[str, Any]]:
    plans = []
    runtimes = {"fake": "fake-gpu", "onnx": "onnx", "torch": "torch"}
    # torch (a GPU machine): measured beside the stand-in on the same host
    chosen = ["fake", "torch"] if backend == "torch" else [backend] if backend else (["fake"] if quick else ["fake", "onnx"])
    for runtime in chosen:
        for mode in ("sequential", "concurrent"):
            env = dict(GPU_STANDIN) if runtime == "fake" else {}
            plans.append({"label": f"{runtimes[runtime]}/{mode}", "runtime": runtime, "mode": mode, "env": env,
                          "workloads": list(WORKLOADS) if not quick or mode == "concurrent" else ["sentence"],
                          "open": [0.5, 2.0] if quick or runtime == "onnx" else [0.5, 1.0, 2.0, 4.0]})
    if "fake" in chosen:
        plans.append({"label": REFUSE_PLAN, "runtime": "fake", "mode": "concurrent",
                      "env": {**GPU_STANDIN, "KOKORO_OVERLOAD": "refuse"}, "workloads": [],
                      "open": [1.0, 4.0] if quick else [0.5, 1.0, 2.0, 4.0]})
    return plans


def _levels(runtime: str, workload_name: str, quick: bool) -> list[int]:
    if quick:
        return [2, 8, 32] if workload_name == "sentence" else [4]
    if runtime == "onnx":  # a CPU: one sentence takes most of a second on two cores
        return [1, 2, 4]
    return [1, 4, 16, 32, 64, 96, 128, 192, 256] if workload_name == "sentence" else [1, 4, 16, 32, 64, 96]


async def _measure_plan(srv: LiveServer, plan: dict[str, Any], *, quick: bool, target_ms: float,
                        duration_s: float, log: Any, reference_rate: float | None) -> list[dict[str, Any]]:
    samples = []
    meter = CpuMeter(srv.proc.pid if srv.proc is not None else None)

    async def level(name: str, loop: str, load: float) -> dict[str, Any]:
        session, call = workload(name, srv.url, srv.ws_url)
        before = await asyncio.to_thread(srv.scrape)
        meter.start()
        if loop == "closed":
            timings, wall = await run_closed(call, session, int(load), duration_s)
        else:
            timings, wall = await run_open(call, load, duration_s, pool=lambda: session(0))
        figures = level_figures(timings, wall, meter.stop(), target_ms)
        sample = {"plan": plan["label"], "workload": name, "loop": loop, "load": load, **figures,
                  "server_first_audio_ms_p95": server_p95_ms(before, await asyncio.to_thread(srv.scrape)),
                  "load_1m": (load_average() or [None])[0]}
        log(f"  {plan['label']:<28} {name:<8} {loop:<6} {load:>7g}: {figures['requests_per_s']:>7} req/s, "
            f"p95 {figures['first_audio_ms_p95']} ms (server's own {sample['server_first_audio_ms_p95']}), "
            f"refused {figures['refused']}, failed {figures['failed']}, CPU {figures['cpu_ms_per_request']} ms/req")
        samples.append(sample)
        srv.wait_idle(timeout_s=20)
        return sample

    if plan["workloads"]:
        hol = await head_of_line(srv.url, LONG_TEXT, 1 if quick else 5)
        log(f"  {plan['label']:<28} first audio: {hol}")
        samples.append({"plan": plan["label"], "workload": "head_of_line", "loop": "single", **hol})
        srv.wait_idle(timeout_s=20)
    for name in plan["workloads"]:
        misses = 0
        for clients in _levels(plan["runtime"], name, quick):
            sample = await level(name, "closed", clients)
            misses = 0 if sample["within_target"] else misses + 1
            if misses >= 2:
                break
    held = _capacity(samples, "sentence")
    rate = reference_rate or (held["requests_per_s"] if held else None)
    if rate:
        for k in plan["open"]:
            await level("sentence", "open", round(rate * k, 1))
    return samples


def server_p95_ms(before: prom.Samples, after: prom.Samples) -> float | None:
    """p95 first audio as the server measured it (request received -> first audio handed to its
    socket; ``kokoro_time_to_first_audio_seconds``) between two scrapes: the client's figure
    less the time before the server reads the request (the accept backlog, a busy event loop)."""
    p95 = prom.histogram(prom.delta(before, after), "kokoro_time_to_first_audio_seconds").quantile(0.95)
    return None if p95 is None else round(p95 * 1000, 1)


def _capacity(samples: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The closed-loop level of ``name`` that answered the most requests a second within the target."""
    within = [s for s in samples if s["workload"] == name and s["loop"] == "closed" and s.get("within_target")]
    return max(within, key=lambda s: s["requests_per_s"], default=None)


def recommendation(summary: dict[str, Any]) -> dict[str, Any] | None:
    """The per-instance autoscaling target: the GPU plan's bidi sessions held, times the headroom."""
    for label, measured_on in (("torch/concurrent", "the GPU instance"), ("fake-gpu/concurrent", "the GPU-timed stand-in")):
        held = summary.get("capacity", {}).get(label, {}).get("bidi")
        if held:
            clients = held["load"]
            return {"target_sessions": max(1, math.floor(clients * HEADROOM)), "from": label, "measured_on": measured_on,
                    "workload": "bidi", "sessions_within_target": clients, "headroom": HEADROOM,
                    "requests_per_s": held["requests_per_s"], "first_audio_ms_p95": held["first_audio_ms_p95"],
                    "instance_type": "ml.g5.xlarge"}
    return None


def run(*, quick: bool = False, model_dir=None, log=print, backend: str | None = None,
        target_ms: float = TARGET_MS) -> Result:
    result = Result(benchmark="capacity", quick=quick, command=command_line("capacity", quick))
    plans = _plans(quick, backend)
    duration_s = 1.0 if quick else 6.0
    result.config = {"target_ms": target_ms, "headroom": HEADROOM, "level_s": duration_s, "plans": plans,
                     "gpu_standin": {"env": GPU_STANDIN, "calibration": CALIBRATION},
                     "workloads": {"sentence": "POST /invocations, one sentence", "bidi": "a 3-sentence turn on "
                                   "/invocations-bidirectional-stream", "deepgram": "a 3-sentence turn on /v1/speak"}}
    reference: float | None = None
    for plan in plans:
        with LiveServer(backend=plan["runtime"], mode=plan["mode"], env=plan["env"], model_dir=model_dir, log=log) as srv:
            samples = asyncio.run(_measure_plan(srv, plan, quick=quick, target_ms=target_ms, duration_s=duration_s,
                                                log=log, reference_rate=reference if not plan["workloads"] else None))
        if plan["label"] == "fake-gpu/concurrent":
            reference = (_capacity(samples, "sentence") or {}).get("requests_per_s")
        result.samples += samples
    _summarize(result, plans, target_ms)
    return result


def _summarize(result: Result, plans: list[dict[str, Any]], target_ms: float) -> None:
    capacity: dict[str, dict[str, Any]] = {}
    for plan in plans:
        mine = [s for s in result.samples if s["plan"] == plan["label"]]
        capacity[plan["label"]] = {name: _capacity(mine, name) for name in WORKLOADS}
        opened = [s for s in mine if s["loop"] == "open"]
        if opened:
            peak = max(s["requests_per_s"] for s in opened)
            last = opened[-1]
            level = last["requests_per_s"] >= 0.9 * peak
            result.target(f"{plan['label']}: throughput levels off at {last['load']:g} requests/s offered",
                          ">= 0.9x the peak", f"{last['requests_per_s']} of {peak}", level)
        if opened and plan["label"] == REFUSE_PLAN:
            worst = max((s["first_audio_ms_p95"] for s in opened if s["first_audio_ms_p95"] is not None), default=None)
            result.target(f"{plan['label']}: p95 first audio of the admitted at every open-loop level (up to "
                          f"{opened[-1]['load']:g} requests/s offered)", f"<= {target_ms:g} ms", worst,
                          None if worst is None else worst <= target_ms)
            own = max((s["server_first_audio_ms_p95"] for s in opened if s.get("server_first_audio_ms_p95") is not None),
                      default=None)
            result.target(f"{plan['label']}: the same, as the server measured it (from when it read the request)",
                          f"<= {target_ms:g} ms", own, None if own is None else own <= target_ms)
        for hol in (s for s in mine if s["workload"] == "head_of_line"):
            behind, after = hol["behind_long_ms"], hol["behind_sentence_ms"]
            own, alone = hol.get("long_alone_ms"), hol["alone_ms"]  # each alone: the cost of planning a long text
            result.target(f"{plan['label']}: a sentence 50 ms after a 4,900-character request vs after a sentence",
                          "<= 1.2x", ratio(behind, after), None if not (behind and after) else behind <= 1.2 * after)
            result.target(f"{plan['label']}: the 4,900-character request's own first audio vs a sentence alone",
                          "<= 1.2x", ratio(own, alone), None if not (own and alone) else own <= 1.2 * alone)
        held = capacity[plan["label"]]["sentence"]
        if plan["label"] == "fake-gpu/concurrent" and held:
            result.target("fake-gpu/concurrent: one-sentence requests/s held at p95 first audio <= target",
                          ">= 250", held["requests_per_s"], held["requests_per_s"] >= 250)
            result.target("fake-gpu/concurrent: server CPU per request at that load", "<= 3 ms",
                          held["cpu_ms_per_request"], (held["cpu_ms_per_request"] or 1e9) <= 3.0)
    result.summary = {"target_ms": target_ms, "capacity": capacity}
    result.summary["recommendation"] = recommendation(result.summary)
    result.notes += [
        "The load generator runs in the benchmark's own process on the same cores as the server: at high levels "
        "it competes with the server for CPU, so the figures are a lower bound of the server's capacity.",
        "Stand-in figures measure the host path (HTTP, WebSocket, planning, scheduling, encoding) with the GPU's "
        "time modelled; rerun with `--backend torch` on the instance (benchmarks/gpu_check.sh) for the real one.",
    ]


def body(data: dict[str, Any]) -> str:
    summary = data.get("summary", {})
    rows = []
    for label, by_workload in summary.get("capacity", {}).items():
        for name, held in by_workload.items():
            if held:
                rows.append([label, name, held["load"], held["requests_per_s"], held["first_audio_ms_p50"],
                             held["first_audio_ms_p95"], held["first_audio_ms_p99"], held["underrun_requests"],
                             held["cpu_ms_per_request"]])
    levels = [[s["plan"], s["workload"], s["loop"], s["load"], s["requests_per_s"], s["first_audio_ms_p50"],
               s["first_audio_ms_p95"], s["first_audio_ms_p99"], s.get("server_first_audio_ms_p95"), s["refused"],
               s["failed"], s["underrun_requests"], s["cpu_ms_per_request"], s.get("load_1m")]
              for s in data["samples"] if s["workload"] != "head_of_line"]
    hol = [[s["plan"], s["alone_ms"], s["behind_sentence_ms"], s["behind_long_ms"], s.get("long_alone_ms"), s["long_own_ms"],
            s["runs"]]
           for s in data["samples"] if s["workload"] == "head_of_line"]
    rec = summary.get("recommendation")
    said = (f"**Recommended autoscaling target: {rec['target_sessions']} concurrent sessions per instance** "
            f"({rec['sessions_within_target']} bidi sessions held p95 first audio within {summary.get('target_ms'):g} ms "
            f"on {rec['measured_on']} ({rec['from']}), x {rec['headroom']} headroom). "
            "`python -m deploy.sagemaker.deploy up --capacity-from benchmarks/results/capacity.json` sets it.\n\n"
            if rec else "No GPU plan held a level within the target: no recommendation.\n\n")
    calibration = data.get("config", {}).get("gpu_standin", {}).get("calibration", {})
    return (said + f"Highest load within p95 first audio <= {summary.get('target_ms'):g} ms, per plan and workload "
            "(closed loop: clients; each keeps one connection and sends again when answered):\n\n" + markdown_table(
                ["plan", "workload", "clients", "requests/s", "first audio p50 ms", "p95 ms", "p99 ms",
                 "underrun requests", "server CPU ms/request"], rows)
            + "\n\nFirst audio (ms, medians) of a one-sentence request alone, sent 50 ms after another one, and 50 ms "
            "after a 4,900-character request; and that request's own, alone and with the sentence 50 ms behind it "
            "(in concurrent mode the two share the cores):\n\n" + markdown_table(
                ["plan", "sentence alone", "behind a sentence", "behind 4,900 characters", "4,900 characters alone",
                 "4,900 characters' own, a sentence behind", "runs"], hol)
            + "\n\nEvery level (open loop: arrivals a second, each on an idle keep-alive connection of a pool or a new one when all are busy; first audio as the client "
            "measured it, and the server's own p95 from `kokoro_time_to_first_audio_seconds` (read off its buckets, "
            "linear within one: coarse for a level of few requests) — from when it read the request, so on `sentence` "
            "the difference is time spent before that: the accept backlog, a busy event "
            "loop, the load generator on the same cores (on the turns the server counts each sentence from its own "
            "arrival, later ones waiting for the earlier ones' audio: not comparable); load 1m: the machine's load "
            "average after the level):\n\n" + markdown_table(
                ["plan", "workload", "loop", "load", "requests/s", "p50 ms", "p95 ms", "p99 ms", "server p95 ms",
                 "refused", "failed", "underrun requests", "CPU ms/request", "load 1m"], levels)
            + (f"\n\nGPU-timed stand-in: {calibration.get('per_call_ms')} ms a call + {calibration.get('per_phoneme_ms')} "
               f"ms a phoneme; {calibration.get('batching')}. Sources: " + " ".join(
                   f"({i}) {s}." for i, s in enumerate(calibration.get("sources", []), 1)) if calibration else ""))
