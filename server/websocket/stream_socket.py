"""The socket side every streaming-input protocol shares (Deepgram ``/v1/speak``, Cartesia,
ElevenLabs): admission at the upgrade, the protocol's own key, reading, bounded sends, idle
timeout, draining. A protocol is a subclass that maps messages onto
:class:`~server.streaming.text_stream.TextStream` objects; it never synthesises on its own.

Subclass hooks (all on the event loop):

* ``ROUTE`` — the metrics label (``requests_total{route}``, ``send_timeouts_total{route}``).
* ``authorized(websocket, key) -> bool`` (classmethod) — the configured ``KOKORO_API_KEY`` against
  the key as the protocol's clients send it (use :func:`server.auth.key_matches`). Only called when
  a key is configured; without one any key is accepted.
* ``await on_open()`` — after the upgrade was accepted (send the protocol's greeting).
* ``await on_message(obj)`` — one client message, a JSON object (sent as a text or a binary frame);
  messages are handled one at a time, in order. Raise nothing: answer bad input with the
  protocol's own warning or error.
* ``await on_bad_message(error)`` — a message that is not a JSON object (``invalid_json``): answer
  with the protocol's own warning or error; the session goes on.
* ``busy`` — whether audio is still owed (the idle timeout and draining wait while it is).
* ``await on_close()`` — the socket is closing: stop every stream.

Tools: ``await send_json(obj)``, ``await send_bytes(data)`` (serialised, each bounded by
``send_timeout_s``: a client that stops reading pauses its streams and, after that long, the
session closes 1008 and is counted), ``close(code, reason)`` (end the session after the current
message), ``send_failed(error)`` (for a send that failed in another task, e.g. a context's pump).

Limits as on the bidi route: a message over ``max_message_bytes`` closes 1009; no message and no
audio owed for ``idle_timeout_s`` closes 1000; shutdown closes 1001 once the audio owed has been
sent (or at once when the drain times out).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from backends.api import KokoroError
from server.pipeline.params import decode_object
from server.pipeline.synthesis import SendTimeout, bounded_send
from server.sagemaker.bidi import admit_and_serve
from server.state import ServerState
from server.websocket.socket_io import MessageTooLarge, close_socket, receive_message

log = logging.getLogger("kokoro.stream_socket")


class StreamSocket:
    """One client connection of a streaming-input protocol (see the module docstring)."""

    ROUTE: ClassVar[str] = "stream"

    def __init__(self, websocket: WebSocket, state: ServerState) -> None:
        self.ws = websocket
        self.state = state
        self.settings = state.settings
        self.id = uuid.uuid4().hex[:12]
        self.draining = False
        self._send_lock = asyncio.Lock()
        self._close: tuple[int, str] | None = None
        self._stop = asyncio.Event()
        self._finished = asyncio.Event()
        self._peer_closed = False
        self._stalled = False
        self._last_activity = time.monotonic()
        self._tasks: list[asyncio.Task[Any]] = []

    # -- hooks --------------------------------------------------------------------------------
    @classmethod
    def authorized(cls, websocket: WebSocket, key: str) -> bool:
        return False

    async def on_open(self) -> None:
        return None

    async def on_message(self, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    async def on_bad_message(self, error: KokoroError) -> None:
        raise NotImplementedError

    @property
    def busy(self) -> bool:
        return False

    async def on_close(self) -> None:
        return None

    # -- tools --------------------------------------------------------------------------------
    async def send_json(self, obj: dict[str, Any]) -> None:
        await self._send(self.ws.send_text(json.dumps(obj)))

    async def send_bytes(self, data: bytes) -> None:
        await self._send(self.ws.send_bytes(data))

    async def _send(self, send: Awaitable[None]) -> None:
        async with self._send_lock:
            try:
                await bounded_send(send, self.settings.send_timeout_s)
            except SendTimeout as e:
                self.send_failed(e)
                raise
        self.touch()

    def close(self, code: int = 1000, reason: str = "") -> None:
        self._close = self._close or (code, reason)
        self._stop.set()

    def send_failed(self, error: BaseException) -> None:
        """A send failed: the client stopped reading (1008, counted once) or went away."""
        if isinstance(error, SendTimeout):
            if not self._stalled:
                self._stalled = True
                log.warning("%s session %s: %s; closing", self.ROUTE, self.id, error.message)
                self.state.metrics.send_timed_out(self.ROUTE)
                self._close = (1008, "send timeout: the client is not reading")
        elif not isinstance(error, (WebSocketDisconnect, RuntimeError, OSError)):
            log.error("%s session %s: a send failed", self.ROUTE, self.id, exc_info=error)
            self._close = self._close or (1011, "internal error")
        self._stop.set()

    def touch(self) -> None:
        self._last_activity = time.monotonic()

    # -- lifecycle ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the accepted socket until it closes. Never raises."""
        self._tasks = [
            asyncio.create_task(self._read(), name=f"{self.ROUTE}-{self.id}-read"),
            asyncio.create_task(self._watch(), name=f"{self.ROUTE}-{self.id}-watch"),
            asyncio.create_task(self._stop.wait(), name=f"{self.ROUTE}-{self.id}-stop"),
        ]
        try:
            await self.on_open()
            done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                error = None if task.cancelled() else task.exception()
                if error is not None and not isinstance(error, (WebSocketDisconnect, SendTimeout)):
                    log.error("%s session %s: %s failed", self.ROUTE, self.id, task.get_name(), exc_info=error)
                    self._close = self._close or (1011, "internal error")
        except (WebSocketDisconnect, SendTimeout, RuntimeError, OSError) as e:
            self.send_failed(e)
        finally:
            try:
                for task in self._tasks:
                    task.cancel()
                await asyncio.wait(self._tasks)
                with contextlib.suppress(Exception):
                    await self.on_close()
                await self._close_socket()
            finally:
                self._finished.set()

    def begin_drain(self) -> None:
        """Shutdown: the session closes 1001 once the audio it owes has been sent."""
        self.draining = True

    async def abort(self, code: int, reason: str) -> None:
        self.close(code, reason)
        self._close = (code, reason)
        await self._finished.wait()

    async def _close_socket(self) -> None:
        if not self._peer_closed:
            await close_socket(self.ws, self._close, stalled=self._stalled, timeout_s=self.settings.send_timeout_s)

    async def _read(self) -> None:
        while True:
            try:
                data = await receive_message(self.ws, self.settings.max_message_bytes)
            except MessageTooLarge as e:
                log.info("%s session %s: message of %d bytes over the limit; closing 1009", self.ROUTE, self.id, e.size)
                self.close(1009, str(e))
                return
            if data is None:
                self._peer_closed = True
                return
            self.touch()
            try:
                obj = decode_object(data)
            except KokoroError as e:
                await self.on_bad_message(e)
            else:
                await self.on_message(obj)
            if self._stop.is_set():
                return

    async def _watch(self) -> None:
        """The idle timeout and the end of a drain."""
        timeout = self.settings.idle_timeout_s
        while True:
            if self.busy:
                self.touch()
            elif self.draining:
                self.close(1001, "server shutting down")
                return
            remaining = self._last_activity + timeout - time.monotonic()
            if remaining <= 0:
                log.info("%s session %s: idle for %.0fs; closing", self.ROUTE, self.id, timeout)
                self.close(1000, "idle timeout")
                return
            await asyncio.sleep(min(remaining, 0.05 if self.draining or self.busy else remaining))


def stream_endpoint(session_class: type[StreamSocket]) -> Callable[[WebSocket], Awaitable[None]]:
    """The WebSocket route of ``session_class``: admission (loaded, not draining, ``max_sessions``),
    the protocol's key where ``KOKORO_API_KEY`` is set, then one session."""

    async def endpoint(websocket: WebSocket) -> None:
        state: ServerState = websocket.app.state.kokoro
        key = state.settings.api_key
        if key is not None and not session_class.authorized(websocket, key.get_secret_value()):
            await _deny(websocket, KokoroError("missing or wrong API key", code="unauthorized"), 401)
            return
        await admit_and_serve(websocket, session_class.ROUTE, session_class, lambda ws, e: _deny(ws, e, e.status))

    return endpoint


async def _deny(websocket: WebSocket, error: KokoroError, status: int) -> None:
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(JSONResponse({"error": error.to_dict()}, status_code=status))
        return
    await websocket.accept()
    await websocket.close(1008 if status == 401 else 1013, error.code)
