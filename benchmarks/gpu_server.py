"""The GPU benchmark's second half: ``compare`` against a sequential and a concurrent local torch
server on the same device and precision (:class:`benchmarks.live.LiveServer`; blocking), with the
batches the concurrent one formed and the GPU memory each holds (docs/benchmarks.md, "GPU").
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from . import prom, results
from .compare import TITLE, parse_args
from .compare import report as compare_report
from .compare import run as compare_run
from .live import LiveServer

SERVER_LEVELS = (1, 4, 16, 64)
QUICK_SERVER_LEVELS = (1, 2)


def gpu_memory_mib(pids: list[int]) -> dict[str, float] | None:
    """Memory each of ``pids`` holds on the GPU (``nvidia-smi``), None where that cannot be read."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):  # no nvidia-smi here
        return None
    rows = [line.split(",", 1) for line in out.splitlines() if "," in line]
    return {pid.strip(): float(mib.strip() or 0) for pid, mib in rows if pid.strip().isdigit() and int(pid) in pids}


def measure(*, device: str, dtype: str, quick: bool, model_dir: Path | None, out_dir: Path, stem: str,
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
    kept = ("first_audio_ms_p50", "first_audio_ms_p95", "first_audio_ms_max", "audio_s_per_s", "errors", "rss_mib")
    by_mode = {}
    for name in ("sequential", "concurrent"):
        s = data["summary"][name]
        by_mode[name] = {"sweep": {level: {k: lv.get(k) for k in kept} for level, lv in s["sweep"].items()},
                         "one_sentence_first_audio_ms": s["one_sentence"].get("first_audio_ms"),
                         "paragraph_first_audio_ms": s["paragraph"].get("first_audio_ms"), "rss_mib_max": s["rss_mib_max"]}
    return {"file": f"{stem}-server.json", "levels": list(levels), "by_mode": by_mode,
            "concurrent_batch_size": view["batch_size"], "gpu_memory_mib_by_pid": memory, "ping": pings}


def body_lines(server: dict[str, Any]) -> list[str]:
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
