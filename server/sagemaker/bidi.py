"""WS /invocations-bidirectional-stream (docs/wire-contract.md): the route and its mapper onto the one
WebSocket session core (``server.websocket``) and the synthesis pipeline.

The core reads every message (text or binary frame, both decoded as UTF-8 JSON; over
``max_message_bytes``: 1009), bounds every send, runs the idle timeout, the drain and the error
path. This mapper turns messages into requests on the session's :class:`TurnQueue` and answers them
strictly in order, one at a time, so pipelined requests never interleave: ``synthesis_start``, one
binary PCM s16le frame per segment as soon as the backend yields it, ``synthesis_complete`` — or a
single ``error`` event. A bad message is queued as its error, so every answer leaves in the order
the messages came; ``cancel`` acts at once.

* ``{"type": "cancel", "request_id"?}`` — the request(s) still waiting get ``error`` ``cancelled``
  in their turn; the one being answered is interrupted (its pending segments aborted) unless it is
  already sending its terminal event: every request gets exactly one terminal event.
* ``{"type": "close"}`` — no more requests (one after it gets ``invalid_request`` at once); the
  queue is answered, then the socket closes 1000. Repeating it changes nothing.
* Draining (SIGTERM) — a new request gets ``not_ready`` at once; the queue is answered, then the
  socket closes 1001; what the drain budget cannot finish gets ``not_ready`` before the close (and
  is counted as that, 503).
* The one answer that may arrive out of order is the refusal of a message that found the queue
  full (``overloaded``), or came after ``close`` or during a drain: it is sent at once.

Backpressure: the next chunk is pulled from the backend only once the last one was handed to the
socket, so a client that stops reading pauses its own synthesis (its reader waits too). Each
request goes through the pipeline (``server.pipeline.synthesis``), which counts it: every queued
message is one request in ``requests_total{route="ws"}``, answered or not (499).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from starlette.websockets import WebSocketDisconnect

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
    message_type,
    parse_synthesis,
    request_id_of,
    salvage_request_id,
)
from server.pipeline.synthesis import Cancelled, SendTimeout, Synthesis
from server.websocket.admission import websocket_route
from server.websocket.session import WebSocketSession
from server.websocket.turn_queue import TurnQueue

log = logging.getLogger("kokoro.ws")
ROUTE = "ws"


@dataclass(eq=False, slots=True)
class _Item:
    request_id: str | int | None
    received: float
    params: SynthesisParams | None = None
    error: KokoroError | None = None
    cancelled: bool = False


class BidiSession(WebSocketSession):
    """The bidirectional-stream mapper of one socket (see the module docstring). Loop only."""

    ROUTE = ROUTE

    def __init__(self, websocket: Any, state: Any) -> None:
        super().__init__(websocket, state)
        self.queue: TurnQueue[_Item] = TurnQueue(self.settings.max_queued_per_session, self._answer, self._interrupted)

    @classmethod
    def refusal(cls, error: KokoroError) -> dict[str, Any]:
        return {"type": "error", "request_id": None, **error.to_dict()}

    @property
    def busy(self) -> bool:
        return self.queue.busy

    async def on_open(self) -> None:
        self.spawn(self._work(), "work")

    async def _work(self) -> None:
        await self.queue.run()
        self.close(1000, "closed by client")  # after 'close': everything queued was answered

    # -- client messages ------------------------------------------------------------------------
    async def on_bad_message(self, error: KokoroError) -> None:
        # still answered with the message's id where one can be read
        await self._queue(_Item(salvage_request_id(self.message), time.perf_counter(), error=error))

    async def on_message(self, obj: dict[str, Any]) -> None:
        received = time.perf_counter()
        try:
            kind = message_type(obj)
            if kind == "cancel":
                self._cancel(obj.get("request_id"))
                return
            if kind == "close":
                self.queue.end()
                return
            if self.queue.ended:
                raise InvalidRequest("the session is closing; no new requests after 'close'")
            if self.draining:
                raise NotReady("server is shutting down")
            params = parse_synthesis(obj, max_text_chars=self.settings.max_text_chars)
        except KokoroError as e:
            await self._queue(_Item(request_id_of(obj), received, error=e))
            return
        await self._queue(_Item(params.request_id, received, params=params))

    async def _queue(self, item: _Item) -> None:
        if self.queue.ended or self.draining:  # nothing new is queued: answer at once
            await self._refuse(item, item.error or NotReady("the session takes no more requests"))
            return
        try:
            self.queue.put(item)
        except Overloaded as e:
            await self._refuse(item, item.error or e)

    def _cancel(self, target: Any) -> None:
        for item in self.queue:
            if item.params is not None and (target is None or item.request_id == target):
                item.cancelled = True
        current = self.queue.current
        if current is not None and current.params is not None and (target is None or current.request_id == target):
            self.queue.interrupt()

    # -- the end of the session -----------------------------------------------------------------
    async def on_cut(self, error: KokoroError) -> None:
        if (cut := self.queue.cut) is not None:
            await self._send_error(cut.request_id, error)  # counted as this error when its answer was stopped
        for item in self.queue.drop_waiting():
            await self._refuse(item, error)

    async def on_close(self) -> None:
        # Accepted but never answered (the client left): counted as 499 so that requests_total
        # accounts for every request.
        for item in self.queue.drop_waiting():
            self._job(item).record(Cancelled.status, Cancelled.code)

    # -- answering ------------------------------------------------------------------------------
    def _job(self, item: _Item) -> Synthesis:
        return Synthesis(self.state.backend, ROUTE, state=self.state, received=item.received)

    async def _refuse(self, item: _Item, error: KokoroError) -> None:
        async with self._job(item) as job:
            job.fail(error)
            await self._send_error(item.request_id, error)

    async def _interrupted(self, item: _Item) -> None:
        await self._send_error(item.request_id, Cancelled("cancelled by the client"))

    async def _answer(self, item: _Item) -> None:
        """One request, start to end (its terminal event included). Interrupted, it counts as 499;
        cut by the drain, as the ``not_ready`` (503) the client is told."""
        if item.error is not None or item.cancelled:
            self.queue.finishing()
            await self._refuse(item, item.error or Cancelled("cancelled by the client"))
            return
        async with self._job(item) as job:
            try:
                await self._synthesize(item, job)
            except asyncio.CancelledError:
                if self.cut_error is not None:  # the drain ran out: on_cut tells the client this error
                    job.fail(self.cut_error)
                raise

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
            await self.send_json(self._start_event(p, rate))
            async for pcm in job.encoded(first):
                await self.send_bytes(pcm)
                samples += len(pcm) // 2
                job.first_audio()
        except SendTimeout as e:
            job.fail(e)
            raise
        except KokoroError as e:
            job.fail(e)
            self.queue.finishing()
            await self._send_error(p.request_id, e)
            return
        except WebSocketDisconnect:
            raise
        except Exception as e:
            log.exception("session %s: request %s failed", self.id, p.request_id)
            fault = BackendFault(f"synthesis failed: {type(e).__name__}")
            job.fail(fault)
            self.queue.finishing()
            await self._send_error(p.request_id, fault)
            return
        done = time.perf_counter()
        job.record(200)
        self.queue.finishing()
        await self.send_json({
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

    async def _send_error(self, request_id: Any, error: KokoroError) -> None:
        await self.send_json({"type": "error", "request_id": request_id, **error.to_dict()})


websocket_endpoint = websocket_route(BidiSession)
