"""A real ``kokoro-serve`` started as a subprocess on a free loopback port (the manner of vLLM's
``RemoteOpenAIServer``): started, waited on until ``/ping`` answers 200, scraped, and stopped.

Blocking by design — the benchmark drivers call it outside their event loops. The server's output
goes to a log file (never a pipe, which would block a chatty server); a server that dies or does
not become ready raises :class:`ServerFailed` with the tail of that log. Peak RSS is the kernel's
high-water mark (``VmHWM``) of the server process plus a psutil sampler over its children.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from . import prom


class ServerFailed(RuntimeError):
    """The server did not start, or died; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command() -> list[str]:
    """The ``kokoro-serve`` console script beside this interpreter, else the module entry."""
    script = Path(sys.executable).with_name("kokoro-serve")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("kokoro-serve")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from server.cli import main; sys.exit(main())"]


def _peak_rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class _RssSampler(threading.Thread):
    """Samples the RSS of the server and its children every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.25):
        super().__init__(daemon=True, name="rss-sampler")
        self.pid, self.interval = pid, interval
        self.peak_bytes = 0
        self._stop = threading.Event()

    def run(self) -> None:
        try:
            import psutil
        except ImportError:
            return
        try:
            proc = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._stop.wait(self.interval):
            try:
                rss = proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True))
            except psutil.Error:
                return
            self.peak_bytes = max(self.peak_bytes, rss)

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

    def command(self) -> list[str]:
        if self.argv is not None:
            return [*self.argv, "--host", self.host, "--port", str(self.port)]
        return [
            *server_command(), "serve", "--backend", self.backend, "--mode", self.mode,
            "--host", self.host, "--port", str(self.port),
        ]

    def start(self) -> LiveServer:
        env = dict(os.environ)
        env.update({"HF_HUB_OFFLINE": "1", "KOKORO_LOG_LEVEL": "warning", "PYTHONUNBUFFERED": "1"})
        if self.model_dir is not None:
            env["KOKORO_MODEL_DIR"] = str(self.model_dir)
        env.update(self.env)
        self.log(f"  starting server {self.label} on port {self.port}")
        t0 = time.perf_counter()
        with open(self.logfile, "wb") as out:
            self.proc = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self._sampler = _RssSampler(self.proc.pid)
        self._sampler.start()
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - t0
        self.log(f"  server ready in {self.startup_s:.1f} s: {self.ping}")
        return self

    def _wait_ready(self, t0: float) -> None:
        deadline = t0 + self.startup_timeout_s
        with httpx.Client(timeout=2.0) as client:
            while time.perf_counter() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    raise ServerFailed(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    r = client.get(f"{self.url}/ping")
                    if r.status_code == 200:
                        with contextlib.suppress(ValueError):
                            self.ping = r.json()
                        return
                time.sleep(0.25)
        raise ServerFailed(f"server not ready after {self.startup_timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

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
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            hwm = _peak_rss_kib(proc.pid)
            if hwm is not None:
                self.peak_rss_mib = round(hwm / 1024, 1)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        if self._sampler is not None:
            self._sampler.stop()
            sampled = self._sampler.peak_bytes / (1 << 20)
            if sampled and (self.peak_rss_mib is None or sampled > self.peak_rss_mib):
                self.peak_rss_mib = round(sampled, 1)
        shutil.rmtree(self._logdir, ignore_errors=True)

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
