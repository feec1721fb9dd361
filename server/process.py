"""A server as a subprocess on a free loopback port, waited on until ``/ping`` answers 200.

:class:`ServerProcess` starts ``python -m server serve --host 127.0.0.1 --port N`` (or any program
given as ``argv`` that answers HTTP on that port: the SageMaker ``serve`` entry, the RunPod worker,
the agent app), with the environment of this process plus ``env``, less the variables whose names
start with one of ``drop_env``. Output goes to ``log_path`` (a file, never a pipe a chatty server
would block on) or, without one, to this process's own. :meth:`ServerProcess.wait_ready` polls
until the server answers, and fails at once with the log's tail if the process exits first;
:meth:`ServerProcess.stop` sends SIGTERM (SIGKILL after a timeout) and records the process's peak
RSS (the kernel's ``VmHWM``) on the way.

Standard library only: the RunPod worker, the benchmarks and the tests (some in an interpreter that
has none of the server's dependencies) all start servers with it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

#: The bidirectional-stream route of the wire contract.
WS_PATH = "/invocations-bidirectional-stream"
#: The folder that holds the ``server`` package: ``python -m server`` runs this same code.
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]
#: Loopback is never reached through a proxy the environment may name.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerFailed(RuntimeError):
    """The server exited, or did not answer in time; the message carries the tail of its log."""


class ServerNotReady(ServerFailed, TimeoutError):
    """The server still runs but did not answer 200 in time."""


#: Where :func:`free_port` looks first: below Linux's ephemeral range (32768-60999 unless
#: configured), from which the kernel picks the local port of every outgoing connection.
_LISTEN_PORTS = range(20000, 32000)


def _ephemeral_ports() -> range:
    try:
        lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return range(32768, 61000)
    return range(lo, hi + 1)


def free_port() -> int:
    """A loopback port nothing listens on now, for a server about to start. It is taken outside
    the ephemeral range where possible: a port the kernel handed out there can be taken, before the
    server binds it, as the local port of any connection a client opens meanwhile."""
    ephemeral = _ephemeral_ports()
    candidates = [p for p in random.sample(_LISTEN_PORTS, 64) if p not in ephemeral]
    for port in [*candidates, 0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds it
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            found: int = s.getsockname()[1]
            return found
    raise OSError("no free loopback port")


def wait_ready(url: str, *, gone: Callable[[], str | None] = lambda: None, timeout: float = 180,
               interval: float = 0.1) -> bytes:
    """Poll ``GET url`` until it answers 200 and return the body. ``gone()`` says why the server can
    no longer answer (its process exited, its thread ended), which fails at once, not at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        why = gone()
        if why is not None:
            raise ServerFailed(f"{url} will not answer: {why}")
        try:
            with _DIRECT.open(url, timeout=2) as r:
                if r.status == 200:
                    body: bytes = r.read()
                    return body
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise ServerNotReady(f"{url} did not answer 200 within {timeout:.0f} s")
        time.sleep(interval)


def peak_rss_kib(pid: int) -> int | None:
    """The kernel's high-water mark of the process's resident set (``VmHWM``), where there is one."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class ServerProcess:
    """``ServerProcess(env={"KOKORO_MODE": "concurrent"}).wait_ready()`` — ``url``, ``ws_url``,
    ``ping`` (the JSON ``/ping`` answered); ``stop()`` returns the exit code. The process starts in
    the constructor. ``serve_args`` go after ``serve --host --port`` (``--backend onnx``); with
    ``argv`` the program is the caller's and learns its port from ``env`` or its own arguments.
    ``own_group`` starts it in a process group of its own and signals the whole group (an entry that
    starts the server as a child)."""

    def __init__(self, argv: Sequence[str] | None = None, *, port: int | None = None,
                 env: Mapping[str, str] | None = None, drop_env: tuple[str, ...] = (),
                 log_path: Path | None = None, own_group: bool = False, cwd: Path | None = None,
                 serve_args: Sequence[str] = ()) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}{WS_PATH}"
        self.log_path = log_path
        self.own_group = own_group
        self.ping: dict[str, Any] = {}
        self.peak_rss_kib: int | None = None
        full_env = {k: v for k, v in os.environ.items() if not (drop_env and k.startswith(drop_env))}
        full_env.setdefault("HF_HUB_OFFLINE", "1")
        full_env["PYTHONUNBUFFERED"] = "1"
        if argv is None:
            argv = [sys.executable, "-m", "server", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                    *serve_args]
            path = full_env.get("PYTHONPATH")
            full_env["PYTHONPATH"] = str(_PACKAGE_ROOT) + (os.pathsep + path if path else "")
        self.argv = list(argv)
        full_env.update(env or {})
        self._log: IO[bytes] | None = open(log_path, "wb") if log_path is not None else None  # closed in stop()
        self.started = time.monotonic()
        self.proc = subprocess.Popen(self.argv, cwd=cwd, env=full_env, stdout=self._log,
                                     stderr=subprocess.STDOUT if self._log else None, start_new_session=own_group)

    def wait_ready(self, path: str = "/ping", timeout: float = 180) -> ServerProcess:
        """Wait until ``path`` answers 200 (``/ping``: the model is loaded and warmed up)."""

        def gone() -> str | None:
            code = self.proc.poll()
            return None if code is None else f"the process exited with {code}:\n{self.log_tail()}"

        try:
            body = wait_ready(self.url + path, gone=gone, timeout=timeout)
        except ServerNotReady as e:
            raise ServerNotReady(f"{e}:\n{self.log_tail()}") from None
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        self.ping = answer if isinstance(answer, dict) else {}
        return self

    def log(self) -> str:
        """The whole log so far ('' where the output is not in a file)."""
        if self.log_path is None:
            return ""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:]) or "(no log)"

    def signal(self, signum: int) -> None:
        if self.own_group:
            os.killpg(self.proc.pid, signum)
        else:
            self.proc.send_signal(signum)

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.peak_rss_kib = peak_rss_kib(self.proc.pid)
            try:
                self.signal(signal.SIGTERM)
                self.proc.wait(timeout)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL) if self.own_group else self.proc.kill()
                except ProcessLookupError:
                    pass
                self.proc.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
