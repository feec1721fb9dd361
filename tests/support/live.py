"""Live servers on loopback and a raw WebSocket client.

* :class:`ThreadServer` — the app under a real uvicorn in a thread of this process, so a test can
  look inside (its event loop's tasks, this process's threads) after real TCP traffic.
* :class:`ServerProcess` — ``python -m server serve`` as a subprocess (compare vLLM's
  ``RemoteOpenAIServer``), with the environment it is given (``KOKORO_BACKEND=fake`` for speed).
* :class:`RawWS` — a WebSocket client on a bare socket: the handshake and frames written by hand,
  so it can send what no library would (bad opcodes, reserved bits, unmasked frames, lies about
  lengths) and disconnect abruptly (RST).
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from .inproc import WS, wait_for

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ping", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class ThreadServer:
    """``with ThreadServer(app) as srv:`` — uvicorn on a free loopback port, in a thread."""

    def __init__(self, app: Any, **config: Any):
        import uvicorn

        self.app = app
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self.server = uvicorn.Server(uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on",
            timeout_graceful_shutdown=2, ws_per_message_deflate=False, **config,
        ))
        self.thread = threading.Thread(target=self._run, name="uvicorn-test", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.serve())

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        wait_for(lambda: _ready(self.url), timeout=30)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(15)

    def call(self, fn: Any) -> Any:
        """Run ``fn()`` on the server's loop and return its result."""

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def task_count(self) -> int:
        return self.call(lambda: len(asyncio.all_tasks()) - 1)  # not counting the probe itself


class ServerProcess:
    """``python -m server serve`` on a free loopback port; ``stop()`` sends SIGTERM."""

    def __init__(self, log_path: Path, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}{WS}"
        self.log_path = log_path
        full_env = {**os.environ, "KOKORO_HOST": "127.0.0.1", "KOKORO_PORT": str(self.port),
                    "KOKORO_LOG_LEVEL": "warning", "HF_HUB_OFFLINE": "1", **env}
        self._log = open(log_path, "wb")  # closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "server", "serve"], cwd=REPO, env=full_env,
                                     stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 180) -> ServerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            if _ready(self.url):
                return self
            time.sleep(0.1)
        raise TimeoutError(f"server not ready:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


# ---------------------------------------------------------------------------------------------
# A raw WebSocket client
# ---------------------------------------------------------------------------------------------
TEXT, BINARY, CLOSE, PING, PONG = 0x1, 0x2, 0x8, 0x9, 0xA


class Closed(Exception):
    """The server closed the connection (``code`` from its close frame, or None for a bare EOF)."""

    def __init__(self, code: int | None):
        super().__init__(code)
        self.code = code


class RawWS:
    """A WebSocket connection on a bare socket. Not thread-safe; one per thread."""

    def __init__(self, port: int, path: str = WS, headers: dict[str, str] | None = None, timeout: float = 30):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        key = base64.b64encode(os.urandom(16)).decode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.sock.sendall((
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        ).encode())
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        self.status = int(head.split(b" ", 2)[1])

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise Closed(None)
        self.buf += data

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send_frame(self, opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0, mask: bool = True,
                   declared_len: int | None = None) -> None:
        """One frame, exactly as asked (``declared_len`` may lie about the payload's length)."""
        n = len(payload) if declared_len is None else declared_len
        head = bytes([(0x80 if fin else 0) | (rsv & 0x7) << 4 | (opcode & 0xF)])
        m = 0x80 if mask else 0
        if n < 126:
            head += bytes([m | n])
        elif n < 1 << 16:
            head += bytes([m | 126]) + struct.pack("!H", n)
        else:
            head += bytes([m | 127]) + struct.pack("!Q", n)
        if mask:
            key = os.urandom(4)
            head += key
            payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + payload)

    def send_text(self, text: str | bytes) -> None:
        self.send_frame(TEXT, text.encode() if isinstance(text, str) else text)

    def send_binary(self, data: bytes) -> None:
        self.send_frame(BINARY, data)

    def recv(self) -> tuple[int, bytes]:
        """The next data frame as (opcode, payload); answers pings; raises :class:`Closed`."""
        while True:
            b0, b1 = self._take(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._take(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._take(8))[0]
            payload = self._take(n)
            opcode = b0 & 0xF
            if opcode == CLOSE:
                raise Closed(struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None)
            if opcode == PING:
                self.send_frame(PONG, payload)
                continue
            return opcode, payload

    def abort(self) -> None:
        """Disconnect abruptly: no close frame, a TCP RST."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
