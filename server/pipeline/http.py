"""The HTTP side of the synthesis pipeline, shared by ``POST /invocations`` and the OpenAI routes.

* :class:`SpeechEndpoint` — the ASGI endpoint: one :class:`~server.pipeline.synthesis.Synthesis` spans the
  whole exchange (admission, the handler, the streamed body, closing), so in-flight accounting,
  the outcome count and the abort of pending segments hold on every path. A handler only maps its
  wire format onto the pipeline and returns a response; every :class:`KokoroError` it raises
  becomes that route's error shape with the error's status; a 503 (loading, draining, overloaded)
  carries ``Retry-After``.
* :class:`AdmissionGate` — middleware ahead of the router: a speech request the server would refuse
  now (loading, draining, overloaded) gets its route's refusal before it is routed or its body read
  (under overload most requests are refused: a refusal costs the least there).
* :func:`read_body` — the body, at most ``max_message_bytes``: a larger ``Content-Length`` is
  refused (413 ``text_too_long``) before a byte of the body is read, and a body without one is
  refused as soon as the bytes received pass the limit — never read whole.
* :func:`wait_disconnect` — finishes when the client goes away (the pipeline's ``gone`` watch:
  a client that leaves, before the first audio or mid-stream, stops the backend's work).
* :class:`AudioStream` — a streamed body that ends *without* the final empty chunk when synthesis
  fails after the first bytes (the status is already sent), so the client sees a truncated
  transfer, never a short file that looks complete; the last piece of audio leaves with the end
  of the body. A client that stops reading pauses its
  synthesis (the next chunk is pulled only once the last one was handed to the socket); a send
  that makes no progress for ``send_timeout_s`` cuts the response the same way and is counted in
  ``send_timeouts_total``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from urllib.parse import quote

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from backends.api import KokoroError, TextTooLong
from server.pipeline.synthesis import Cancelled, Final, SendTimeout, Synthesis, bounded_send
from server.state import ServerState

log = logging.getLogger("kokoro.http")
_NO_TIMEOUT = 1e9
#: Seconds a refused client (503: loading, draining, overloaded) is told to wait before retrying.
RETRY_AFTER_S = 1

Handler = Callable[[Request, Synthesis], Awaitable[Response]]
ErrorResponse = Callable[[KokoroError, Synthesis, Request], Response]
RequestId = Callable[[Request], str]


class BodyTooLarge(TextTooLong):
    """A request body over ``max_message_bytes``: 413 ``text_too_long`` on every route (it is
    refused unread, whatever it holds), where a route may answer over-long *text* otherwise."""


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) anything over ``limit`` bytes without reading it all."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body of {declared} bytes is over the {limit}-byte limit")
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise BodyTooLarge(f"request body is over the {limit}-byte limit")
        parts.append(part)
    return b"".join(parts)


async def wait_disconnect(request: Request) -> None:
    """Return when the client has gone away (call once the body has been read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def header_text(raw: bytes) -> str:
    """A header value as the client meant it: UTF-8 when it decodes as UTF-8, else Latin-1."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def header_value(text: str) -> str:
    """An id the server chose or read from a JSON body, as a header value: printable ASCII as is,
    anything else (non-ASCII characters, CR/LF) percent-encoded. (A client's own ``X-Request-Id``
    goes back in the bytes it came in: :func:`server.openai.request_id.id_header`.)"""
    if text.isascii() and text.isprintable():  # (the printable ASCII characters: " " to "~")
        return text
    return quote(text, safe="")


class AudioStream(StreamingResponse):
    """The streamed answer of one :class:`Synthesis`: counts the first audio when its first bytes
    leave and the outcome at the end; a failure mid-way is counted and cuts the body short."""

    def __init__(self, job: Synthesis, content: AsyncIterator[bytes], *, media_type: str,
                 headers: Mapping[str, str] | None = None):
        super().__init__(content, media_type=media_type, headers=headers)
        self.job = job

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The synthesis watches for the client leaving (and cancels this task when it does): no
        # second watch, nor Starlette's task group per response, is needed.
        self.job.watch_client(lambda: wait_disconnect(Request(scope, receive)))
        await self.stream_response(send)

    async def stream_response(self, send: Send) -> None:
        state = self.job.state
        timeout = state.settings.send_timeout_s if state is not None else _NO_TIMEOUT
        try:
            await bounded_send(send({"type": "http.response.start", "status": self.status_code,
                                     "headers": self.raw_headers}), timeout)
            ended = False  # a Final piece ends the body with its last bytes (one write less)
            async for chunk in self.body_iterator:
                ended = isinstance(chunk, Final)
                await bounded_send(send({"type": "http.response.body", "body": chunk, "more_body": not ended}), timeout)
                self.job.first_audio()
        except SendTimeout as e:
            log.warning("request %s: %s; cutting the response", self.job.request_id, e.message)
            self.job.fail(e)
            if state is not None:
                state.metrics.send_timed_out(self.job.route)
            return
        except KokoroError as e:
            log.warning("request %s: %s after the first bytes; cutting the response: %s",
                        self.job.request_id, e.code, e.message)
            self.job.fail(e)
            return
        self.job.record(200)
        if not ended:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class SpeechEndpoint:
    """An ASGI endpoint running ``handler`` inside one :class:`Synthesis` for ``route``.

    ``request_id`` names the request before anything is read, so that every answer — a refusal at
    admission or an unreadable body too — carries it. An error is counted with the status of the
    response the route actually sends (the OpenAI routes answer some errors 400 that
    ``/invocations`` answers 404 or 413).
    """

    def __init__(self, route: str, handler: Handler, error_response: ErrorResponse,
                 request_id: RequestId | None = None):
        self.route = route
        self.handler = handler
        self.error_response = error_response
        self.request_id = request_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        state: ServerState = request.app.state.kokoro
        async with Synthesis(state.backend, self.route, state=state) as job:
            try:
                response = await self._respond(request, job)
                await response(scope, receive, send)
            except ClientDisconnect:
                pass  # counted as cancelled when the synthesis closes
            except asyncio.CancelledError:
                if not job.client_left():  # (the client went away: counted as cancelled too)
                    raise

    async def refuse(self, job: Synthesis, error: KokoroError, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer ``error``, raised as ``job`` was admitted, as this route answers it (counted as
        the request's outcome), without running the handler."""
        request = Request(scope, receive)
        if self.request_id is not None:
            job.request_id = self.request_id(request)
        await self._refuse(error, job, request)(scope, receive, send)

    async def _respond(self, request: Request, job: Synthesis) -> Response:
        if self.request_id is not None:
            job.request_id = self.request_id(request)
        try:
            job.admit()
            return await self.handler(request, job)
        except (Cancelled, ClientDisconnect):
            job.record(Cancelled.status, Cancelled.code)
            return Response(status_code=Cancelled.status)
        except KokoroError as e:
            return self._refuse(e, job, request)
        except Exception:
            log.exception("%s: request %s failed", self.route, job.request_id)
            return self._refuse(KokoroError("internal server error"), job, request)

    def _refuse(self, error: KokoroError, job: Synthesis, request: Request) -> Response:
        response = self.error_response(error, job, request)
        if response.status_code == 503 and "retry-after" not in response.headers:
            # not ready, draining or overloaded: a client or load balancer retries (elsewhere)
            response.headers["Retry-After"] = str(RETRY_AFTER_S)
        job.record(response.status_code, error.code)
        return response


class AdmissionGate:
    """ASGI middleware between the app's own middleware and its router. A ``POST`` to the path of
    a :class:`SpeechEndpoint` that the server would refuse now (:meth:`Synthesis.admit`: loading,
    draining, overloaded) is answered by that endpoint's refusal here, neither routed nor its body
    read; an admitted one goes on unchanged, and its endpoint admits it again as it starts. Under
    overload most requests are refused, and the work a refusal takes comes out of the answered
    requests' share of the one event loop. Endpoints at a path with parameters are left to refuse
    their requests themselves (the same answer)."""

    def __init__(self, app: ASGIApp, endpoints: Mapping[str, SpeechEndpoint]):
        self.app = app
        self.endpoints = dict(endpoints)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.endpoints.get(scope["path"])
            if endpoint is not None:
                state: ServerState = scope["app"].state.kokoro
                job = Synthesis(state.backend, endpoint.route, state=state)
                try:
                    job.admit()
                except KokoroError as error:
                    await endpoint.refuse(job, error, scope, receive, send)
                    return
        await self.app(scope, receive, send)
