"""Live servers on loopback and a raw WebSocket client.

* :class:`ServerProcess` — the product's :class:`server.process.ServerProcess` (a server as a
  subprocess on a free loopback port): ``python -m server serve`` by default, or any entry that
  starts one (the SageMaker ``serve`` script, the RunPod worker), with the environment the test
  gives it on top of this one's, less every ``KOKORO_*``, ``SAGEMAKER_*``, ``RUNPOD_*`` and
  ``AWS_*`` variable of the shell that runs the tests.
* :class:`ThreadServer` — an ASGI app under a real uvicorn in a thread of this process, so a test
  can look inside (its event loop's tasks, this process's threads) after real TCP traffic.
* :func:`wait_ready` — the one wait until a server answers; :func:`free_port` (both from
  :mod:`server.process`).
* :class:`RawWS` — a WebSocket client on a bare socket: the handshake and frames written by hand,
  so it can send what no library would (bad opcodes, reserved bits, unmasked frames, lies about
  lengths) and disconnect abruptly (RST).

Standard library only (uvicorn is imported by :class:`ThreadServer` alone), so the tests that run
in the Python 3.12 venv, which has none of the server's dependencies, can start servers with it.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import struct
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from server.process import WS_PATH as WS
from server.process import ServerProcess as _ServerProcess
from server.process import free_port, wait_ready

__all__ = ["REPO", "WS", "Closed", "RawWS", "ServerProcess", "ThreadServer", "free_port", "wait_ready"]

REPO = Path(__file__).resolve().parents[2]
#: Variables a test server never inherits from the shell: its configuration is what the test says,
#: and no test reaches a real cloud account.
_CONFIG_PREFIXES = ("KOKORO_", "SAGEMAKER_", "RUNPOD_", "AWS_")


class ThreadServer:
    """``with ThreadServer(app) as srv:`` — uvicorn on a loopback port it bound itself, in a
    thread; ready once ``ready_path`` answers 200 (the app's model is loaded and warmed up)."""

    def __init__(self, app: Any, ready_path: str = "/ping", **config: Any):
        import uvicorn

        self.app = app
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready_path = ready_path
        self.loop = asyncio.new_event_loop()
        self.server = uvicorn.Server(uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2, ws_per_message_deflate=False,
            **config,
        ))
        self.thread = threading.Thread(target=self._run, name="uvicorn-test", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.serve(sockets=[self.sock]))

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        wait_ready(self.url + self.ready_path, timeout=120,
                   gone=lambda: None if self.thread.is_alive() else "the server thread ended")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.sock.close()

    def call(self, fn: Any) -> Any:
        """Run ``fn()`` on the server's loop and return its result."""

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def task_count(self) -> int:
        return self.call(lambda: len(asyncio.all_tasks()) - 1)  # not counting the probe itself


class ServerProcess(_ServerProcess):
    """A server process on a free loopback port (:class:`server.process.ServerProcess`) with the
    environment the test gives it, none of the shell's configuration, this interpreter's folder
    first on ``PATH`` and the repository as its working directory. ``ServerProcess(log_path,
    KOKORO_MODE="concurrent").wait_ready()``; ``argv`` runs another entry (it learns its port
    from the environment the test gives it)."""

    def __init__(self, log_path: Path, *, argv: Sequence[str] | None = None, port: int | None = None,
                 own_group: bool = False, **env: str):
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        super().__init__(argv, port=port, env={"KOKORO_LOG_LEVEL": "warning", "PATH": path, **env},
                         drop_env=_CONFIG_PREFIXES, log_path=log_path, own_group=own_group, cwd=REPO)


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


def answer(ws_url: str, text: str, request_id: str = "r1", timeout_s: float = 120.0) -> dict:
    """One request on a fresh session of a client that reads everything: its ``synthesis_complete``
    (any other event fails the test)."""
    import json

    from websockets.sync.client import connect

    with connect(ws_url, max_size=None) as ws:
        ws.send(json.dumps({"text": text, "request_id": request_id}))
        while True:
            frame = ws.recv(timeout=timeout_s)
            if isinstance(frame, str):
                event = json.loads(frame)
                assert event["type"] in ("synthesis_start", "synthesis_complete"), event
                if event["type"] == "synthesis_complete":
                    return event
