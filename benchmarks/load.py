"""Load: many WebSocket sessions at once, each pipelining several sentences, against a live server —
0 lost, 0 misordered, every request answered — with ``/ping`` latency measured throughout. Runs:
docs/benchmarks.md ("Load and soak"); :func:`load_run` is also what tests/e2e/test_load_*.py run
(they assert counts and order; timing claims live here).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import httpx

from . import prom
from .clients import BYTES_PER_SECOND, HealthProbe, RequestFailed, WsSession
from .live import LiveServer
from .loop import closed_loop
from .results import Result, command_line, markdown_table, percentile, rnd

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.",
    "Every request is answered in the order it was sent.",
    "Pipelined sentences never interleave on one session.",
]


async def _session(ws_url: str, texts: list[str], *, speed: float, api_key: str | None) -> dict[str, Any]:
    """One session through the contract client, which notes the order it was answered in."""
    violations = []
    async with WsSession(ws_url, speed=speed, api_key=api_key, frames="binary", open_timeout=120) as ws:
        assert ws.burst is not None and ws.session is not None
        try:
            timings = await ws.synthesize(texts, raise_on_error=False)  # pipelined: all sent before any answer
        except RequestFailed as exc:  # the session closed early, or audio came outside a request
            violations.append(str(exc))
            timings = []
        await ws.session.close()
        while await ws.session.receive() is not None:
            pass
        return {"sent": ws.burst.sent, "answered": ws.burst.answered, "timings": timings,
                "violations": violations + ws.burst.violations, "closed_normally": ws.session.close_code == 1000}


async def run_sessions(ws_url: str, sessions: int, per_session: int, *, speed: float = 1.0,
                       api_key: str | None = None, sentences: Sequence[str] = SENTENCES) -> list[dict[str, Any]]:
    """``sessions`` WebSocket sessions at once, each pipelining ``per_session`` of ``sentences``
    (session ``i`` from the ``i``-th on)."""

    def texts(i: int) -> list[str]:
        return [sentences[(i + j) % len(sentences)] for j in range(per_session)]

    loop = await closed_loop(lambda _s, i, _r: _session(ws_url, texts(i), speed=speed, api_key=api_key), sessions,
                             per_client=1)
    if loop.failures:
        raise loop.failures[0]
    return loop.records


def tally(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over all sessions: what a load test asserts and a benchmark reports."""
    sent, answered = (sum(len(o[k]) for o in outcomes) for k in ("sent", "answered"))
    timings = [t for o in outcomes for t in o["timings"]]
    ttfa = [t.server_ttfa_ms for t in timings if t.complete_s is not None and t.server_ttfa_ms is not None]
    return {
        "sessions": len(outcomes), "requests": sent, "answered": answered,
        "completed": sum(t.complete_s is not None for t in timings),
        "errors": sum(bool(t.error) for t in timings),
        "error_codes": sorted({t.code or "?" for t in timings if t.error}),
        "lost": sent - answered,
        "misordered_sessions": sum(o["answered"] != o["sent"] for o in outcomes),
        "violations": sum(len(o["violations"]) for o in outcomes),
        "closed_normally": sum(o["closed_normally"] for o in outcomes),
        "audio_s": round(sum(t.audio_bytes for t in timings) / BYTES_PER_SECOND, 2),
        "ttfa_ms_p50": rnd(percentile(ttfa, 50), 2), "ttfa_ms_p99": rnd(percentile(ttfa, 99), 2),
    }


class PingProbe(threading.Thread):
    """GET /ping every ``interval`` seconds on its own thread (its own event loop and connection,
    through the suite's one health probe, :class:`benchmarks.clients.HealthProbe`), until stopped:
    the latency a load balancer's health check sees while the load runs. A poll with no answer
    counts at its timeout, with status 0."""

    def __init__(self, url: str, interval: float = 0.02):
        super().__init__(name="ping-probe", daemon=True, target=lambda: asyncio.run(self._poll()))
        self.url, self.interval = url, interval
        self.latencies_ms: list[float] = []
        self.statuses: Counter[int] = Counter()
        self._halt = threading.Event()

    async def _poll(self) -> None:
        probe = HealthProbe(self.url, ("/ping",), timeout_s=10.0)
        try:
            while not self._halt.is_set():
                t0 = time.perf_counter()
                try:
                    _path, code, ms = await probe()
                except httpx.HTTPError:
                    code, ms = None, (time.perf_counter() - t0) * 1000
                self.latencies_ms.append(ms)
                self.statuses[code or 0] += 1
                await asyncio.sleep(self.interval)
        finally:
            await probe.aclose()

    def stop(self) -> dict[str, Any]:
        self._halt.set()
        self.join(15)
        return {"probes": len(self.latencies_ms), "statuses": dict(self.statuses),
                **{f"{k}_ms": rnd(percentile(self.latencies_ms, q), 2) for k, q in (("p50", 50), ("p99", 99), ("max", 100))}}


def load_run(url: str, ws_url: str, sessions: int, per_session: int, *, speed: float = 1.0,
             sentences: Sequence[str] = SENTENCES) -> dict[str, Any]:
    """One load run with the ping probe around it (blocking); :func:`run_sessions` says the rest."""
    probe = PingProbe(url)
    probe.start()
    t0 = time.perf_counter()
    try:
        outcomes = asyncio.run(run_sessions(ws_url, sessions, per_session, speed=speed, sentences=sentences))
    finally:
        ping = probe.stop()
    return {**tally(outcomes), "wall_s": round(time.perf_counter() - t0, 2), "ping": ping}


def run(*, quick: bool = False, model_dir=None, log=print, backend: str | None = None) -> Result:
    result = Result(benchmark="load", quick=quick, command=command_line("load", quick))
    # runtime -> (sessions, sentences per session, server environment), each in both modes
    sizes = {"fake": (50, 4, {"KOKORO_FAKE_SEGMENT_S": "0.01"}), "onnx": (4 if quick else 8, 2, {})}
    plans = [(runtime, mode, *sizes[runtime]) for runtime in sizes for mode in ("sequential", "concurrent")
             if backend is None or runtime == backend]
    result.config = {"plans": [{"runtime": r, "mode": m, "sessions": s, "per_session": n, "env": e}
                               for r, m, s, n, e in plans], "ping_interval_s": 0.02}
    for runtime, mode, sessions, per_session, env in plans:
        with LiveServer(backend=runtime, mode=mode, env=env, model_dir=model_dir, log=log) as srv:
            stats = load_run(srv.url, srv.ws_url, sessions, per_session)
            metrics = srv.scrape()
        stats.update(runtime=runtime, mode=mode, per_session=per_session,
                     server_requests_ok=prom.value(metrics, "kokoro_requests_total", {"route": "ws", "status": "200"}),
                     active_sessions_after=prom.value(metrics, "kokoro_active_sessions"))
        log(f"  {runtime}/{mode} {sessions}x{per_session}: answered {stats['answered']}/{stats['requests']}, "
            f"lost {stats['lost']}, misordered {stats['misordered_sessions']}, ping p99 {stats['ping']['p99_ms']} ms")
        result.samples.append(stats)
        label = f"{runtime}/{mode} {sessions}x{per_session}"
        result.target(f"{label}: lost / misordered / violations", "0 / 0 / 0",
                      f"{stats['lost']} / {stats['misordered_sessions']} / {stats['violations']}",
                      stats["lost"] == stats["misordered_sessions"] == stats["violations"] == 0, any_runtime=True)
        result.target(f"{label}: /ping p99 under load", "< 100 ms", f"{stats['ping']['p99_ms']} ms",
                      (stats["ping"]["p99_ms"] or 0) < 100)
    result.notes.append("The load generator, the ping probe and the server share the same cores; /ping "
                        "latency includes the probe's own scheduling delay.")
    return result


def body(data: dict[str, Any]) -> str:
    rows = [[s["runtime"], s["mode"], f"{s['sessions']}x{s['per_session']}", s["requests"], s["completed"],
             s["lost"], s["misordered_sessions"], s["violations"], s["ttfa_ms_p50"], s["ping"]["p50_ms"],
             s["ping"]["p99_ms"], s["ping"]["max_ms"], s["wall_s"]] for s in data["samples"]]
    return ("Pipelined WebSocket sessions, all at once, against a live server; /ping probed every 20 ms "
            "on its own connection throughout.\n\n" + markdown_table(
                ["runtime", "mode", "sessions x sentences", "requests", "completed", "lost", "misordered",
                 "violations", "TTFA p50 ms", "ping p50 ms", "ping p99 ms", "ping max ms", "wall s"], rows))
