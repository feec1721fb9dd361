"""A WebSocket tap between a client under test and the server: a loopback proxy that records what
crossed each connection (client messages in order, the audio bytes and events the server sent
after each of them), so a test can tell what the *server* stopped, not only what the client
dropped. Nothing here sleeps to observe order: every wait is on an event a passing frame sets.
Needs only ``websockets``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Wire:
    """What crossed one connection, in order: ``log`` holds ``("sent", message)`` for each client
    message (JSON), ``("audio", n_bytes)`` for each binary frame of the server and ``("event",
    message)`` for each of its JSON messages."""

    path: str = ""
    log: list[tuple[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def note(self, kind: str, item: Any) -> None:
        self.log.append((kind, item))
        self.times.append(round(time.monotonic(), 2))
        self._changed.set()

    async def wait_until(self, condition: Callable[[Wire], bool]) -> None:
        """Until ``condition(wire)`` holds (checked whenever a frame passes)."""
        while not condition(self):
            self._changed.clear()
            await self._changed.wait()

    def sent(self) -> list[dict]:
        return [m for kind, m in self.log if kind == "sent"]

    def events(self) -> list[dict]:
        return [m for kind, m in self.log if kind == "event"]

    def audio_frames_between(self, sent_type: str, event_type: str) -> list[int]:
        """Sizes of the audio frames the server sent after the last client ``sent_type`` message
        and before its next ``event_type`` message (what a Clear let through before Cleared)."""
        start = max(i for i, (kind, m) in enumerate(self.log) if kind == "sent" and m.get("type") == sent_type)
        out = []
        for kind, m in self.log[start + 1:]:
            if kind == "event" and m.get("type") == event_type:
                return out
            if kind == "audio":
                out.append(m)
        raise AssertionError(f"no {event_type} after {sent_type}")

    def audio_after(self, index: int) -> int:
        """Audio bytes the server sent after the ``index``-th entry of the log."""
        return sum(m for kind, m in self.log[index + 1:] if kind == "audio")


class FrameTap:
    """``async with FrameTap(upstream) as tap:`` — a loopback WebSocket proxy to ``upstream``
    (``ws://host:port``) that keeps the path, query and ``Authorization`` header of each
    connection; ``tap.base`` is its address, ``tap.wires`` one :class:`Wire` per connection.
    A client message is logged before it is forwarded, so the log never shows an answer before
    the message it answers.
    Frames pass through unchanged, in order (one task per direction)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.wires: list[Wire] = []
        self.base = ""
        self._server: Any = None

    async def __aenter__(self) -> FrameTap:
        from websockets.asyncio.server import serve

        self._server = await serve(self._handle, "127.0.0.1", 0, max_size=None, compression=None)
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.base = f"ws://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, client: Any) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        path = client.request.path
        wire = Wire(path)
        self.wires.append(wire)
        headers = {k: v for k, v in client.request.headers.raw_items() if k.lower() == "authorization"}
        async with connect(self.upstream + path, additional_headers=headers, max_size=None, compression=None) as srv:

            async def up() -> None:
                try:
                    async for frame in client:
                        try:
                            wire.note("sent", json.loads(frame))
                        except ValueError:
                            wire.note("sent", {})
                        await srv.send(frame)
                except ConnectionClosed:
                    pass
                finally:
                    await srv.close()

            async def down() -> None:
                try:
                    async for frame in srv:
                        if isinstance(frame, bytes):
                            wire.note("audio", len(frame))
                        else:
                            wire.note("event", json.loads(frame))
                        await client.send(frame)
                except ConnectionClosed:
                    pass
                finally:
                    await client.close()

            await asyncio.gather(up(), down(), return_exceptions=True)
