"""Throughput at N concurrent sessions, each sending its requests one after another, for the engine's
configurations (``mode/workers x intra-op threads``; the torch runtime on CPU: one worker, single
calls vs forced batching), each built in process by ``create_backend`` (:mod:`benchmarks.inprocess`).

    python -m benchmarks concurrent_probe [--runtime onnx|torch|fake] [--out DIR] [--sessions 4] [--rounds 3] [--quick]

The configurations take turns round after round (the first rotating); the rounds' medians of
audio-seconds per wall-second and CPU-seconds per audio-second go to
``benchmarks/results/concurrent_probe_<runtime>.{json,md}`` (``--quick``: under ``quick/``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
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


def probe(args: argparse.Namespace) -> results.Result:
    cpus = os.cpu_count() or 1
    chosen = configs(args.runtime, cpus, args.sessions)
    result = results.Result(f"concurrent_probe_{args.runtime}", args.quick, results.command_line(
        "concurrent_probe", args.quick, ["--runtime", args.runtime]), config={
        "runtime": args.runtime, "sessions": args.sessions, "per_session": args.per_session, "rounds": args.rounds,
        "configs": {k: dict(zip(("mode", "workers", "threads", "max_batch_size"), v, strict=True))
                    for k, v in chosen.items()}})
    model_dir = BackendConfig.from_env(os.environ).model_dir

    async def measure(name: str) -> dict[str, Any]:
        mode, workers, threads, batch = chosen[name]
        config = BackendConfig.defaults(
            backend=args.runtime, mode=mode, device="cpu", threads=threads, workers=workers, max_batch_size=batch,
            batch_on_cpu=args.runtime == "torch" and name.startswith("concurrent batch"), max_queue=256,
            request_timeout_s=None, model_dir=model_dir)
        return (await sweep(config, TEXTS, (args.sessions,), args.per_session, voice="jm_kumo"))[0]

    result.samples = asyncio.run(in_rounds(list(chosen), args.rounds, measure, key="config"))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks concurrent_probe", description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", "--backend", dest="runtime", choices=("onnx", "torch", "fake"), default="onnx")
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--per-session", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round, one request per session")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the result files go (default benchmarks/results, --quick: benchmarks/results/quick)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.per_session = 1, 1
    out = args.out or (results.RESULTS_DIR / "quick" if args.quick else results.RESULTS_DIR)
    result = probe(args)
    results.write(result, title=f"concurrent_probe ({args.runtime}): the engine's configurations in process",
                  body=body, out_dir=out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
