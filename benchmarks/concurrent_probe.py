"""Throughput at N concurrent sessions: sequential vs concurrent mode on the ONNX runtime (CPU).

    python -m benchmarks.concurrent_probe [--runtime onnx|torch] [--sessions 4] [--rounds 3] [--quick]

Each session sends its requests one after another (the next when the previous is fully answered),
all sessions at once. Configurations (``mode/workers x intra-op threads``) run interleaved, round
after round, so a noisy shared machine hurts them alike; the medians are reported. Throughput is
audio-seconds produced per wall-clock second. Writes
``benchmarks/results/concurrent_probe_<runtime>.json`` and ``.md``. The torch runtime runs on CPU
(one worker): concurrent mode's default there (single calls) and forced batching (``batch_on_cpu``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path

from backends.assets import ModelFiles, default_model_dir
from backends.base import SynthesisRequest
from backends.concurrent import BatchedBackend
from backends.config import BackendConfig
from backends.g2p import EspeakG2P
from backends.onnx_runtime import OnnxSynthesizer, load_vocab
from backends.sequential import SequentialBackend
from backends.text import TextPipeline
from backends.voices import VoiceStore

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


def make_synth(runtime: str, files: ModelFiles, voices: VoiceStore, threads: int):
    if runtime == "torch":
        from backends.torch_runtime import TorchSynthesizer

        synth = TorchSynthesizer(files.root, voices, device="cpu", threads=threads)
    else:
        synth = OnnxSynthesizer(files, voices, threads=threads)
    synth.load()
    return synth


async def one_run(backend, sessions: int, per_session: int) -> dict:
    async def session(s: int) -> tuple[float, list[float]]:
        audio, ttfa = 0.0, []
        for r in range(per_session):
            request = SynthesisRequest(text=TEXTS[(s + r) % len(TEXTS)], session=f"s{s}", voice="jm_kumo")
            t0 = time.perf_counter()
            request = await backend.prepare(request)
            async for chunk in backend.stream(request):
                if chunk.index == 0:
                    ttfa.append(time.perf_counter() - t0)
                audio += chunk.seconds
        return audio, ttfa

    t0, cpu0 = time.perf_counter(), time.process_time()
    done = await asyncio.gather(*(session(s) for s in range(sessions)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    audio = sum(a for a, _ in done)
    ttfas = sorted(t for _, ts in done for t in ts)
    return {
        "audio_s": audio, "wall_s": wall, "cpu_s": cpu, "audio_per_wall": audio / wall,
        # CPU seconds this process spent per audio second (all threads): the cost of a configuration
        # with contention from other processes mostly factored out; cpu/wall = cores it really got.
        "cpu_per_audio": cpu / audio, "cores_used": cpu / wall, "ttfa_p50_s": statistics.median(ttfas),
    }


async def main(args: argparse.Namespace) -> dict:
    files = ModelFiles.discover(Path(BackendConfig.from_env(os.environ).model_dir or default_model_dir()))
    voices = VoiceStore.from_path(files.voices)
    pipeline = TextPipeline(EspeakG2P().phonemize, load_vocab(files.config))
    cpus = os.cpu_count() or 1
    chosen = configs(args.runtime, cpus, args.sessions)
    synths: dict[int, object] = {}
    for _, _, threads, _ in chosen.values():
        if threads not in synths:
            synths[threads] = make_synth(args.runtime, files, voices, threads)
    samples: dict[str, list[dict]] = {name: [] for name in chosen}
    for rnd in range(args.rounds):
        for name, (mode, workers, threads, batch) in chosen.items():
            if args.runtime == "torch":
                import torch

                torch.set_num_threads(threads)  # process-wide in torch
            forced = args.runtime == "torch" and name.startswith("concurrent batch")
            config = BackendConfig.defaults(
                mode=mode, max_queue=256, request_timeout_s=None, workers=workers, max_batch_size=batch,
                batch_on_cpu=forced,
            )
            cls = SequentialBackend if mode == "sequential" else BatchedBackend
            backend = cls(synths[threads], pipeline, voices, config)
            warm = await backend.prepare(SynthesisRequest(text="Warming up.", voice="jm_kumo"))
            async for _ in backend.stream(warm):
                pass
            result = await one_run(backend, args.sessions, args.per_session)
            await backend.aclose()
            samples[name].append(result)
            print(f"round {rnd + 1} {name:22s} {result['audio_per_wall']:.2f} audio-s/s "
                  f"(audio {result['audio_s']:.1f}s in {result['wall_s']:.1f}s, "
                  f"{result['cpu_per_audio']:.2f} cpu-s/audio-s on {result['cores_used']:.2f} cores, "
                  f"ttfa p50 {result['ttfa_p50_s'] * 1000:.0f} ms, load {os.getloadavg()[0]:.1f})", flush=True)
    keys = ("audio_per_wall", "cpu_per_audio", "cores_used", "ttfa_p50_s")
    medians = {name: {k: statistics.median(s[k] for s in runs) for k in keys} for name, runs in samples.items()}
    import onnxruntime

    return {
        "name": f"concurrent_probe_{args.runtime}",
        "machine": {"cpus": cpus, "platform": platform.platform(), "load_avg_at_end": os.getloadavg()},
        "versions": {"onnxruntime": onnxruntime.__version__, "python": platform.python_version()},
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
        f"{cfg['rounds']} rounds, {report['machine']['cpus']} CPUs",
        "",
        f"(load average at the end: {report['machine']['load_avg_at_end'][0]:.1f})",
        "",
        "| configuration (workers x intra-op threads) | audio-s per wall-s | CPU-s per audio-s | cores used "
        "| TTFA p50 (ms) |",
        "|---|---|---|---|---|",
    ]
    for name, m in report["medians"].items():
        lines.append(f"| {name} | {m['audio_per_wall']:.2f} | {m['cpu_per_audio']:.2f} | {m['cores_used']:.2f} "
                     f"| {m['ttfa_p50_s'] * 1000:.0f} |")
    lines += ["", "Medians over the rounds. CPU-s per audio-s is this process's CPU time (all threads) per second "
              "of audio: what a configuration costs, mostly independent of other load on the machine."]
    return "\n".join(lines) + "\n"


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=("onnx", "torch"), default="onnx")
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--per-session", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round, one request per session")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.per_session = 1, 1
    report = asyncio.run(main(args))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{report['name']}.json").write_text(json.dumps(report, indent=2))
    (RESULTS / f"{report['name']}.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    cli()
