"""The one session core under every WebSocket protocol (the bidirectional stream, Deepgram, Cartesia,
ElevenLabs): :class:`WebSocketSession`. A protocol is a subclass — a *mapper* that turns wire
messages into calls on the text stream or its request queue and their events into wire messages;
reading, sending, closing, the idle timeout, draining and the error path live here, once.

Hooks a mapper overrides (all run on the event loop):

* ``ROUTE`` — the metrics label (``requests_total{route}``, ``send_timeouts_total{route}``).
* ``authorized(websocket, key)`` (classmethod) — the configured ``KOKORO_API_KEY`` against the key
  as the protocol's clients send it (default: ``Authorization: Bearer``). Only asked when a key is
  configured.
* ``refusal(error)`` (classmethod) — the message sent before the 1013/1008 close of a refused
  upgrade where the server cannot answer it with an HTTP status (default: none).
* ``await on_open()`` — after the upgrade was accepted (the protocol's greeting).
* ``await on_message(obj)`` — one client message, a JSON object, from a text or a binary frame;
  messages are handled one at a time, in order. Bad input is answered with the protocol's own
  error; an exception that escapes costs that message only (logged with its traceback, answered
  through ``on_bad_message`` as ``internal_error``).
* ``await on_bad_message(error)`` — a message that is not a JSON object (``invalid_json``).
  :attr:`WebSocketSession.message` is the message as sent.
* ``busy`` — audio is still owed: the idle timeout waits while it is.
* ``mid_turn`` — a turn the client started is not finished (its text may still be arriving):
  a drain waits for it. Defaults to ``busy``.
* ``on_drain()`` — the server began draining (``draining`` is already true): refuse new turns
  from here on with the protocol's error; turns already started go on.
* ``await on_cut(error)`` — the session is being cut (the drain ran out of time, the server is
  stopping) with turns unfinished: stop them and send the protocol's typed error for each. Called
  once the session's own tasks stopped, before ``on_close``; bounded by a short timeout.
* ``await on_close()`` — the socket is closing: stop every stream (idempotent).

Tools: ``await send_json(obj)``, ``await send_bytes(data)`` (serialised; each bounded by
``send_timeout_s``: a client that stops reading pauses its streams and, after that long, the
session closes 1008 and is counted once), ``close(code, reason)`` (end the session after the
current message; the first close wins and repeating it changes nothing), ``spawn(coro, name)``
(a task of the session: cancelled when it ends; its failure is the session's), ``send_failed(error)``
(a send that failed in another task).

Limits, the same on every protocol: a message over ``max_message_bytes`` closes 1009; no message
and no audio owed for ``idle_timeout_s`` closes 1000; a drain closes 1001 once no turn is
unfinished; a cut turn gets the protocol's error (``not_ready``) before the 1001 close; a task
that fails is logged with its traceback and closes 1011.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Coroutine
from typing import Any, ClassVar

from starlette.websockets import WebSocket, WebSocketDisconnect

from backends.api import KokoroError, NotReady
from server.auth import bearer_token, key_matches
from server.pipeline.params import decode_object
from server.pipeline.synthesis import SendTimeout, bounded_send
from server.state import ServerState
from server.websocket.socket_io import MessageTooLarge, close_socket, receive_message

log = logging.getLogger("kokoro.websocket")
#: How long the errors of a cut session may take to send (the client may not be reading).
CUT_SEND_S = 2.0
#: How often the watch looks again while audio is owed or the server drains.
_POLL_S = 0.05
_GONE = (WebSocketDisconnect, RuntimeError, OSError)


class WebSocketSession:
    """One client connection of one WebSocket protocol (see the module docstring)."""

    ROUTE: ClassVar[str] = "ws"

    def __init__(self, websocket: WebSocket, state: ServerState) -> None:
        self.ws = websocket
        self.state = state
        self.settings = state.settings
        self.id = uuid.uuid4().hex[:12]
        self.draining = False
        #: The client message being handled, as sent (``bytes`` or ``str``).
        self.message: bytes | str = b""
        self._send_lock = asyncio.Lock()
        self._close: tuple[int, str] | None = None
        self._cut: KokoroError | None = None
        self._stop = asyncio.Event()
        self._nudge = asyncio.Event()  # wakes the watch: the drain began
        self._finished = asyncio.Event()
        self._peer_closed = False
        self._stalled = False
        self._last_activity = time.monotonic()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- hooks --------------------------------------------------------------------------------
    @classmethod
    def authorized(cls, websocket: WebSocket, key: str) -> bool:
        return key_matches(key, bearer_token(websocket.headers))

    @classmethod
    def refusal(cls, error: KokoroError) -> dict[str, Any] | None:
        return None

    async def on_open(self) -> None:
        return None

    async def on_message(self, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    async def on_bad_message(self, error: KokoroError) -> None:
        raise NotImplementedError

    @property
    def busy(self) -> bool:
        return False

    @property
    def mid_turn(self) -> bool:
        return self.busy

    def on_drain(self) -> None:
        return None

    async def on_cut(self, error: KokoroError) -> None:
        return None

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

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """A task of this session: cancelled when the session ends; if it fails, the session ends
        through the error path (a send that failed, or a fault: logged, 1011)."""
        task = asyncio.create_task(coro, name=f"{self.ROUTE}-{self.id}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def send_failed(self, error: BaseException) -> None:
        """A send failed: the client stopped reading (1008, counted once) or went away; anything
        else is a fault (logged with its traceback, 1011)."""
        if isinstance(error, SendTimeout):
            if not self._stalled:
                self._stalled = True
                log.warning("%s session %s: %s; closing", self.ROUTE, self.id, error.message)
                self.state.metrics.send_timed_out(self.ROUTE)
                self._close = (1008, "send timeout: the client is not reading")
        elif not isinstance(error, _GONE):
            self.fail(error)
        self._stop.set()

    def fail(self, error: BaseException, what: str = "a task") -> None:
        """The error path: a fault ends the session (logged with its traceback, 1011)."""
        log.error("%s session %s: %s failed", self.ROUTE, self.id, what, exc_info=error)
        self._close = self._close or (1011, "internal error")
        self._stop.set()

    def touch(self) -> None:
        self._last_activity = time.monotonic()

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, (SendTimeout, *_GONE)):
            self.send_failed(error)
        elif error is not None:
            self.fail(error, task.get_name())

    # -- lifecycle ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the accepted socket until it closes. Never raises."""
        own = [
            self.spawn(self._read(), "read"),
            self.spawn(self._watch(), "watch"),
        ]
        try:
            await self.on_open()
            await self._stop.wait()
        except (SendTimeout, *_GONE) as e:
            self.send_failed(e)
        except Exception as e:
            self.fail(e, "opening")
        finally:
            try:
                await self._stop_tasks(own)
                if self._cut is not None:
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(CUT_SEND_S):
                            await self.on_cut(self._cut)
                try:
                    await self.on_close()
                except Exception as e:
                    log.error("%s session %s: closing failed", self.ROUTE, self.id, exc_info=e)
                if not self._peer_closed:
                    await close_socket(self.ws, self._close, stalled=self._stalled,
                                       timeout_s=self.settings.send_timeout_s)
            finally:
                self._finished.set()

    async def _stop_tasks(self, own: list[asyncio.Task[Any]]) -> None:
        tasks = {*own, *self._tasks}
        for task in tasks:
            task.cancel()
        # asyncio.wait, not gather: when this task is cancelled itself, the CancelledError that
        # surfaces is its own (anyio/TestClient match it by message), not a child's.
        if tasks:
            await asyncio.wait(tasks)

    @property
    def cut_error(self) -> KokoroError | None:
        """The error a cut session's unfinished turns get (set before its tasks are stopped), else None."""
        return self._cut

    def begin_drain(self) -> None:
        """The server drains: new turns are refused; the session closes 1001 once no turn is
        unfinished (the watch sees to it)."""
        if not self.draining:
            self.draining = True
            self.on_drain()
            self._nudge.set()

    async def abort(self, code: int, reason: str) -> None:
        """Cut the session now (the drain ran out of time, the server stops): unfinished turns get
        the protocol's error, then the socket closes ``code``."""
        self._close = (code, reason)
        self._cut = NotReady("the server shut down before this finished; retry elsewhere")
        self._stop.set()
        await self._finished.wait()

    # -- the reader and the watch ---------------------------------------------------------------
    async def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = await receive_message(self.ws, self.settings.max_message_bytes)
            except MessageTooLarge as e:
                log.info("%s session %s: message of %d bytes over the %d-byte limit; closing 1009",
                         self.ROUTE, self.id, e.size, e.limit)
                self.close(1009, str(e))
                return
            if data is None:
                self._peer_closed = True
                self._stop.set()
                return
            self.touch()
            self.message = data
            await self._handle(data)

    async def _handle(self, data: bytes | str) -> None:
        try:
            obj = decode_object(data)
        except KokoroError as e:
            await self.on_bad_message(e)
            return
        try:
            await self.on_message(obj)
        except (SendTimeout, *_GONE):
            raise
        except Exception:  # a mapper bug costs this one message, not the session
            log.exception("%s session %s: could not process a message", self.ROUTE, self.id)
            await self.on_bad_message(KokoroError("the server could not process this message"))

    async def _watch(self) -> None:
        """The idle timeout and the end of a drain."""
        timeout = self.settings.idle_timeout_s
        while True:
            if self.draining and not self.mid_turn:
                self.close(1001, "server shutting down")
                return
            if self.busy:
                self.touch()
            remaining = self._last_activity + timeout - time.monotonic()
            if remaining <= 0:
                log.info("%s session %s: idle for %.0fs; closing", self.ROUTE, self.id, timeout)
                self.close(1000, "idle timeout")
                return
            self._nudge.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, _POLL_S) if self.draining or self.busy else remaining):
                    await self._nudge.wait()
