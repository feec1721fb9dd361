"""The PyTorch runtime on one device (the GPU benchmark; it runs on CPU too): batched-vs-single
correctness, then throughput and first audio of closed-loop clients against the server's concurrent
mode built in process (:func:`benchmarks.inprocess.sweep`), then ``compare`` against a sequential
and a concurrent server of the same runtime, with the batches the concurrent one formed and the GPU
memory each holds (:func:`server_half`).

    python -m benchmarks gpu [--device auto|cuda|cpu] [--quick] [--onnx] [--no-server] ...  (--help lists them all)

Writes ``benchmarks/results/gpu-<device>.{json,md}`` and ``gpu-<device>-server.{json,md,png}``; the
method is in docs/benchmarks.md ("GPU", "The GPU run"). Offline: the model directory must hold the
int8 ONNX (the checkpoint is rebuilt from it when missing) or an official ``kokoro-v1_0.pth``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import prom, results
from .compare import TITLE, parse_args
from .compare import report as compare_report
from .compare import run as compare_run
from .inprocess import sweep
from .live import LiveServer
from .speech_measures import log_mel
from .texts import CLIPS

LEVELS = (1, 8, 32, 128, 256)
QUICK_LEVELS = (1, 2, 4)
SERVER_LEVELS = (1, 4, 16, 64)
QUICK_SERVER_LEVELS = (1, 2)
VOICE = "jm_kumo"
GOAL_AUDIO_S_PER_S = 1000.0
GOAL_P95_MS = 150.0
_log = functools.partial(print, flush=True)


def check_batched_vs_single(synth: Any, segments: list) -> dict[str, Any]:
    """One batch of ``segments`` against each synthesised alone, in deterministic mode (restored
    afterwards): durations and length must be identical, the log-mel within 0.5 dB on average."""
    saved = synth.deterministic
    synth.deterministic = True
    try:
        t0 = time.perf_counter()
        together = synth.synthesize_batch_timed(segments)
        batch_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        alone = [synth.synthesize_timed(s) for s in segments]
        singles_s = time.perf_counter() - t0
    finally:
        synth.deterministic = saved
    items = []
    for (a, d), (b, e) in zip(together, alone, strict=True):
        same = len(a) == len(b) and np.array_equal(d, e)
        items.append({"samples": len(b), "same_durations_and_length": bool(same),
                      "log_mel_mean_abs_db": float(np.abs(log_mel(a) - log_mel(b)).mean()) if same else None,
                      "waveform_rel_error": float(np.linalg.norm(a - b) / (np.linalg.norm(b) + 1e-12))
                      if same else None})
    ok = all(i["same_durations_and_length"] and i["log_mel_mean_abs_db"] < 0.5 for i in items)
    return {"ok": ok, "batch_size": len(segments), "items": items, "batch_s": round(batch_s, 4),
            "singles_s": round(singles_s, 4), "batch_speedup": round(singles_s / batch_s, 2),
            "audio_s": round(sum(len(b) for b, _ in alone) / 24000, 2),
            "tolerance": "identical durations and length; mean |log-mel difference| < 0.5 dB"}


def rtf(synthesize: Any, segments: list, *, warm_up: bool = True) -> dict[str, Any]:
    """Real-time factor of ``synthesize`` over ``segments``, one after another, after one warm-up call
    (``warm_up=False``: none, the runtime has already run calls of this kind)."""
    if warm_up:
        synthesize(segments[0])
    t0 = time.perf_counter()
    audio = sum(len(synthesize(s)) for s in segments) / 24000
    spent = time.perf_counter() - t0
    return {"segments": len(segments), "audio_s": round(audio, 2), "seconds": round(spent, 3),
            "rtf": round(spent / audio, 4)}


def gpu_memory_mib(pids: list[int]) -> dict[str, float] | None:
    """Memory each of ``pids`` holds on the GPU (``nvidia-smi``), None where that cannot be read."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):  # no nvidia-smi here
        return None
    rows = [line.split(",", 1) for line in out.splitlines() if "," in line]
    return {pid.strip(): float(mib.strip() or 0) for pid, mib in rows if pid.strip().isdigit() and int(pid) in pids}


def server_half(*, device: str, dtype: str, quick: bool, model_dir: Path | None, out_dir: Path, stem: str,
                levels: tuple[int, ...] | None = None, log=print, backend: str = "torch") -> dict[str, Any]:
    """Run ``compare`` against a sequential and a concurrent torch server; write
    ``<stem>-server.{json,md,png}``; return what the GPU result shows of it. (``backend="fake"``
    puts the model-free runtime in the servers: the tests' way to run this half in seconds.)"""
    levels = levels or (QUICK_SERVER_LEVELS if quick else SERVER_LEVELS)
    env = {"KOKORO_DEVICE": device, "KOKORO_DTYPE": dtype}
    common = {"backend": backend, "env": env, "model_dir": model_dir, "log": log, "startup_timeout_s": 600}
    with LiveServer(mode="sequential", name=f"{backend}/sequential", **common) as seq, \
            LiveServer(mode="concurrent", name=f"{backend}/concurrent", **common) as conc:
        before = conc.scrape()
        argv = ["--target", f"sequential={seq.ws_url}", "--target", f"concurrent={conc.ws_url}",
                "--pid", f"sequential={seq.proc.pid}", "--pid", f"concurrent={conc.proc.pid}",
                "--levels", ",".join(map(str, levels)), *(["--quick", "--runs", "1"] if quick else [])]
        result = compare_run(parse_args(argv), argv)
        view = prom.server_view(before, conc.scrape())
        memory = gpu_memory_mib([seq.proc.pid, conc.proc.pid])
        pings = {"sequential": seq.ping, "concurrent": conc.ping}
    result.command = "python -m benchmarks.gpu (server half): " + result.command
    result.server_view = {"concurrent": view}
    data = results.write(result, title=f"{TITLE} — {backend} on {device} ({dtype})", body=compare_report.body,
                         plot=compare_report.plot, out_dir=out_dir, stem=f"{stem}-server", log=log)
    # the sweep's figures the GPU result shows; every other row stays in <stem>-server.json
    kept = ("first_audio_ms_p50", "first_audio_ms_p95", "first_audio_ms_max", "audio_s_per_s", "errors", "rss_mib")
    sweeps = {name: data["summary"][name]["sweep"] for name in ("sequential", "concurrent")}
    by_mode = {name: {"sweep": {level: {k: lv.get(k) for k in kept} for level, lv in sweep.items()}}
               for name, sweep in sweeps.items()}
    return {"file": f"{stem}-server.json", "levels": list(levels), "by_mode": by_mode,
            "concurrent_batch_size": view["batch_size"], "gpu_memory_mib_by_pid": memory, "ping": pings}


def server_lines(server: dict[str, Any]) -> list[str]:
    """The GPU result's Markdown about the server half."""
    rows = [[mode, int(level), lv["first_audio_ms_p50"], lv["first_audio_ms_p95"], lv["audio_s_per_s"], lv["errors"],
             lv["rss_mib"]] for mode, v in server["by_mode"].items() for level, lv in v["sweep"].items()]
    batch = server["concurrent_batch_size"]
    return [
        "", f"Through the server (`compare`, WebSocket contract; full figures in `{server['file']}`):", "",
        results.markdown_table(["mode", "clients", "first audio p50 ms", "p95 ms", "audio-s/s", "errors", "RSS MiB"], rows),
        "", f"Batch sizes the concurrent server formed: mean {batch.get('mean')}, p50 {batch.get('p50')}, "
            f"p90 {batch.get('p90')} over {batch.get('count')} batches. GPU memory by server pid (MiB): "
            f"{server['gpu_memory_mib_by_pid'] or 'not read (no nvidia-smi)'}.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16", "auto"], default=None,
                        help="precision (default KOKORO_DTYPE, else auto: float16 on CUDA, float32 elsewhere)")
    parser.add_argument("--quick", action="store_true", help="a tiny run (levels 1,2,4; 2 requests each)")
    parser.add_argument("--levels", default=None, help="comma-separated concurrency levels")
    parser.add_argument("--requests-per-client", type=int, default=None)
    parser.add_argument("--max-batch", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--onnx", action="store_true", help="also time the ONNX runtime on the same segments")
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--no-server", action="store_true", help="skip the measurement through the server")
    parser.add_argument("--server-levels", default=None, help="the server sweep's levels (default 1,4,16,64; --quick 1,2)")
    parser.add_argument("--out", type=Path, default=results.RESULTS_DIR)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    import torch

    from backends.api import Segment
    from backends.assets.build import ModelFiles, default_model_dir
    from backends.config import BackendConfig
    from backends.factory import create_synthesizer, create_voices
    from backends.runtimes.torch import resolve_device
    from backends.text.g2p.frontends import EspeakG2P

    env_config = BackendConfig.from_env(os.environ)
    device = resolve_device(args.device)
    cuda = device.startswith("cuda")
    levels = tuple(int(x) for x in args.levels.split(",")) if args.levels else QUICK_LEVELS if args.quick else LEVELS
    per_client = args.requests_per_client or (2 if args.quick else 8 if cuda else 3)
    model_dir = args.model_dir or env_config.model_dir or default_model_dir()
    # the server's concurrent mode as the sweep builds it; its runtime is loaded once, used alone by the
    # batched-vs-single check and the real-time factor, then handed to the sweep's backend
    config = BackendConfig.defaults(
        backend="torch", mode="concurrent", device=device, dtype=args.dtype or env_config.dtype, threads=args.threads,
        max_batch_size=args.max_batch or (64 if cuda else 4), batch_on_cpu=not cuda, request_timeout_s=None,
        model_dir=model_dir, max_queue=max(64, 2 * max(levels)))
    device_name = torch.cuda.get_device_name(0) if cuda else results.machine_info()["cpu"]
    tag = "cuda-" + device_name.lower().replace("nvidia ", "").replace(" ", "-") if cuda else "cpu"
    result = results.Result(benchmark=f"gpu-{tag}", quick=args.quick, command="python -m benchmarks.gpu " + " ".join(
        argv if argv is not None else sys.argv[1:]))

    files = ModelFiles.discover(model_dir)
    voices = create_voices(config, files)  # as create_backend builds them: the sweep reuses the runtime
    g2p = EspeakG2P()
    texts = list(CLIPS[:4] if args.quick else CLIPS)  # sentence-sized, like a request's first segment
    segments = [Segment(text=t, phonemes=g2p.phonemize(t, "en-us"), voice=VOICE) for t in texts]

    t0 = time.perf_counter()
    synth = create_synthesizer(config, files, voices)
    synth.load()
    load_s = time.perf_counter() - t0
    _log(f"loaded {synth.model_name} on {device} ({device_name}) in {load_s:.1f}s")
    result.config.update(device=device, device_name=device_name, dtype=synth.dtype, checkpoint=synth.model_name,
                         levels=list(levels), requests_per_client=per_client, max_batch=config.max_batch_size,
                         texts=len(texts), voice=VOICE, torch_threads=torch.get_num_threads(), load_s=round(load_s, 2))

    # segments of different lengths, voices and speeds in one batch
    mixed = [Segment(text=t, phonemes=g2p.phonemize(t, "en-us"), voice=v, speed=s) for t, v, s in zip(
        CLIPS[: (2 if args.quick else 8)], ["jm_kumo", "jf_alpha", "jf_nezumi"] * 3, [1.0, 1.2, 0.9] * 3, strict=False)]
    check = result.summary["batched_vs_single"] = check_batched_vs_single(synth, mixed)
    _log(f"batched vs single ({check['batch_size']}): ok={check['ok']}, batch {check['batch_s']}s "
         f"vs singles {check['singles_s']}s")
    result.target("batched equals single", "identical durations, log-mel < 0.5 dB", check["ok"], check["ok"])
    # warm already: the check above ran batched and single calls on it
    result.summary["torch_single_rtf"] = rtf(synth.synthesize, segments[: 1 if args.quick else 3], warm_up=False)["rtf"]
    if args.onnx:
        onnx = create_synthesizer(BackendConfig.defaults(backend="onnx", threads=args.threads), files, voices)
        onnx.load()
        result.summary["onnx"] = rtf(onnx.synthesize, segments[:3])

    # the concurrent backend runs on the runtime loaded above (same config: loaded once, held once in GPU
    # memory); the servers of the server half load their own
    result.samples = asyncio.run(sweep(config, texts, levels, per_client, voice=VOICE, log=_log, synthesizer=synth))
    best = max(result.samples, key=lambda s: s["audio_s_per_s"])
    best_within = max((s["audio_s_per_s"] for s in result.samples if s["first_audio_ms_p95"] <= GOAL_P95_MS),
                      default=None)
    result.medians = {"best_audio_s_per_s": best["audio_s_per_s"], "best_at_concurrency": best["concurrency"]}
    result.target("audio-seconds per second with p95 first audio <= 150 ms (H200-class GPU)",
                  f">= {GOAL_AUDIO_S_PER_S:.0f}", best_within,
                  None if not cuda else (best_within is not None and best_within >= GOAL_AUDIO_S_PER_S))
    if not cuda:
        result.notes.append("CPU run: the throughput goal applies to a GPU; recorded for comparison only")
    mib = 1 << 20  # what this process held on the GPU at its peak, and the device's total
    result.config["gpu_memory_mib"] = {
        "max_allocated": round(torch.cuda.max_memory_allocated() / mib, 1),
        "max_reserved": round(torch.cuda.max_memory_reserved() / mib, 1),
        "device_total": round(torch.cuda.get_device_properties(0).total_memory / mib, 1)} if cuda else None
    if not args.no_server:
        result.summary["server"] = server_half(
            device=device, dtype=config.dtype, quick=args.quick, model_dir=model_dir, out_dir=args.out,
            stem=result.benchmark, log=_log,
            levels=tuple(int(x) for x in args.server_levels.split(",")) if args.server_levels else None)
    data = results.write(result, title=f"PyTorch runtime on {device_name}", body=_body, out_dir=args.out, log=_log)
    return 0 if data["summary"]["batched_vs_single"]["ok"] else 1


def _body(data: dict[str, Any]) -> str:
    c, s, check = data["config"], data["summary"], data["summary"]["batched_vs_single"]
    rows = [[x["concurrency"], x["requests"], x["audio_s_per_s"], x["first_audio_ms_p50"], x["first_audio_ms_p95"],
             x["mean_batch"]] for x in data["samples"]]
    text = [
        f"Device: {c['device_name']} ({c['device']}), dtype {c['dtype']}, max batch {c['max_batch']}; "
        f"GPU memory (MiB): {c.get('gpu_memory_mib') or 'n/a (CPU)'}.\n",
        "Closed-loop clients (zero think time) against the server's concurrent mode in process "
        "(`create_backend`): its scheduler forms the batches; each request is one sentence.", "",
        results.markdown_table(["clients", "requests", "audio-s/s", "first audio p50 ms", "p95 ms", "mean batch"], rows),
        "",
        f"Batched vs single ({check['batch_size']} segments): {'equal within tolerance' if check['ok'] else 'MISMATCH'}; "
        f"batch {check['batch_s']} s vs one at a time {check['singles_s']} s ({check['batch_speedup']}x).",
        f"Single-segment real-time factor: {s['torch_single_rtf']}.",
    ]
    if "onnx" in s:
        text.append(f"ONNX runtime on the same segments: RTF {s['onnx']['rtf']}.")
    if "server" in s:
        text += server_lines(s["server"])
    return "\n".join(text)


if __name__ == "__main__":
    raise SystemExit(main())
