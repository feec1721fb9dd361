"""Drive the ASGI app directly on the test's own event loop — no server, no thread hops — for the
tests that send thousands of requests (a ``TestClient`` call crosses threads twice and costs
milliseconds on a busy 2-core machine; this costs tens of microseconds).

``async with running(app):`` runs the lifespan; :func:`post` makes one HTTP request;
:class:`WSConn` is one WebSocket session. The messages are the ASGI spec's, as uvicorn sends them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

_BASE = {"asgi": {"version": "3.0"}, "server": ("testserver", 80), "client": ("127.0.0.1", 50000),
         "root_path": "", "query_string": b""}


@asynccontextmanager
async def running(app: Any) -> AsyncIterator[Any]:
    """Start the app's lifespan (the backend loads and warms up), stop it on exit."""
    inbox: asyncio.Queue = asyncio.Queue()
    outbox: asyncio.Queue = asyncio.Queue()
    task = asyncio.create_task(app({"type": "lifespan", **_BASE}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    try:
        yield app
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await outbox.get()
        await task


async def post(app: Any, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One POST; returns (status, whole body)."""
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    raw_headers.append((b"content-length", str(len(body)).encode()))
    scope = {"type": "http", "http_version": "1.1", "method": "POST", "scheme": "http", "path": path,
             "raw_path": path.encode(), "headers": raw_headers, **_BASE}
    sent = False
    status = 0
    parts: list[bytes] = []
    done = asyncio.Event()

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                done.set()

    await app(scope, receive, send)
    done.set()
    return status, b"".join(parts)


class WSConn:
    """One WebSocket session. ``await WSConn.open(app)``; ``status`` is 101 or the denial's."""

    def __init__(self, app: Any, path: str, headers: dict[str, str] | None):
        self.to_app: asyncio.Queue = asyncio.Queue()
        self.from_app: asyncio.Queue = asyncio.Queue()
        scope = {"type": "websocket", "scheme": "ws", "path": path, "raw_path": path.encode(), "subprotocols": [],
                 "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
                 "extensions": {"websocket.http.response": {}}, **_BASE}
        self.task = asyncio.create_task(app(scope, self.to_app.get, self.from_app.put))
        self.status = 0
        self.closed: int | None = None

    @classmethod
    async def open(cls, app: Any, path: str, headers: dict[str, str] | None = None) -> WSConn:
        conn = cls(app, path, headers)
        await conn.to_app.put({"type": "websocket.connect"})
        first = await conn.from_app.get()
        if first["type"] == "websocket.accept":
            conn.status = 101
        elif first["type"] == "websocket.http.response.start":
            conn.status = first["status"]
            await conn.task
        else:
            conn.closed = first.get("code", 1000)
        return conn

    async def send(self, data: bytes | str) -> None:
        key = "bytes" if isinstance(data, bytes) else "text"
        await self.to_app.put({"type": "websocket.receive", key: data})

    async def recv(self) -> dict:
        """The next event as a dict: text frames parsed, binary as ``{'kind': 'audio'}``, a close as
        ``{'kind': 'close', 'code'}``."""
        message = await self.from_app.get()
        if message["type"] == "websocket.close":
            self.closed = message.get("code", 1000)
            return {"kind": "close", "code": self.closed}
        if message.get("bytes") is not None:
            return {"kind": "audio", "bytes": len(message["bytes"])}
        return {"kind": "text", **json.loads(message["text"])}

    async def answer(self) -> list[dict]:
        """One request's frames up to its terminal event (or a close)."""
        out: list[dict] = []
        while True:
            event = await self.recv()
            out.append(event)
            if event["kind"] == "close" or event.get("type") in ("synthesis_complete", "error"):
                return out

    async def disconnect(self, code: int = 1000) -> None:
        """The client goes away (as uvicorn reports it) and the session unwinds."""
        await self.to_app.put({"type": "websocket.disconnect", "code": code})
        await asyncio.wait_for(self.task, 30)
