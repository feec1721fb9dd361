"""The real TTS server for the agent's tests, and a tap on its WebSocket that records the frames.

* :func:`fake_runtime_server` — ``python -m server serve`` with ``KOKORO_BACKEND=fake`` (the real app,
  sessions, text pipeline and scheduler; only the model is the fake runtime of ``backends/runtimes/fake.py``,
  whose per-segment latency ``segment_s`` stands in for synthesis time), as a
  ``tests.support.live.ServerProcess``; the Python 3.12 SDK tests cannot import the server, so there it
  runs under the project's 3.11 interpreter: ``$SERVER_PYTHON``, by default ``.venv/bin/python`` of the
  repository.
* :class:`WireTap` — a WebSocket proxy in front of the server's ``/invocations-bidirectional-stream``
  that forwards every frame unchanged (text stays text, binary stays binary, close codes pass through)
  and records them, so a test can assert what went over the wire: ``received`` (the frames the server
  got), ``log`` (their order against the server's answers) and ``audio_frames``.
* :func:`requests_total` — a ``kokoro_requests_total`` count from the server's ``/metrics``.

Standard library and ``websockets`` only, so the Python 3.12 tests can use it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from tests.support.live import REPO, WS, ServerProcess, free_port


@contextmanager
def fake_runtime_server(log_dir: Path, *, segment_s: float = 0.01) -> Iterator[ServerProcess]:
    """The real server over the fake runtime (``url``, ``ws_url``), under this interpreter, or under
    the project's 3.11 one where this is the 3.12 venv, which cannot import the server."""
    python = sys.executable
    if sys.version_info >= (3, 12):
        python = os.environ.get("SERVER_PYTHON") or str(REPO / ".venv" / "bin" / "python")
    port = free_port()
    srv = ServerProcess(log_dir / "server.log", argv=[python, "-m", "server", "serve"], port=port,
                        KOKORO_HOST="127.0.0.1", KOKORO_PORT=str(port), KOKORO_BACKEND="fake",
                        KOKORO_FAKE_SEGMENT_S=str(segment_s)).wait_ready(timeout=120)
    try:
        yield srv
    finally:
        srv.stop()


def requests_total(server_url: str, status: str) -> float:
    """``kokoro_requests_total`` over all routes for one status (``"200"``, ``"499"`` cancelled, ...)."""
    with urllib.request.urlopen(f"{server_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("kokoro_requests_total{") and f'status="{status}"' in line)


def _json_object(frame: str | bytes) -> dict | None:
    try:
        msg = json.loads(frame)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


class WireTap:
    """``with WireTap(server.ws_url) as tap:`` — connect clients to ``tap.url`` instead of the server.

    ``received``: ``(kind, message)`` per frame the server got, kind ``"text"`` or ``"binary"``,
    message the decoded JSON object (or None). ``log``: ``("received", request_id or type)`` per
    client frame and ``("start" | "complete" | "error", request_id)`` per server answer, in the order
    they passed. ``audio_frames``: binary frames the server sent. Runs its own loop in a thread.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.received: list[tuple[str, dict | None]] = []
        self.log: list[tuple[str, Any]] = []
        self.audio_frames = 0
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{WS}"

    def messages(self, kind: str | None = None) -> list[dict]:
        """The JSON messages the server received (of one ``type``; a request has none or ``synthesize``)."""
        msgs = [m for _, m in self.received if m is not None]
        if kind is None:
            return msgs
        return [m for m in msgs if m.get("type", "synthesize") == kind]

    # -- forwarding -------------------------------------------------------------------------------
    async def _to_server(self, client: ServerConnection, server: Any) -> None:
        try:
            async for frame in client:
                msg = _json_object(frame)
                self.received.append(("text" if isinstance(frame, str) else "binary", msg))
                self.log.append(("received", (msg or {}).get("request_id") or (msg or {}).get("type")))
                await server.send(frame)
        except ConnectionClosed:
            pass
        finally:
            await server.close()

    async def _to_client(self, client: ServerConnection, server: Any) -> None:
        try:
            async for frame in server:
                if isinstance(frame, bytes):
                    self.audio_frames += 1
                elif (msg := _json_object(frame)) is not None and msg.get("type") in ("synthesis_start", "error"):
                    self.log.append((msg["type"].removeprefix("synthesis_"), msg.get("request_id")))
                elif msg is not None and msg.get("type") == "synthesis_complete":
                    self.log.append(("complete", msg.get("request_id")))
                await client.send(frame)
        except ConnectionClosed:
            pass
        finally:
            code = server.close_code if server.close_code in (1000, 1001, 1009) else 1011
            await client.close(code, server.close_reason or "")

    async def _handle(self, client: ServerConnection) -> None:
        async with connect(self.upstream, max_size=None, compression=None) as server:
            await asyncio.gather(self._to_server(client, server), self._to_client(client, server),
                                 return_exceptions=True)

    async def _serve(self, ready: threading.Event) -> None:
        self._stop = asyncio.Event()
        async with serve(self._handle, "127.0.0.1", 0, max_size=None, compression=None) as proxy:
            self.port = proxy.sockets[0].getsockname()[1]
            ready.set()
            await self._stop.wait()

    def __enter__(self) -> WireTap:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._serve(ready))

        self._thread = threading.Thread(target=run, name="wire-tap", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the wire tap did not start")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)
