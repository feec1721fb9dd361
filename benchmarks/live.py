"""A real ``kokoro-serve`` for a benchmark: :class:`server.live.ServerProcess` (started as a
subprocess on a free loopback port, waited on until ``/ping`` answers 200, stopped) plus what a
measurement needs — a label, ``/metrics`` scraped, a wait until the server is idle, and its peak RSS.

Blocking by design — the benchmark drivers call it outside their event loops. A server that dies or
does not become ready raises :class:`ServerFailed` with the tail of its log. Peak RSS is the kernel's
high-water mark (``VmHWM``) of the server process, or a psutil sampler over it and its children
where that is higher.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx

from server.live import ServerFailed, ServerProcess, free_port

from . import prom

__all__ = ["LiveServer", "ServerFailed", "free_port"]


def _status_kib(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def rss_mib(pid: int, *, peak: bool = False, children: bool = True, digits: int = 2) -> float | None:
    """Resident memory of a local process in MiB: now (``VmRSS``) or its peak (``peak``:
    ``VmHWM``), plus, with ``children``, its children's resident memory now (a peer's worker process
    holds the model; psutil). Where /proc has neither, psutil's figure now; None if unreadable.
    The one memory reader of the suite."""
    kib = _status_kib(pid, "VmHWM" if peak else "VmRSS")
    try:
        import psutil

        proc = psutil.Process(pid)
        own = kib * 1024 if kib is not None else proc.memory_info().rss
        kids = sum(c.memory_info().rss for c in proc.children(recursive=True)) if children else 0
    except ImportError:
        if kib is None:
            return None
        own, kids = kib * 1024, 0
    except Exception:  # the process is gone (psutil.Error): what /proc said, if anything
        if kib is None:
            return None
        own, kids = kib * 1024, 0
    return round((own + kids) / (1 << 20), digits)


class _RssSampler(threading.Thread):
    """Samples the resident memory of the server and its children (:func:`rss_mib`) every
    ``interval`` seconds, keeping the largest."""

    def __init__(self, pid: int, interval: float = 0.25):
        super().__init__(daemon=True, name="rss-sampler")
        self.pid, self.interval = pid, interval
        self.peak_mib = 0.0
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            mib = rss_mib(self.pid)
            if mib is None:
                return
            self.peak_mib = max(self.peak_mib, mib)

    def stop(self) -> None:
        self._stop.set()


class LiveServer:
    """``with LiveServer(backend="onnx", mode="sequential") as srv: ...`` — ``srv.url``,
    ``srv.ws_url``, ``srv.scrape()``; ``srv.peak_rss_mib`` after it stopped.

    ``env`` adds ``KOKORO_*`` variables (e.g. ``{"KOKORO_FAST_FIRST_SEGMENT": "false"}``).
    ``argv`` runs another program that takes ``--host``/``--port`` and answers ``/ping`` (the
    agent app) instead of ``kokoro-serve serve``.
    """

    def __init__(
        self,
        *,
        backend: str = "onnx",
        mode: str = "sequential",
        env: dict[str, str] | None = None,
        model_dir: Path | None = None,
        startup_timeout_s: float = 300.0,
        log=print,
        argv: list[str] | None = None,
        name: str | None = None,
    ):
        self.backend, self.mode = backend, mode
        self.argv, self.name = argv, name
        self.env = dict(env or {})
        self.model_dir = model_dir
        self.startup_timeout_s = startup_timeout_s
        self.port = free_port()
        self.host = "127.0.0.1"
        self.server: ServerProcess | None = None
        self.proc: subprocess.Popen | None = None
        self.log = log
        self.startup_s: float | None = None
        self.peak_rss_mib: float | None = None
        self.ping: dict = {}
        self._logdir = tempfile.mkdtemp(prefix="kokoro-bench-")
        self.logfile = Path(self._logdir) / "server.log"
        self._sampler: _RssSampler | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}/invocations-bidirectional-stream"

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        extra = ",".join(f"{k.removeprefix('KOKORO_').lower()}={v}" for k, v in sorted(self.env.items()))
        return f"{self.backend}/{self.mode}" + (f" ({extra})" if extra else "")

    def command(self) -> list[str] | None:
        if self.argv is not None:
            return [*self.argv, "--host", self.host, "--port", str(self.port)]
        return None  # kokoro-serve serve, as server.live starts it

    def start(self) -> LiveServer:
        env = {"KOKORO_LOG_LEVEL": "warning", **self.env}
        if self.model_dir is not None:
            env["KOKORO_MODEL_DIR"] = str(self.model_dir)
        self.log(f"  starting server {self.label} on port {self.port}")
        t0 = time.perf_counter()
        self.server = ServerProcess(self.command(), port=self.port, env=env, log_path=self.logfile, own_group=True,
                                    serve_args=["--backend", self.backend, "--mode", self.mode])
        self.proc = self.server.proc
        self._sampler = _RssSampler(self.proc.pid)
        self._sampler.start()
        try:
            self.ping = self.server.wait_ready(timeout=self.startup_timeout_s).ping
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - t0
        self.log(f"  server ready in {self.startup_s:.1f} s: {self.ping}")
        return self

    def log_tail(self, lines: int = 40) -> str:
        return self.server.log_tail(lines) if self.server is not None else "(no log)"

    def scrape(self) -> prom.Samples:
        with httpx.Client(timeout=10.0) as client:
            r = client.get(f"{self.url}/metrics")
            r.raise_for_status()
            return prom.parse(r.text)

    def wait_idle(self, quiet_s: float = 0.3, timeout_s: float = 60.0) -> None:
        """Return once the server has used almost no CPU for ``quiet_s`` (a runtime call of a
        client that hung up still runs to its end; the next measurement must not share the cores
        with it). Best effort: returns after ``timeout_s`` either way, or at once without psutil."""
        try:
            import psutil

            proc = psutil.Process(self.proc.pid) if self.proc is not None else None
        except (ImportError, psutil.Error):
            return
        if proc is None:
            return
        end = time.perf_counter() + timeout_s
        with contextlib.suppress(psutil.Error):
            before = sum(proc.cpu_times()[:2])
            while time.perf_counter() < end:
                time.sleep(quiet_s)
                now = sum(proc.cpu_times()[:2])
                if now - before < 0.05 * quiet_s:
                    return
                before = now

    def stop(self) -> None:
        server, self.server, self.proc = self.server, None, None
        if server is None:
            return
        server.stop(timeout=30)
        if server.peak_rss_kib is not None:
            self.peak_rss_mib = round(server.peak_rss_kib / 1024, 1)
        if self._sampler is not None:
            self._sampler.stop()
            sampled = self._sampler.peak_mib
            if sampled and (self.peak_rss_mib is None or sampled > self.peak_rss_mib):
                self.peak_rss_mib = round(sampled, 1)
        shutil.rmtree(self._logdir, ignore_errors=True)

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
