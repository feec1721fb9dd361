"""What every WebSocket session does with its socket: read the next client message within the size
limit (text and binary frames alike — SageMaker delivers client messages as binary), and close it
without waiting on a client that stopped reading."""

from __future__ import annotations

import contextlib

from starlette.websockets import WebSocket

from server.pipeline.synthesis import bounded_send


class MessageTooLarge(Exception):
    """A client message over ``max_message_bytes``: the session closes 1009."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"message over {limit} bytes")
        self.size, self.limit = size, limit


async def receive_message(ws: WebSocket, limit: int) -> bytes | str | None:
    """The next client message, as sent (``bytes`` for a binary frame, ``str`` for a text frame), or
    ``None`` once the client disconnected. Raises :class:`MessageTooLarge` over ``limit`` bytes."""
    message = await ws.receive()
    if message["type"] == "websocket.disconnect":
        return None
    data = message.get("bytes")
    if data is None:
        data = message.get("text") or ""
    size = len(data) if isinstance(data, bytes) else len(data.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise MessageTooLarge(size, limit)
    return data


async def close_socket(ws: WebSocket, close: tuple[int, str] | None, *, stalled: bool, timeout_s: float) -> None:
    """Send the close frame (``close``, else 1000) within ``timeout_s``; a client that stopped
    reading (``stalled``) cannot take it either, so it is only queued. Never raises."""
    code, reason = close or (1000, "")
    with contextlib.suppress(Exception):
        await bounded_send(ws.close(code, reason), 0.01 if stalled else timeout_s)
