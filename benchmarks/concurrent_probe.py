"""Throughput at N concurrent sessions, each sending its requests one after another, for the engine's
configurations (``mode/workers x intra-op threads``; the torch runtime on CPU: one worker, single
calls vs forced batching), each built in process by ``create_backend`` (:mod:`benchmarks.inprocess`):
``python -m benchmarks concurrent_probe [--quick] [--backend onnx|torch|fake]``. The configurations take
turns round after round (the first rotating); the rounds' medians of audio-seconds per wall-second and
CPU-seconds per audio-second go to ``benchmarks/results/concurrent_probe_<runtime>.{json,md}``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from backends.config import BackendConfig

from . import results
from .inprocess import sweep
from .loop import in_rounds
from .texts import THROUGHPUT_TEXTS

TEXTS = THROUGHPUT_TEXTS[:4]  # two sentences each


def configs(runtime: str, cpus: int, sessions: int) -> dict[str, tuple[str, int, int, int]]:
    """name -> (mode, workers, intra-op threads, max batch size)."""
    if runtime == "torch":  # one worker (not thread-safe); batches of one vs batches across sessions
        return {
            f"sequential 1x{cpus}": ("sequential", 1, cpus, 1),
            f"concurrent default 1x{cpus}": ("concurrent", 1, cpus, 16),  # single calls on CPU
            f"concurrent batch<={sessions} 1x{cpus}": ("concurrent", 1, cpus, sessions),  # batch_on_cpu
        }
    return {
        f"sequential 1x{cpus}": ("sequential", 1, cpus, 1),
        "sequential 1x1": ("sequential", 1, 1, 1),
        f"concurrent 1x{cpus}": ("concurrent", 1, cpus, 1),
        f"concurrent {cpus}x1": ("concurrent", cpus, 1, 1),
        f"concurrent {cpus}x{cpus}": ("concurrent", cpus, cpus, 1),
    }


def run(*, quick: bool = False, model_dir=None, log=print, backend: str = "onnx") -> results.Result:
    """4 sessions, 2 requests each, 3 rounds (``quick``: 1 request, 1 round)."""
    sessions, per_session, rounds = 4, 1 if quick else 2, 1 if quick else 3
    cpus = os.cpu_count() or 1
    chosen = configs(backend, cpus, sessions)
    command = results.command_line("concurrent_probe", quick)
    result = results.Result(f"concurrent_probe_{backend}", quick, command, config={
        "runtime": backend, "sessions": sessions, "per_session": per_session, "rounds": rounds,
        "configs": {k: dict(zip(("mode", "workers", "threads", "max_batch_size"), v, strict=True))
                    for k, v in chosen.items()}})

    async def measure(name: str) -> dict[str, Any]:
        mode, workers, threads, batch = chosen[name]
        config = BackendConfig.defaults(
            backend=backend, mode=mode, device="cpu", threads=threads, workers=workers, max_batch_size=batch,
            batch_on_cpu=backend == "torch" and name.startswith("concurrent batch"), max_queue=256,
            request_timeout_s=None, model_dir=model_dir)
        return (await sweep(config, TEXTS, (sessions,), per_session, voice="jm_kumo"))[0]

    result.samples = asyncio.run(in_rounds(list(chosen), rounds, measure, key="config", log=log))
    result.medians = results.medians_by(result.samples, "config", {
        "audio_s_per_s": 2, "cpu_s_per_audio_s": 3, "cores_used": 2, "first_audio_ms_p50": 1})
    result.notes.append("Medians over the rounds. CPU-s per audio-s is this process's CPU time (all threads) per "
                        "second of audio: what a configuration costs, mostly independent of other load on the machine.")
    return result


def body(data: dict) -> str:
    cfg = data["config"]
    rows = [[name, m["audio_s_per_s"], m["cpu_s_per_audio_s"], m["cores_used"], m["first_audio_ms_p50"]]
            for name, m in data["medians"].items()]
    return (f"{data['config']['runtime']}: {cfg['sessions']} sessions x {cfg['per_session']} requests, {cfg['rounds']} "
            f"rounds, {data['machine']['cpu_count']} CPUs.\n\n" + results.markdown_table(
                ["configuration (workers x intra-op threads)", "audio-s per wall-s", "CPU-s per audio-s", "cores used",
                 "TTFA p50 (ms)"], rows))
