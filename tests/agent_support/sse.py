"""Reading the agent app's Server-Sent Events, and running servers as subprocesses."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def parse_sse(body: str) -> list[dict]:
    events = []
    for block in body.split("\n\n"):
        data = "\n".join(line[5:].strip() for line in block.splitlines() if line.startswith("data:"))
        if data:
            events.append(json.loads(data))
    return events


def iter_sse(response: httpx.Response) -> Iterator[tuple[float, dict]]:
    """(arrival time, event) as the lines arrive over a real connection."""
    data: list[str] = []
    for line in response.iter_lines():
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            yield time.monotonic(), json.loads("\n".join(data))
            data = []


def pcm_of(events: list[dict]) -> bytes:
    return b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "audio_chunk")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """A server subprocess (``args`` after the Python executable, or a full command line when
    ``args[0]`` is a path); ``start`` waits until ``ready_url`` answers 200, ``stop`` ends it."""

    def __init__(self, args: list[str], ready_url: str, *, env: dict[str, str] | None = None,
                 log: Path | None = None) -> None:
        self.args = args
        self.ready_url = ready_url
        self.env = {**os.environ, **(env or {})}
        self.log_path = log or Path(f"/tmp/kokoro-agent-test-{os.getpid()}-{free_port()}.log")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> Process:
        self._log = open(self.log_path, "wb")
        argv = self.args if os.path.isabs(self.args[0]) else [sys.executable, *self.args]
        self.proc = subprocess.Popen(argv, cwd=REPO, env=self.env, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.args} exited {self.proc.returncode}:\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.ready_url, timeout=1.0).status_code == 200:
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


def tts_server_process(port: int) -> Process:
    """The real server (``kokoro-serve serve --port P``; ``python -m server`` before the console
    script is installed)."""
    script = Path(sys.executable).parent / "kokoro-serve"
    args = [str(script)] if script.exists() else ["-m", "server"]
    return Process([*args, "serve", "--port", str(port)], f"http://127.0.0.1:{port}/ping",
                   env={"HF_HUB_OFFLINE": "1"})


def agent_process(tts_url: str, *, tokens_per_second: float, reply: str | None = None,
                  extra: list[str] | None = None) -> Process:
    port = free_port()
    args = ["-m", "agent", "serve", "--port", str(port), "--model", "scripted",
            "--tokens-per-second", str(tokens_per_second), "--tts-url", tts_url, "--log-level", "warning"]
    if reply:
        args += ["--reply", reply]
    proc = Process(args + (extra or []), f"http://127.0.0.1:{port}/ping")
    proc.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    return proc
