"""``python -m benchmarks <suite> [--quick] [--backend fake|onnx|torch]``, the one entry point of the
benchmarks (``--help`` lists every suite; compare and gpu take options of their own).
Each writes ``benchmarks/results/<name>.{json,md,png}`` (``--quick``: ``benchmarks/results/quick/``,
which git ignores, so a short run never replaces the full results docs/benchmarks.md quotes); ``all``
runs every suite in turn and carries on past one that fails (exit status 1 at the end).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys
import time
import traceback
from pathlib import Path

from backends.config import BackendConfig

from . import results

TITLES = {
    "ttfa": "Time to first audio: batch vs streaming (267-character paragraph)",
    "throughput": "Throughput: audio-hours per hour by concurrency",
    "payload": "Payload size by wire format",
    "overhead": "Serving overhead vs the raw runtime",
    "quality": "Speech quality: streamed audio against one reading of the whole text",
    "e2e": "End to end: first audio through the agent, bidi vs batch vs bidi without the early first clause",
    "languages": "Languages: each G2P front end's cost; English intelligibility, espeak-ng vs misaki",
    "agentproto": "Voice-agent protocols: first audio from a token stream (server vs client cutting), Clear to silence",
    "telephony": "Telephony: 8 kHz mu-law and A-law against 8 kHz and 24 kHz PCM of the same sentences (pocketsphinx)",
    "onnx_durations": "Word timings on ONNX: the timed model vs today's export (speed, sameness, intelligibility)",
    "onnx_vnni": "ONNX on a CPU with VNNI: the int8 convolutions as integer matrix products vs the plain graphs "
                 "(CPU per segment, the same audio)",
    "word_timings": "Word timings' cost: CPU of a timed request against the same request untimed, in process",
    "overload": "Overload and stalled readers: a newcomer behind late streams, admit vs refuse",
    "windowed_decoder": "Early cuts that keep the sentence's prosody: the decoder over a window of the whole sentence",
    "load": "Load: pipelined sessions, ordering and /ping under load",
    "soak": "Soak: memory over 1,000 mixed requests, and over 1,000 streaming turns with barge-ins",
    "churn": "Churn: 100,000 short sessions over every route (cancels, barge-ins, vanishing clients): memory, "
             "tables at rest, unanswered requests",
    "fuzz": "Fuzz: 10,000 random and malformed frames at each WebSocket protocol (typed answers, sessions and "
            "/ping stay up)",
    "capacity": "Capacity: the highest voice-agent load within a p95 first-audio target, and the autoscaling target",
    "concurrent_probe": "The engine's configurations in process (mode, workers x intra-op threads): audio and CPU "
                        "per audio second",
}
NAMES = tuple(TITLES)


#: Suites with options of their own (``python -m benchmarks <name> --help``), each with ``--quick``.
OWN_OPTIONS = {
    "compare": ("benchmarks.compare", "running servers side by side, by URL: "
                "python -m benchmarks compare --target NAME=URL ... (see its --help)"),
    "gpu": ("benchmarks.gpu", "the PyTorch runtime on one device (the GPU run): batched vs single, throughput and "
            "first audio through the server's concurrent mode"),
}


def suites_help() -> str:
    """The epilog of ``--help``: every suite, ``all``, ``compare`` and the modules run on their own."""
    rows = [f"  {name:<11} {title}" for name, title in TITLES.items()]
    rows.append(f"  {'all':<11} every suite above in turn (carries on past a failure; exit status 1 at the end)")
    rows += ["", "with options of their own (python -m benchmarks NAME --help; each takes --quick):"]
    rows += [f"  {name:<11} {what}" for name, (_module, what) in OWN_OPTIONS.items()]
    return "suites:\n" + "\n".join(rows) + "\n\n--quick writes to benchmarks/results/quick/ (ignored by git)."


#: The modules of the ``bench`` extra, by the name they are imported as.
BENCH_MODULES = {"httpx": "httpx", "psutil": "psutil", "matplotlib": "matplotlib", "soundfile": "soundfile",
                 "pocketsphinx": "pocketsphinx", "parselmouth": "praat-parselmouth"}
BENCH_INSTALL = "pip install -e '.[bench]'"


def missing_package(name: str, error: ModuleNotFoundError) -> str:
    """One line for a suite that needs a package this interpreter lacks: what and how to install it."""
    top = (error.name or "").split(".")[0]
    if top in BENCH_MODULES:
        return (f"{name} needs {BENCH_MODULES[top]}, which is not installed: {BENCH_INSTALL} (the benchmarks' "
                "extra, no torch; docs/benchmarks.md)")
    from backends.startup import install_hint

    return f"{name}: " + (install_hint(error) or f"{error}; {BENCH_INSTALL} installs what the suites need")


def _log(msg: str) -> None:
    print(msg, flush=True)


def _takes_backend(name: str) -> bool:
    return "backend" in inspect.signature(importlib.import_module(f"benchmarks.{name}").run).parameters


#: Options of one suite: ``--flag`` -> (the suite, its ``run()`` keyword, argparse settings).
SUITE_OPTIONS: dict[str, tuple[str, str, dict]] = {
    "--requests": ("soak", "requests", {"type": int, "help": "soak: requests per run (default 1,000; --quick 100 on "
                                                              "the fake runtime, 40 on onnx)"}),
    "--allocator": ("soak", "allocators", {"action": "append", "choices": ["default", "arena2"],
                                           "help": "soak: glibc's default allocator or MALLOC_ARENA_MAX=2 (default both; "
                                                   "repeat for both)"}),
    "--workload": ("soak", "workloads", {"action": "append", "choices": ["mixed", "streaming"],
                                         "help": "soak: mixed requests or streaming turns with barge-ins (default both; "
                                                 "streaming alone writes soak_streaming.json)"}),
    "--turns": ("soak", "turns", {"type": int, "help": "soak: streaming turns per run (default 1,000; --quick 200 on "
                                                       "the fake runtime, 40 on onnx)"}),
    "--runtime": ("windowed_decoder", "runtime", {"choices": ["torch", "onnx"],
                                                  "help": "windowed_decoder: the runtime measured (default torch)"}),
    "--target-ms": ("capacity", "target_ms", {"type": float, "help": "capacity: the p95 first audio a level must "
                                                                       "keep, ms (default 300)"}),
    "--mode": ("soak", "mode", {"choices": ["sequential", "concurrent"], "help": "soak: the server's mode "
                                                                                  "(default sequential)"}),
    "--frames": ("fuzz", "frames", {"type": int, "help": "fuzz: frames per protocol (default 10,000; --quick 300)"}),
    "--warmup": ("churn", "warmup", {"type": float, "help": "churn: the share of the sessions counted as warm-up, "
                                                          "before RSS growth is measured (default 0.1)"}),
    "--sessions": ("churn", "sessions", {"type": int, "help": "churn: sessions per run (default 100,000 on the fake "
                                                              "runtime, --quick 1,000; 2,000 on onnx, --quick 200)"}),
}


def _suite_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[dict, list[str]]:
    """The suite's own options given (for its ``run()``) and as they read on its command line."""
    options, shown = {}, []
    for flag, (suite, dest, _settings) in SUITE_OPTIONS.items():
        if (value := getattr(args, dest)) is not None:
            if args.name != suite:
                parser.error(f"{flag} is an option of {suite}")
            options[dest] = value
            shown += [part for one in (value if isinstance(value, list) else [value]) for part in (flag, str(one))]
    return options, shown


def run_one(name: str, *, quick: bool, model_dir: Path | None, out_dir: Path, backend: str | None = None,
            deployed: dict | None = None, options: dict | None = None, shown: tuple[str, ...] = ()) -> dict:
    """Run one benchmark; ``deployed`` (e2e's deployed agent), ``backend`` (to the suites that take one)
    and ``options`` (``shown`` on its command line) go to the suite."""
    module = importlib.import_module(f"benchmarks.{name}")
    options = {**(deployed or {}), **(options or {})}
    if backend and _takes_backend(name):
        options["backend"] = backend
        shown = ("--backend", backend, *shown)
    t0 = time.perf_counter()
    _log(f"== {name} ({'quick' if quick else 'full'}) ==")
    result = module.run(quick=quick, model_dir=model_dir, log=_log, **options)
    if options.get("backend") == "fake":
        result.judge_harness_only()
    if shown:
        result.command += " " + results.shown_command(list(shown))
    result.config.setdefault("benchmark_wall_s", round(time.perf_counter() - t0, 1))
    data = results.write(
        result, title=TITLES[name], body=module.body, plot=getattr(module, "plot", None), out_dir=out_dir, log=_log
    )
    if data["config"].get("harness_only"):
        _log(f"  {results.HARNESS_ONLY}")
    for t in data["targets"]:
        _log(f"  target {t['name']}: {t['value']} (goal {t['goal']}) — {results.verdict(t)}")
    _log(f"== {name} done in {time.perf_counter() - t0:.0f} s ==")
    return data


def render(name: str, out_dir: Path) -> None:
    """Rewrite the Markdown table and the PNG of each existing result of suite ``name`` — ``<name>.json``
    and the files it writes per runtime or workload, ``<name>_<kind>.json`` (the JSON is left as it is)."""
    module = importlib.import_module(f"benchmarks.{name}")
    for path in sorted([out_dir / f"{name}.json", *out_dir.glob(f"{name}_*.json")]):
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        if data.get("benchmark") != path.stem:  # another suite's file that shares the prefix
            continue
        results.render(data, out_dir, path.stem, title=TITLES[name], body=module.body, plot=getattr(module, "plot", None))
        _log(f"rendered {out_dir / path.stem}.md from {path.name}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except ModuleNotFoundError as e:  # a suite's module could not even be imported
        name = next((a for a in argv if a in (*NAMES, "all", *OWN_OPTIONS)), "the benchmarks")
        print(f"python -m benchmarks: {missing_package(name, e)}", file=sys.stderr)
        return 2


def _main(argv: list[str]) -> int:
    if argv[:1] and argv[0] in OWN_OPTIONS:  # their own options, their own --help
        module = importlib.import_module(OWN_OPTIONS[argv[0]][0])
        return int(module.main(argv[1:]) or 0)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run one of the project's benchmarks (or all of them); each writes "
        "benchmarks/results/<name>.json, .md and, where a picture helps, .png.",
        epilog=suites_help(),
    )
    parser.add_argument("name", choices=[*NAMES, "all", *OWN_OPTIONS], help="the benchmark to run (see below)")
    parser.add_argument("--quick", action="store_true", help="a short run (fewer runs, levels and clips)")
    parser.add_argument("--model-dir", type=Path, default=None, help="model directory (default: KOKORO_MODEL_DIR or the user cache)")
    parser.add_argument("--out", type=Path, default=None, help="where the result files go (default "
                        "benchmarks/results, or benchmarks/results/quick with --quick)")
    parser.add_argument("--render-only", action="store_true",
                        help="rewrite <name>.md and .png from the existing <name>.json (and a per-runtime <name>_<kind>.json) without running anything")
    parser.add_argument("--backend", choices=["fake", "onnx", "torch"], default=None,
                        help="the runtime of the servers a suite starts, where it takes one (every suite but quality, "
                        "languages, telephony, onnx_durations, onnx_vnni and windowed_decoder, which measure the model's own output); "
                        "fake checks a suite's harness without the model")
    parser.add_argument("--agent-url", default=None, help="e2e: a running agent app (nothing is started)")
    parser.add_argument("--agent-runtime-arn", default=None,
                        help="e2e: a Bedrock AgentCore runtime, through invoke_agent_runtime (nothing is started)")
    parser.add_argument("--region", default=None, help="e2e: the AgentCore runtime's region (default: from the ARN)")
    for flag, (_suite, dest, settings) in SUITE_OPTIONS.items():
        parser.add_argument(flag, dest=dest, default=None, **settings)
    args = parser.parse_args(argv)
    suite_options, shown = _suite_options(parser, args)
    if args.name in OWN_OPTIONS:
        parser.error(f"{args.name} takes its own options first: python -m benchmarks {args.name} --help")
    deployed = {k: getattr(args, k) for k in ("agent_url", "agent_runtime_arn", "region") if getattr(args, k)}
    if deployed and args.name != "e2e":
        parser.error("--agent-url, --agent-runtime-arn and --region are options of e2e")
    if args.backend and args.name != "all" and not _takes_backend(args.name):
        parser.error(f"{args.name} measures the model's own output and takes no --backend (an option of "
                     f"{', '.join(n for n in NAMES if _takes_backend(n))})")
    if args.out is None:
        # Quick runs never overwrite the full results docs/benchmarks.md quotes.
        args.out = results.RESULTS_DIR / "quick" if args.quick else results.RESULTS_DIR
    names = NAMES if args.name == "all" else (args.name,)
    if args.render_only:
        for name in names:
            render(name, args.out)
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return run_suites(names, args, deployed, suite_options, tuple(shown))


def run_suites(names: tuple[str, ...], args: argparse.Namespace, deployed: dict, suite_options: dict,
               shown: tuple[str, ...]) -> int:
    """Run ``names`` in turn, past a failure; 1 when any failed or could not run."""
    model_dir = args.model_dir or BackendConfig.from_env(os.environ).model_dir
    failed = []
    t0 = time.perf_counter()
    for name in names:
        try:
            data = run_one(name, quick=args.quick, model_dir=model_dir, out_dir=args.out, backend=args.backend,
                           deployed=deployed, options=suite_options, shown=shown)
            if data.get("status") != "ok":
                failed.append(name)
        except ModuleNotFoundError as e:
            if len(names) == 1:
                raise
            _log(f"== {name} not run: {missing_package(name, e)} ==")
            failed.append(name)
        except Exception:  # the next suite still runs; Ctrl-C (not an Exception) stops them all
            traceback.print_exc()
            _log(f"== {name} FAILED ==")
            failed.append(name)
    if len(names) > 1:
        _log(f"all done in {time.perf_counter() - t0:.0f} s" + (f"; failed or not run: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
