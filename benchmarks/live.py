"""A real ``kokoro-serve`` for a benchmark: :class:`server.process.ServerProcess` (a subprocess on a
free loopback port, waited on until ``/ping`` answers 200, stopped) plus what a measurement needs —
a label, ``/metrics`` scraped, a wait until the server is idle, and its peak RSS — and the memory
measures the long runs share (:func:`rss_mib`, :func:`growth` of RSS after warm-up, the state tables
once :func:`at_rest`).

Blocking by design — the benchmark drivers call it outside their event loops. A server that dies or
does not become ready raises :class:`ServerFailed` with the tail of its log.
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from server.process import WS_PATH, ServerFailed, ServerProcess, free_port, peak_rss_kib

from . import prom
from .results import rnd

__all__ = ["LiveServer", "ServerFailed", "at_rest", "free_port", "growth", "rss_mib", "tables"]


def rss_mib(pid: int, *, peak: bool = False, children: bool = True, digits: int = 2) -> float | None:
    """Resident memory of a local process in MiB: now, or its peak (``peak``: the kernel's ``VmHWM``
    where there is one), plus, with ``children``, its children's now (a peer's worker process holds
    the model). None once the process is gone. The one memory reader of the suite."""
    try:
        proc = psutil.Process(pid)
        hwm = peak_rss_kib(pid) if peak else None
        own = hwm * 1024 if hwm is not None else proc.memory_info().rss
        kids = sum(c.memory_info().rss for c in proc.children(recursive=True)) if children else 0
    except psutil.Error:
        return None
    return round((own + kids) / (1 << 20), digits)


class LiveServer:
    """``with LiveServer(backend="onnx", mode="sequential") as srv: ...`` — ``srv.url``,
    ``srv.ws_url``, ``srv.scrape()``; ``srv.peak_rss_mib`` after it stopped (the larger of the
    process's ``VmHWM`` and the sampled RSS of it and its children).

    ``env`` adds ``KOKORO_*`` variables (e.g. ``{"KOKORO_FAST_FIRST_SEGMENT": "false"}``).
    ``argv`` runs another program that takes ``--host``/``--port`` and answers ``/ping`` (the
    agent app) instead of ``kokoro-serve serve``.
    """

    def __init__(self, *, backend: str = "onnx", mode: str = "sequential", env: dict[str, str] | None = None,
                 model_dir: Path | None = None, startup_timeout_s: float = 300.0, log=print,
                 argv: list[str] | None = None, name: str | None = None):
        self.backend, self.mode, self.argv, self.env = backend, mode, argv, dict(env or {})
        self.model_dir, self.startup_timeout_s, self.log = model_dir, startup_timeout_s, log
        extra = ",".join(f"{k.removeprefix('KOKORO_').lower()}={v}" for k, v in sorted(self.env.items()))
        self.label = name or f"{backend}/{mode}" + (f" ({extra})" if extra else "")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}{WS_PATH}"
        self.server: ServerProcess | None = None
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None
        self.peak_rss_mib: float | None = None
        self.ping: dict = {}
        self._logdir = tempfile.mkdtemp(prefix="kokoro-bench-")
        self._sampled_mib = 0.0  # the largest RSS of the server and its children, sampled every 0.25 s
        self._halt = threading.Event()

    def start(self) -> LiveServer:
        env = {"KOKORO_LOG_LEVEL": "warning", **self.env}
        if self.model_dir is not None:
            env["KOKORO_MODEL_DIR"] = str(self.model_dir)
        self.log(f"  starting server {self.label} on port {self.port}")
        t0 = time.perf_counter()
        argv = None if self.argv is None else [*self.argv, "--host", "127.0.0.1", "--port", str(self.port)]
        self.server = ServerProcess(argv, port=self.port, env=env, log_path=Path(self._logdir) / "server.log",
                                    own_group=True, serve_args=["--backend", self.backend, "--mode", self.mode])
        self.proc = self.server.proc
        threading.Thread(target=self._sample_rss, args=(self.proc.pid,), daemon=True, name="rss-sampler").start()
        try:
            self.ping = self.server.wait_ready(timeout=self.startup_timeout_s).ping
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - t0
        self.log(f"  server ready in {self.startup_s:.1f} s: {self.ping}")
        return self

    def _sample_rss(self, pid: int) -> None:
        while not self._halt.wait(0.25) and (mib := rss_mib(pid)) is not None:
            self._sampled_mib = max(self._sampled_mib, mib)

    def scrape(self) -> prom.Samples:
        with httpx.Client(timeout=10.0) as client:
            r = client.get(f"{self.url}/metrics")
            r.raise_for_status()
            return prom.parse(r.text)

    def wait_idle(self, quiet_s: float = 0.3, timeout_s: float = 60.0) -> None:
        """Return once the server has used almost no CPU for ``quiet_s`` (a runtime call of a
        client that hung up still runs to its end; the next measurement must not share the cores
        with it). Best effort: returns after ``timeout_s`` either way."""
        if self.proc is None:
            return
        end = time.perf_counter() + timeout_s
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(self.proc.pid)
            while time.perf_counter() < end and proc.cpu_percent(interval=quiet_s) >= 5.0:
                pass

    def stop(self) -> None:
        server, self.server, self.proc = self.server, None, None
        if server is None:
            return
        server.stop(timeout=30)
        self._halt.set()
        hwm_mib = server.peak_rss_kib / 1024 if server.peak_rss_kib is not None else 0.0
        self.peak_rss_mib = round(max(hwm_mib, self._sampled_mib), 1) or None
        shutil.rmtree(self._logdir, ignore_errors=True)

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class RssSamples(list[dict[str, Any]]):
    """A server's resident memory, one sample per call of ``take(done)``: what was done by then, the MiB
    and the seconds since the first (what :func:`growth` reads)."""

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.pid, self.t0 = pid, time.perf_counter()

    def take(self, done: int) -> float:
        mib = rss_mib(self.pid, children=False)
        if mib is None:
            raise RuntimeError(f"no resident memory readable for process {self.pid}")
        self.append({"requests": done, "rss_mib": mib, "t_s": round(time.perf_counter() - self.t0, 1)})
        return mib


def growth(samples: list[dict[str, Any]], warmup_fraction: float) -> dict[str, Any]:
    """RSS growth from the end of warm-up to the end (MiB and %), over the second half of that window alone
    (a leak keeps growing; a warm-up levels off), and the slope after warm-up (KiB/request)."""
    total = samples[-1]["requests"]
    after = [s for s in samples if s["requests"] >= total * warmup_fraction]
    base, end = after[0]["rss_mib"], samples[-1]["rss_mib"]
    middle = next(s for s in after if s["requests"] >= (after[0]["requests"] + total) / 2)["rss_mib"]
    xs, ys = [s["requests"] for s in after], [s["rss_mib"] for s in after]
    slope = statistics.linear_regression(xs, ys).slope * 1024 if len(after) >= 3 else None
    return {"rss_start_mib": samples[0]["rss_mib"], "rss_after_warmup_mib": base, "rss_end_mib": end,
            "rss_peak_mib": max(s["rss_mib"] for s in samples), "warmup_requests": after[0]["requests"],
            "growth_mib": round(end - base, 2), "growth_pct": round((end - base) / base * 100, 2),
            "second_half_growth_pct": round((end - middle) / middle * 100, 2),
            "slope_kib_per_request": rnd(slope, 3)}


def tables(text: str) -> dict[str, float]:
    """``kokoro_state_entries`` by table, from a ``/metrics`` text."""
    return {dict(labels)["table"]: value for (name, labels), value in prom.parse(text).items()
            if name == "kokoro_state_entries"}


def at_rest(url: str, limit_s: float = 120.0) -> tuple[dict[str, float], float]:
    """The tables once they are all 0 (what a listener still plays is known until its audio runs
    out), or as they stand after ``limit_s``; and how long that took."""
    t0 = time.perf_counter()
    while True:
        sizes = tables(httpx.get(f"{url}/metrics", timeout=30).text)
        if not any(sizes.values()) or time.perf_counter() - t0 > limit_s:
            return sizes, round(time.perf_counter() - t0, 1)
        time.sleep(0.5)
