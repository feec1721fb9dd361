"""``python -m benchmarks compare``: any running TTS deployments side by side, on identical work.

    python -m benchmarks compare --target NAME=URL[#voice=V&lang=L&format=wav] [--target ...] [--voice V]
                                 [--api-key K] [--quick] [--out FILE.json] [--pid NAME=PID]
    python -m benchmarks compare --backend fake|onnx|torch [--target ...]

``--backend`` starts one server of this project and adds it as three targets, one per protocol
(``ws``, ``invocations``, ``openai``). The rows, the URL forms and the files written:
docs/benchmarks.md ("Compare with your current TTS server"). Exit status 1 when a target could not
be reached at all.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import sys
import time
from pathlib import Path
from typing import Any

from .. import results
from ..clients import HEALTH_TIMEOUT_S
from . import report
from .bidi import SageMakerBidiClient, WsClient
from .http import InvocationsClient, OpenAIClient, SageMakerInvocationsClient
from .rows import Plan, Runner
from .targets import Target, parse_target

TITLE = "Compare: TTS deployments side by side"
DEFAULT_VOICE = "jm_kumo"


_log = functools.partial(print, flush=True)


#: the client of each protocol (nothing is connected until it is used)
CLIENTS = {"ws": WsClient, "sagemaker": SageMakerBidiClient, "invocations": InvocationsClient,
           "openai": OpenAIClient, "sagemaker-invocations": SageMakerInvocationsClient}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks compare", description=__doc__.split("\n")[0])
    p.add_argument("--target", action="append", default=[], metavar="NAME=URL",
                   help="ws://host:port, http://host:port/invocations, openai+http://host:port/v1, "
                        "sagemaker://ENDPOINT?region=R, sagemaker+invocations://ENDPOINT?region=R; "
                        "append #voice=V for a voice of its own, #format=wav for a POST that refuses pcm "
                        "(also detected), and #FIELD=VALUE for any other request field (#lang=a)")
    p.add_argument("--backend", choices=("fake", "onnx", "torch"), default=None,
                   help="start a server of this project on this runtime and compare it over its three protocols")
    p.add_argument("--voice", default=DEFAULT_VOICE, help=f"voice for every target (default {DEFAULT_VOICE})")
    p.add_argument("--api-key", default=None, help="sent as 'Authorization: Bearer K' to HTTP and WebSocket targets")
    p.add_argument("--quick", action="store_true", help="2 rounds, sweep levels 1 and 4, 2 requests per client")
    p.add_argument("--runs", type=int, default=None, help="rounds of rows 1-3 (default 5; --quick 2)")
    p.add_argument("--levels", default=None, help="sweep levels, e.g. 1,2,4,8 (default; --quick 1,4)")
    p.add_argument("--requests-per-client", type=int, default=None, help="sweep requests per client (default 4; --quick 2)")
    p.add_argument("--sweep-rounds", type=int, default=None,
                   help="rounds of the sweep, each over every level and target (default 2; --quick 1)")
    p.add_argument("--over-limit-chars", type=int, default=5200,
                   help="length of the over-the-limit text of row 6 (default 5200, just over this server's limit of "
                        "5000, so a target without a limit is kept busy as little as possible)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds any one request may take")
    p.add_argument("--health-timeout", type=float, default=HEALTH_TIMEOUT_S,
                   help=f"seconds a health poll waits; one that times out counts at this (default {HEALTH_TIMEOUT_S:g})")
    p.add_argument("--pid", action="append", default=[], metavar="NAME=PID",
                   help="the process of a local target, for its resident memory")
    p.add_argument("--out", type=Path, default=Path("compare.json"),
                   help="result file FILE.json, FILE.md and FILE.png beside it (default ./compare.json)")
    return p.parse_args(argv)


def build_plan(args: argparse.Namespace) -> Plan:
    levels = tuple(int(x) for x in args.levels.split(",")) if args.levels else ((1, 4) if args.quick else (1, 2, 4, 8))
    pids = {name: int(pid) for name, _, pid in (spec.partition("=") for spec in args.pid)}
    return Plan(runs=args.runs or (2 if args.quick else 5), levels=levels,
                per_client=args.requests_per_client or (2 if args.quick else 4),
                over_limit_chars=args.over_limit_chars, pids=pids,
                sweep_rounds=args.sweep_rounds or (1 if args.quick else 2))


async def measure(targets: list[Target], plan: Plan, *, api_key: str | None, timeout_s: float,
                  health_timeout_s: float = HEALTH_TIMEOUT_S) -> Runner:
    clients = {t.name: CLIENTS[t.kind](t, api_key=api_key, timeout_s=timeout_s, health_timeout_s=health_timeout_s)
               for t in targets}
    runner = Runner(clients, plan, log=_log)
    try:
        await runner.run()
    finally:
        for client in clients.values():
            await client.aclose()
    return runner


def run(args: argparse.Namespace, argv: list[str]) -> results.Result:
    targets = [parse_target(spec, default_voice=args.voice) for spec in args.target]
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise SystemExit(f"target names must differ: {names}")
    plan = build_plan(args)
    result = results.Result("compare", args.quick, results.shown_command(["python", "-m", "benchmarks", "compare", *argv]))
    result.config.update(targets=[t.to_dict() for t in targets], **dataclasses.asdict(plan), timeout_s=args.timeout,
                         health_timeout_s=args.health_timeout,
                         versions_of="this measuring client (not of the targets, which it cannot see)")
    t0 = time.perf_counter()
    runner = asyncio.run(measure(targets, plan, api_key=args.api_key, timeout_s=args.timeout,
                                 health_timeout_s=args.health_timeout))
    result.config["benchmark_wall_s"] = round(time.perf_counter() - t0, 1)
    result.samples = runner.samples
    result.summary = report.summarize(runner.samples, names)
    if runner.unreachable:
        result.summary["_unreachable"] = dict(runner.unreachable)
    result.medians = {"side_by_side": report.side_by_side({n: result.summary[n] for n in names})}
    result.notes.append("means beside medians: AWS's write-ups report means")
    return result


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if not args.target and not args.backend:
        raise SystemExit("python -m benchmarks compare: give --target NAME=URL (or --backend to start a server)")
    with contextlib.ExitStack() as stack:
        if args.backend:
            from ..live import LiveServer

            srv = stack.enter_context(LiveServer(backend=args.backend, log=_log))
            args.target += [f"ws={srv.ws_url}", f"invocations={srv.url}/invocations", f"openai=openai+{srv.url}/v1"]
            args.pid += [f"{name}={srv.proc.pid}" for name in ("ws", "invocations", "openai") if srv.proc]
        result = run(args, argv)
    out: Path = args.out
    data: dict[str, Any] = results.write(result, title=TITLE, body=report.body, plot=report.plot,
                                         out_dir=out.parent, stem=out.name.removesuffix(".json"), log=_log)
    return 1 if data["summary"].get("_unreachable") else 0
