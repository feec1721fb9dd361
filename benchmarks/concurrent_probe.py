"""Throughput at N concurrent sessions: sequential vs concurrent mode on the ONNX runtime (CPU).

    python -m benchmarks concurrent_probe [--runtime onnx|torch|fake] [--out DIR] [--sessions 4] [--rounds 3] [--quick]

Each session sends its requests one after another (the next when the previous is fully answered),
all sessions at once. Configurations (``mode/workers x intra-op threads``) run interleaved, round
after round, so a noisy shared machine hurts them alike; the medians are reported. Throughput is
audio-seconds produced per wall-clock second. Writes
``benchmarks/results/concurrent_probe_<runtime>.json`` and ``.md``. The torch runtime runs on CPU
(one worker): concurrent mode's default there (single calls) and forced batching (``batch_on_cpu``).
Each configuration is a backend built by ``create_backend``, as the server builds it
(:mod:`benchmarks.inprocess`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
from pathlib import Path

from backends.config import BackendConfig

from . import results
from .inprocess import closed_loop, started

TEXTS = [
    "The weather today is mild, with a light breeze from the west. Expect clear skies by the evening.",
    "Your order has shipped, and it should arrive on Thursday. You can track it from your account page.",
    "Thanks for calling, a member of our team will be with you shortly. Please stay on the line.",
    "The meeting moved to three o'clock in the small room. Bring the slides from last week.",
]
RESULTS = Path(__file__).parent / "results"


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


async def probe(args: argparse.Namespace) -> dict:
    cpus = os.cpu_count() or 1
    chosen = configs(args.runtime, cpus, args.sessions)
    samples: dict[str, list[dict]] = {name: [] for name in chosen}
    for rnd in range(args.rounds):
        for name, (mode, workers, threads, batch) in chosen.items():
            config = BackendConfig.defaults(
                backend=args.runtime, mode=mode, device="cpu", threads=threads, workers=workers,
                max_batch_size=batch, batch_on_cpu=args.runtime == "torch" and name.startswith("concurrent batch"),
                max_queue=256, request_timeout_s=None, model_dir=BackendConfig.from_env(os.environ).model_dir,
            )
            async with started(config) as backend:
                result = await closed_loop(backend, TEXTS, args.sessions, args.per_session, voice="jm_kumo")
            samples[name].append(result)
            print(f"round {rnd + 1} {name:22s} {result['audio_s_per_s']:.2f} audio-s/s "
                  f"(audio {result['audio_s']:.1f}s in {result['wall_s']:.1f}s, "
                  f"{result['cpu_s_per_audio_s']:.2f} cpu-s/audio-s on {result['cores_used']:.2f} cores, "
                  f"ttfa p50 {result['first_audio_ms_p50']:.0f} ms, load {os.getloadavg()[0]:.1f})", flush=True)
    keys = ("audio_s_per_s", "cpu_s_per_audio_s", "cores_used", "first_audio_ms_p50")
    medians = {name: {k: statistics.median(s[k] for s in runs) for k in keys} for name, runs in samples.items()}
    return {
        "name": f"concurrent_probe_{args.runtime}",
        "machine": results.machine_info(), "versions": results.versions(), "load_average": results.load_average(),
        "runtime": args.runtime,
        "config": {"sessions": args.sessions, "per_session": args.per_session, "rounds": args.rounds,
                   "configs": {k: dict(zip(("mode", "workers", "threads", "max_batch_size"), v, strict=True))
                               for k, v in chosen.items()}},
        "samples": samples,
        "medians": medians,
    }


def markdown(report: dict) -> str:
    cfg = report["config"]
    lines = [
        f"# concurrent_probe ({report['runtime']}) — {cfg['sessions']} sessions x {cfg['per_session']} requests, "
        f"{cfg['rounds']} rounds, {report['machine']['cpu_count']} CPUs",
        "",
        f"(load average at the end: {report['load_average']})",
        "",
        "| configuration (workers x intra-op threads) | audio-s per wall-s | CPU-s per audio-s | cores used "
        "| TTFA p50 (ms) |",
        "|---|---|---|---|---|",
    ]
    for name, m in report["medians"].items():
        lines.append(f"| {name} | {m['audio_s_per_s']:.2f} | {m['cpu_s_per_audio_s']:.2f} | {m['cores_used']:.2f} "
                     f"| {m['first_audio_ms_p50']:.0f} |")
    lines += ["", "Medians over the rounds. CPU-s per audio-s is this process's CPU time (all threads) per second "
              "of audio: what a configuration costs, mostly independent of other load on the machine."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks concurrent_probe", description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", "--backend", dest="runtime", choices=("onnx", "torch", "fake"), default="onnx")
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--per-session", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round, one request per session")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.per_session = 1, 1
    report = asyncio.run(probe(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{report['name']}.json").write_text(json.dumps(report, indent=2))
    (args.out / f"{report['name']}.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
