"""The WebSocket session state machine of ``/invocations-bidirectional-stream`` (docs/wire-contract.md);
the route itself (admission at the upgrade) is ``server.sagemaker.bidi``.

One :class:`Session` per socket, three tasks:

* the **reader** takes every message (text or binary frame, both decoded as UTF-8 JSON), validates
  it and queues it — a synthesis request or, for a bad message, its error — so that every answer
  leaves in the order the messages came; ``cancel`` and the size limit act at once;
* the **worker** answers the queue strictly in order, one request at a time, so pipelined
  requests never interleave: ``synthesis_start``, one binary PCM s16le frame per segment as soon
  as the backend yields it, ``synthesis_complete`` — or a single ``error`` event;
* the **idle watch** closes the session (1000) after ``idle_timeout_s`` without messages or work.

Backpressure: the worker pulls the next chunk from the backend only once the last one was handed
to the socket, so a client that stops reading pauses its own synthesis (and the reader, whose
answers wait too, stops reading its messages). A send that makes no progress for
``send_timeout_s`` closes the session (1008, counted in ``send_timeouts_total``); other sessions
are not held up.

Every request gets exactly one terminal event: ``synthesis_complete`` or ``error`` (a cancelled
request gets ``error`` with code ``cancelled``). Errors never close the session; only a message
over ``max_message_bytes`` does (1009), as do ``close`` (1000, after the queue), the idle timeout
(1000), shutdown (1001, after the queue) and a client that stopped reading (1008, when the close
frame can still be queued). The one answer that may arrive out of order is the rejection of a
message that found the session's queue full (``overloaded``): it is sent at once.
Each request goes through the synthesis pipeline (``server.pipeline.synthesis``), which also counts it:
every queued message is one request in ``requests_total{route="ws"}``, answered or not (499).
Inference never runs here: the backend synthesises on its own threads; closing the stream
(cancel, disconnect) aborts the request's pending segments.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from backends.api import (
    SAMPLE_RATE,
    BackendFault,
    InvalidRequest,
    KokoroError,
    NotReady,
    Overloaded,
    SynthesisRequest,
)
from server.pipeline.params import (
    SynthesisParams,
    decode_object,
    message_type,
    parse_synthesis,
    request_id_of,
    salvage_request_id,
)
from server.pipeline.synthesis import Cancelled, SendTimeout, Synthesis, bounded_send, retrieve
from server.state import ServerState
from server.websocket.socket_io import MessageTooLarge, close_socket, receive_message

log = logging.getLogger("kokoro.ws")
ROUTE = "ws"


@dataclass(eq=False, slots=True)
class _Item:
    request_id: str | int | None
    received: float
    params: SynthesisParams | None = None
    error: KokoroError | None = None
    cancelled: bool = False


_CLOSE = object()


class Session:
    """One client connection. Lives on the event loop; see the module docstring for the contract."""

    def __init__(self, websocket: WebSocket, state: ServerState):
        self.ws = websocket
        self.state = state
        self.settings = state.settings
        self.id = uuid.uuid4().hex[:12]
        self._queue: deque[Any] = deque()
        self._wake = asyncio.Event()
        self._send_lock = asyncio.Lock()
        self._current: _Item | None = None
        self._synth_task: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._close: tuple[int, str] | None = None
        self._peer_closed = False
        self._closing = False  # the client sent {"type": "close"}
        self._draining = False
        self._finished = asyncio.Event()
        self._last_activity = time.monotonic()
        self._stalled = False

    # -- lifecycle ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the accepted socket until it closes. Never raises."""
        self._tasks = [
            asyncio.create_task(self._read(), name=f"ws-{self.id}-read"),
            asyncio.create_task(self._work(), name=f"ws-{self.id}-work"),
            asyncio.create_task(self._watch_idle(), name=f"ws-{self.id}-idle"),
        ]
        try:
            done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                self._ended(task)
        finally:
            try:
                children = [t for t in (*self._tasks, self._synth_task) if t is not None]
                for task in children:
                    task.cancel()
                # asyncio.wait, not gather: when this task is cancelled itself, the CancelledError
                # that surfaces is its own (anyio/TestClient match it by message), not a child's.
                await asyncio.wait(children)
                # Accepted but never answered (the client left, or the session was cut): counted
                # as 499 so that requests_total accounts for every request.
                for item in self._queue:
                    if item is not _CLOSE:
                        self._job(item).record(Cancelled.status, Cancelled.code)
                await self._close_socket()
            finally:
                self._finished.set()

    def _ended(self, task: asyncio.Task[None]) -> None:
        """Why ``task`` ended: a stalled client (closed 1008, counted), a fault (1011), or normally."""
        error = None if task.cancelled() else task.exception()
        if isinstance(error, SendTimeout):
            if self._stalled:  # the reader and the worker both gave up on the same client
                return
            log.warning("session %s: %s; closing", self.id, error.message)
            self.state.metrics.send_timed_out(ROUTE)
            self._close = (1008, "send timeout: the client is not reading")
            self._stalled = True
        elif error is not None and not isinstance(error, WebSocketDisconnect):
            log.error("session %s: %s failed", self.id, task.get_name(), exc_info=error)
            self._close = self._close or (1011, "internal error")

    def begin_drain(self) -> None:
        """Shutdown: refuse new requests, finish the queue, then close 1001."""
        self._draining = True
        self._wake.set()

    async def abort(self, code: int, reason: str) -> None:
        """Stop now (drain timeout): abort work in flight and close with ``code``."""
        self._close = (code, reason)
        for task in self._tasks:
            task.cancel()
        await self._finished.wait()

    async def _close_socket(self) -> None:
        if not self._peer_closed:
            await close_socket(self.ws, self._close, stalled=self._stalled, timeout_s=self.settings.send_timeout_s)

    # -- reading ------------------------------------------------------------------------------
    async def _read(self) -> None:
        while True:
            try:
                data = await receive_message(self.ws, self.settings.max_message_bytes)
            except MessageTooLarge as e:
                log.info("session %s: message of %d bytes over the %d-byte limit; closing 1009", self.id, e.size, e.limit)
                self._close = (1009, str(e))
                return
            if data is None:
                self._peer_closed = True
                return
            self._touch()
            await self._handle(data, time.perf_counter())

    async def _handle(self, data: bytes | str, received: float) -> None:
        try:
            obj = decode_object(data)
        except KokoroError as e:  # still answered with the message's id where one can be read
            await self._enqueue(_Item(salvage_request_id(data), received, error=e))
            return
        rid = request_id_of(obj)
        try:
            kind = message_type(obj)
            if kind == "cancel":
                self._cancel(obj)
                return
            if kind == "close":
                self._closing = True
                self._queue.append(_CLOSE)
                self._wake.set()
                return
            if self._closing:
                raise InvalidRequest("the session is closing; no new requests after 'close'")
            if self._draining:
                raise NotReady("server is shutting down")
            params = parse_synthesis(obj, max_text_chars=self.settings.max_text_chars)
        except KokoroError as e:
            await self._enqueue(_Item(rid, received, error=e))
            return
        except Exception:  # a decoder bug costs this one message, not the session (it closed 1011)
            log.exception("session %s: could not process a message", self.id)
            await self._enqueue(_Item(rid, received, error=KokoroError("the server could not process this message")))
            return
        await self._enqueue(_Item(params.request_id, received, params=params))

    async def _enqueue(self, item: _Item) -> None:
        if self._closing or self._draining:  # the worker may be gone: answer at once
            await self._answer_now(item)
        elif sum(1 for i in self._queue if i is not _CLOSE) >= self.settings.max_queued_per_session:
            if item.params is not None:
                item.error = Overloaded(
                    f"{self.settings.max_queued_per_session} requests are already queued on this session"
                )
            await self._answer_now(item)
        else:
            self._queue.append(item)
            self._wake.set()

    async def _answer_now(self, item: _Item) -> None:
        await self._refuse(item, item.error or Overloaded("the session cannot take more requests"))

    def _cancel(self, obj: dict[str, Any]) -> None:
        target = obj.get("request_id")
        for item in self._queue:
            if item is not _CLOSE and item.params is not None and (target is None or item.request_id == target):
                item.cancelled = True
        current = self._current
        if current is not None and (target is None or current.request_id == target):
            current.cancelled = True
            if self._synth_task is not None:
                self._synth_task.cancel()

    # -- answering ----------------------------------------------------------------------------
    async def _next(self) -> Any:
        while not self._queue:
            if self._draining:
                return None
            self._wake.clear()
            await self._wake.wait()
        return self._queue.popleft()

    async def _work(self) -> None:
        while True:
            item = await self._next()
            if item is None:
                self._close = (1001, "server shutting down")
                return
            if item is _CLOSE:
                self._close = (1000, "closed by client")
                return
            self._current = item
            try:
                await self._answer(item)
            finally:
                self._current = None
                self._touch()

    def _job(self, item: _Item) -> Synthesis:
        return Synthesis(self.state.backend, ROUTE, state=self.state, received=item.received)

    async def _refuse(self, item: _Item, error: KokoroError) -> None:
        async with self._job(item) as job:
            job.fail(error)
            await self._send_error(item.request_id, error)

    async def _answer(self, item: _Item) -> None:
        """One request, start to end; cut short (cancelled by the session), it counts as 499."""
        if item.error is not None or item.cancelled:
            await self._refuse(item, item.error or Cancelled("cancelled by the client"))
            return
        async with self._job(item) as job:
            task = asyncio.create_task(self._synthesize(item, job), name=f"ws-{self.id}-synth")
            self._synth_task = task
            try:
                await asyncio.wait({task})
            finally:
                if not task.done():
                    task.cancel()
                    task.add_done_callback(retrieve)
                self._synth_task = None
            if task.cancelled():
                error = Cancelled("cancelled by the client")
                job.fail(error)
                await self._send_error(item.request_id, error)
                return
            task.result()  # re-raises WebSocketDisconnect: the session ends

    async def _synthesize(self, item: _Item, job: Synthesis) -> None:
        p = item.params
        assert p is not None
        rate = p.sample_rate or SAMPLE_RATE
        job.request_id = str(p.request_id)
        job.use_encoder("pcm", rate)
        request = SynthesisRequest(
            text=p.text, voice=p.voice, speed=p.speed, lang=p.lang, request_id=job.request_id, session=self.id
        )
        samples = 0
        try:
            first = await job.open(request)
            await self._send_json(self._start_event(p, rate))
            async for pcm in job.encoded(first):
                await bounded_send(self.ws.send_bytes(pcm), self.settings.send_timeout_s)
                samples += len(pcm) // 2
                job.first_audio()
        except SendTimeout as e:
            job.fail(e)
            raise
        except KokoroError as e:
            job.fail(e)
            await self._send_error(p.request_id, e)
            return
        except WebSocketDisconnect:
            raise
        except Exception as e:
            log.exception("session %s: request %s failed", self.id, p.request_id)
            fault = BackendFault(f"synthesis failed: {type(e).__name__}")
            job.fail(fault)
            await self._send_error(p.request_id, fault)
            return
        done = time.perf_counter()
        job.record(200)
        await self._send_json({
            "type": "synthesis_complete",
            "request_id": p.request_id,
            "audio_duration_s": round(samples / rate, 4),
            "elapsed_s": round(done - item.received, 4),
            "ttfa_ms": round(((job.first_audio_at or done) - item.received) * 1000, 1),
        })

    def _start_event(self, p: SynthesisParams, rate: int) -> dict[str, Any]:
        event = {
            "type": "synthesis_start",
            "request_id": p.request_id,
            "sample_rate": rate,
            "encoding": "pcm_s16le",
            "channels": 1,
        }
        if p.request_timestamp is not None:
            event["request_timestamp"] = p.request_timestamp
        return event

    # -- helpers ------------------------------------------------------------------------------
    def _touch(self) -> None:
        self._last_activity = time.monotonic()

    async def _send_json(self, event: dict[str, Any]) -> None:
        async with self._send_lock:
            await bounded_send(self.ws.send_text(json.dumps(event)), self.settings.send_timeout_s)

    async def _send_error(self, request_id: Any, error: KokoroError) -> None:
        await self._send_json({"type": "error", "request_id": request_id, **error.to_dict()})

    async def _watch_idle(self) -> None:
        timeout = self.settings.idle_timeout_s
        while True:
            remaining = self._last_activity + timeout - time.monotonic()
            if remaining <= 0:
                if self._current is not None or self._queue:
                    self._touch()
                    continue
                log.info("session %s: idle for %.0fs; closing", self.id, timeout)
                self._close = (1000, "idle timeout")
                return
            await asyncio.sleep(remaining)
