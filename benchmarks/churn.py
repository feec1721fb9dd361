"""Churn: many short sessions against a server process, watching what it keeps. ``python -m benchmarks
churn`` (``--sessions N``; ``--backend fake|onnx``; ``--warmup FRACTION``) runs the churn mix (``benchmarks.churn_mix``: HTTP,
the bidi route, Deepgram, Cartesia, ElevenLabs, with cancels, barge-ins and vanishing clients) and
reports the server's RSS after warm-up (the first 10% of the sessions unless ``--warmup`` says
otherwise; the growth after longer warm-ups is shown beside it) and its growth (goals < 20 MiB and
< 5%), every table it keeps per
session, request or runtime call back at its idle size (``kokoro_state_entries{table}`` on
``/metrics``, all 0 once the last audio has run out), and 0 unanswered requests. Default: 100,000
sessions on the fake runtime (``--quick`` 1,000), 2,000 on ONNX (``--quick`` 200). Results:
``benchmarks/results/churn.{json,md}`` (fake runtime), ``churn_onnx.{json,md}`` (ONNX).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from .churn_mix import KINDS, Churn, plan, run_mix
from .live import LiveServer, at_rest, growth, rss_mib
from .results import Result, command_line, load_average, markdown_table

SIZES = {"fake": (100_000, 1_000), "onnx": (2_000, 200), "torch": (2_000, 200)}
CONCURRENCY = {"fake": 16, "onnx": 4, "torch": 4}
WARMUP_FRACTION = 0.1
#: Warm-ups the growth is also shown after (the share of the sessions).
WARMUPS_SHOWN = (0.1, 0.25, 0.5, 0.75)
GOAL_MIB = 20.0


def churn_run(runtime: str, mode: str, sessions: int, *, model_dir: Any = None, log: Any = print,
              warmup: float = WARMUP_FRACTION) -> dict[str, Any]:
    env = {"KOKORO_FAKE_SEGMENT_S": "0.002"} if runtime == "fake" else {}
    every = max(1, sessions // 100)
    with LiveServer(backend=runtime, mode=mode, env=env, model_dir=model_dir, log=log) as srv:
        voice = httpx.get(f"{srv.url}/v1/audio/voices", timeout=10).json()["voices"][0]
        pid = srv.proc.pid
        samples: list[dict[str, Any]] = []
        t0 = time.perf_counter()

        def sample(done: int) -> None:
            samples.append({"requests": done, "rss_mib": rss_mib(pid, children=False),
                            "t_s": round(time.perf_counter() - t0, 1)})
            if len(samples) % 10 == 0:
                log(f"    {done} sessions, RSS {samples[-1]['rss_mib']} MiB, load {load_average()}")

        churn = Churn(srv.url, voice, timeout_s=120 if runtime == "fake" else 300)
        sample(0)
        units = list(KINDS) + plan(sessions - len(KINDS))
        wall = asyncio.run(run_mix(churn, units, CONCURRENCY.get(runtime, 4), every=every, sample=sample))
        if samples[-1]["requests"] != len(units):
            sample(len(units))
        sizes, rest_s = at_rest(srv.url)
        ping = httpx.get(f"{srv.url}/ping", timeout=10).status_code
        samples.append({**samples[-1], "rss_mib": rss_mib(pid, children=False), "t_s": round(time.perf_counter() - t0, 1)})
    g = growth(samples, warmup)
    # The same run judged after longer warm-ups: growth that shrinks with them levels off, a leak does not.
    later = {f"{w:.0%}": growth(samples, w)["growth_mib"] for w in WARMUPS_SHOWN}
    unanswered = sum(c["unanswered"] for c in churn.counts.values())
    return {"runtime": runtime, "mode": mode, "sessions": len(units), "wall_s": round(wall, 1),
            "sessions_per_s": round(len(units) / wall, 1), **g, "warmup_fraction": warmup, "growth_mib_by_warmup": later, "unanswered": unanswered, "unanswered_examples": churn.unanswered, "counts": churn.counts,
            "tables_at_rest": sizes, "tables_rest_after_s": rest_s, "ping_after": ping, "load_after": load_average(),
            "rss_samples": samples}


def run(*, quick: bool = False, model_dir: Any = None, log: Any = print, backend: str | None = None,
        sessions: int | None = None, mode: str = "concurrent", warmup: float | None = None) -> Result:
    runtime = backend or "fake"
    warmup = WARMUP_FRACTION if warmup is None else warmup
    if not 0 <= warmup < 1:
        raise ValueError(f"warm-up is a share of the sessions, 0 to 1 (not 1); got {warmup}")
    n = sessions or SIZES[runtime][1 if quick else 0]
    # Each runtime's result in a file of its own: churn.json (fake), churn_onnx.json, ...
    result = Result(benchmark="churn" if runtime == "fake" else f"churn_{runtime}", quick=quick,
                    command=command_line("churn", quick))
    log(f"  churn {runtime}/{mode}: {n} sessions, load {load_average()}")
    s = churn_run(runtime, mode, n, model_dir=model_dir, log=log, warmup=warmup)
    log(f"  RSS {s['rss_after_warmup_mib']} -> {s['rss_end_mib']} MiB ({s['growth_mib']:+.2f} MiB), "
        f"{s['unanswered']} unanswered, tables {s['tables_at_rest']}")
    result.samples.append(s)
    label = f"{runtime}/{mode}, {s['sessions']} sessions"
    result.target(f"{label}: RSS growth after warm-up", f"< {GOAL_MIB:g} MiB", f"{s['growth_mib']} MiB",
                  s["growth_mib"] < GOAL_MIB, any_runtime=True)
    # Relative to the model's process: a fake server's ~90 MiB makes 5% a few MiB of allocator noise.
    result.target(f"{label}: RSS growth after warm-up, relative", "< 5%", f"{s['growth_pct']}%", s["growth_pct"] < 5)
    result.target(f"{label}: tables at rest (kokoro_state_entries)", "all 0",
                  {k: v for k, v in s["tables_at_rest"].items() if v} or "all 0", not any(s["tables_at_rest"].values()), any_runtime=True)
    result.target(f"{label}: unanswered requests", "0", s["unanswered"], s["unanswered"] == 0, any_runtime=True)
    result.target(f"{label}: /ping after", "200", s["ping_after"], s["ping_after"] == 200, any_runtime=True)
    result.config = {"mode": mode, "runtime": runtime, "mix": KINDS, "concurrency": CONCURRENCY.get(runtime, 4),
                     "warmup_fraction": warmup, "rss_sample_every": max(1, n // 100)}
    result.summary = {k: s[k] for k in ("sessions", "sessions_per_s", "rss_after_warmup_mib", "rss_end_mib",
                                        "growth_mib", "slope_kib_per_request", "unanswered", "load_after")}
    result.notes.append(f"RSS is the server process's VmRSS, sampled every 1% of the sessions; growth is from the "
                        f"sample after the first {warmup:.0%} (warm-up, --warmup) to the end, after the tables were "
                        "found at rest; the growth after longer warm-ups is shown too. A session is one unit of the "
                        "mix: one HTTP request or one WebSocket connection.")
    return result


def body(data: dict[str, Any]) -> str:
    s = data["samples"][0]
    rows = [[kind, c["answered"], c["typed"], c["unanswered"]] for kind, c in sorted(s["counts"].items())]
    head = (f"{s['sessions']:,} sessions on {s['runtime']}/{s['mode']} in {s['wall_s']} s "
            f"({s['sessions_per_s']}/s); RSS {s['rss_start_mib']} MiB at start, {s['rss_after_warmup_mib']} MiB after "
            f"warm-up, {s['rss_end_mib']} MiB at the end ({s['growth_mib']:+.2f} MiB; slope "
            f"{s['slope_kib_per_request']} KiB per session; growth after a warm-up of "
            f"{', '.join(f'{w}: {g:+.2f} MiB' for w, g in s.get('growth_mib_by_warmup', {}).items()) or 'n/a'}); tables at rest after {s['tables_rest_after_s']} s: "
            f"{s['tables_at_rest']}; load average after: {s['load_after']}.\n\n")
    return head + markdown_table(["unit", "answered", "typed error", "unanswered"], rows)
