"""Servers as subprocesses for the agent's tests: the agent app (``python -m agent serve``), or any
command line, started and stopped around a test. Standard library only (the Python 3.12 tests use it)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers_200(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


class Process:
    """A server subprocess (``args`` after the Python executable, or a full command line when
    ``args[0]`` is a path); ``start`` waits until ``ready_url`` answers 200, ``stop`` ends it."""

    def __init__(self, args: list[str], ready_url: str, *, env: dict[str, str] | None = None,
                 log: Path | None = None) -> None:
        self.args = args
        self.ready_url = ready_url
        self.env = {**os.environ, **(env or {})}
        if log is None:
            fd, name = tempfile.mkstemp(prefix="kokoro-agent-test-", suffix=".log")
            os.close(fd)
            log = Path(name)
        self.log_path = log
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> Process:
        self._log = open(self.log_path, "wb")  # closed in stop()
        argv = self.args if os.path.isabs(self.args[0]) else [sys.executable, *self.args]
        self.proc = subprocess.Popen(argv, cwd=REPO, env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.args} exited {self.proc.returncode}:\n{self.log()}")
            if _answers_200(self.ready_url):
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.args} not ready in {timeout:.0f} s:\n{self.log()}")

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-4000:]
        return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        with contextlib.suppress(Exception):
            self._log.close()


def agent_process(tts_url: str, *, tokens_per_second: float, reply: str | None = None,
                  extra: list[str] | None = None, env: dict[str, str] | None = None) -> Process:
    """``python -m agent serve`` with the scripted model, speaking through ``tts_url`` (``env``: more
    ``KOKORO_AGENT_*`` settings)."""
    port = free_port()
    args = ["-m", "agent", "serve", "--port", str(port), "--model", "scripted",
            "--tokens-per-second", str(tokens_per_second), "--tts-url", tts_url, "--log-level", "warning"]
    if reply:
        args += ["--reply", reply]
    proc = Process(args + (extra or []), f"http://127.0.0.1:{port}/ping", env=env)
    proc.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return proc
