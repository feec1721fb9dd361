"""POST /invocations — one text in, a streamed audio body out (DESIGN.md §4).

Order of work: admission (ready?), the body (at most ``max_message_bytes``), JSON and fields,
``backend.prepare`` (voice, length, segment plan) and the **first segment** — all before the
status line, so every failure up to there gets its proper status and JSON error body
(400/404/413/503/500/504). The first bytes leave as soon as the first segment is synthesised;
each later segment follows when it is ready (``Transfer-Encoding: chunked``).

A failure after the first bytes cannot change the status any more: the connection is then cut
without the final chunk, so a client sees a truncated body (an error), never a short "success".
A client that goes away cancels the response; closing the backend stream aborts the pending
segments. ``"stream": false`` buffers the whole answer and sends it with a Content-Length (and a
WAV header with the real sizes).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from backends.audio import make_encoder, wav_header
from backends.base import BackendFault, KokoroError, SynthesisRequest, TextTooLong

from .metrics import CANCELLED_STATUS
from .params import decode_object, parse_http_options, parse_synthesis
from .state import ServerState

log = logging.getLogger("kokoro.invocations")
ROUTE = "invocations"


def error_response(error: KokoroError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error.to_dict()}, status_code=error.status, headers=headers)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) anything over ``limit`` bytes without reading it all."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise TextTooLong(f"request body of {declared} bytes is over the {limit}-byte limit")
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise TextTooLong(f"request body is over the {limit}-byte limit")
        parts.append(part)
    return b"".join(parts)


class _AudioStream(StreamingResponse):
    """A streaming response that ends *without* the final empty chunk when synthesis fails, so
    the client sees a truncated body rather than a complete one."""

    failed = False

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk in self.body_iterator:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if not self.failed:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def header_value(text: str) -> str:
    """A client-chosen id as a header value: printable ASCII as is, anything else (non-Latin-1
    characters, CR/LF) percent-encoded — it used to fail the response with a 500."""
    if all(" " <= c <= "~" for c in text):
        return text
    return quote(text, safe="")


def _retrieve(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()


class Invocations:
    """The ASGI endpoint. In-flight accounting spans the whole response, on every path."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        state: ServerState = request.app.state.kokoro
        with state.track(ROUTE):
            job = _Job(state, request)
            try:
                response = await job.respond()
                await response(scope, receive, send)
            finally:
                await job.close()


class _Job:
    def __init__(self, state: ServerState, request: Request):
        self.state = state
        self.request = request
        self.received = time.perf_counter()
        self.stream: Any = None
        self.encoder: Any = None
        self.body: Any = None
        self.body_iter: Any = None
        self.request_id = ""
        self.recorded = False

    def record(self, status: int, code: str | None = None) -> None:
        if not self.recorded:
            self.recorded = True
            self.state.metrics.request_done(ROUTE, status, code)

    async def respond(self) -> Response:
        state = self.state
        try:
            state.check_accepting()
            body = await read_body(self.request, state.settings.max_message_bytes)
            obj = decode_object(body)
            if "request_id" not in obj and self.request.headers.get("x-request-id"):
                obj["request_id"] = self.request.headers["x-request-id"][:128]
            params = parse_synthesis(obj, max_text_chars=state.settings.max_text_chars)
            fmt, streamed = parse_http_options(obj, self.request.headers.get("accept"))
            self.request_id = str(params.request_id)
            prepared = await state.backend.prepare(
                SynthesisRequest(
                    text=params.text, voice=params.voice, speed=params.speed, lang=params.lang,
                    request_id=self.request_id, session=self.request_id,
                )
            )
            self.encoder = make_encoder(fmt, params.sample_rate)
            self.stream = aiter(state.backend.stream(prepared))
            first = await self._first_chunk()
            if first is None:
                raise BackendFault("the backend produced no audio")
            head = await self._encode(first.audio)
        except ClientDisconnect:
            self.record(CANCELLED_STATUS, "cancelled")
            return Response(status_code=CANCELLED_STATUS)
        except KokoroError as e:
            self.record(e.status, e.code)
            return error_response(e, {"X-Request-Id": header_value(self.request_id)} if self.request_id else None)
        headers = {"X-Request-Id": header_value(self.request_id), "Cache-Control": "no-store"}
        if not streamed:
            return await self._buffered(fmt, head, headers)
        state.metrics.first_audio(ROUTE, time.perf_counter() - self.received)
        self.body_iter = self._rest(head)
        response = _AudioStream(self.body_iter, media_type=self.encoder.content_type, headers=headers)
        self.body = response
        return response

    async def _first_chunk(self) -> Any:
        """The first segment, unless the client goes away first (a client that gave up waiting
        must not keep the runtime busy): then the stream is closed and ClientDisconnect raised."""
        first = asyncio.ensure_future(self._next_chunk())
        gone = asyncio.ensure_future(self._disconnected())
        try:
            await asyncio.wait({first, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (first, gone):
                if not task.done():
                    task.cancel()
                    task.add_done_callback(_retrieve)
        if first.done() and not first.cancelled():
            return first.result()
        await asyncio.wait({first})  # let the backend stream unwind before it is closed
        raise ClientDisconnect()

    async def _disconnected(self) -> None:
        while (await self.request.receive())["type"] != "http.disconnect":
            pass

    async def _next_chunk(self) -> Any:
        try:
            return await anext(self.stream)
        except StopAsyncIteration:
            return None
        except KokoroError:
            raise
        except Exception as e:  # a runtime bug must still be a typed error, not a 500 page
            log.exception("request %s: synthesis failed", self.request_id)
            raise BackendFault(f"synthesis failed: {type(e).__name__}") from e

    async def _encode(self, audio: Any) -> bytes:
        if self.encoder.format in ("pcm", "wav"):
            return self.encoder.encode(audio)
        return await asyncio.to_thread(self.encoder.encode, audio)

    async def _finish(self) -> bytes:
        if self.encoder.format in ("pcm", "wav"):
            return self.encoder.flush()
        return await asyncio.to_thread(self.encoder.flush)

    async def _rest(self, head: bytes) -> AsyncIterator[bytes]:
        yield head
        try:
            while (chunk := await self._next_chunk()) is not None:
                if data := await self._encode(chunk.audio):
                    yield data
            if tail := await self._finish():
                yield tail
        except KokoroError as e:
            log.warning("request %s: %s after the first bytes; cutting the response: %s",
                        self.request_id, e.code, e.message)
            self.record(e.status, e.code)
            self.body.failed = True
            return
        self.record(200)

    async def _buffered(self, fmt: str, head: bytes, headers: dict[str, str]) -> Response:
        parts = [head]
        try:
            while (chunk := await self._next_chunk()) is not None:
                parts.append(await self._encode(chunk.audio))
            parts.append(await self._finish())
        except KokoroError as e:
            self.record(e.status, e.code)
            return error_response(e, headers)
        data = b"".join(parts)
        if fmt == "wav":  # the real sizes instead of the streaming "unknown"
            data = wav_header(self.encoder.sample_rate, data_size=len(data) - 44) + data[44:]
        self.state.metrics.first_audio(ROUTE, time.perf_counter() - self.received)
        self.record(200)
        return Response(data, media_type=self.encoder.content_type, headers=headers)

    async def close(self) -> None:
        """Every path ends here: abort pending segments, drop the encoder, count a cancel."""
        for it in (self.body_iter, self.stream):
            close = getattr(it, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception:
                    log.debug("closing a stream failed", exc_info=True)
        if self.encoder is not None:
            self.encoder.close()
        self.record(CANCELLED_STATUS, "cancelled")  # only when nothing else was recorded
