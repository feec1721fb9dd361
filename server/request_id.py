"""``x-request-id`` on every response of the OpenAI-compatible routes, as OpenAI sends it.

A pure ASGI middleware for the paths under ``/v1/``: the id is the client's own ``X-Request-Id``
when it sends one (at most 128 characters, made header-safe by :func:`server.http.header_value`),
else a fresh ``req_<32 hex>``. It is set on the response whatever answers — a handler's success,
SSE or error, an auth refusal, a 404 — replacing any id a handler set, and handed to the handler
through the scope (:func:`request_id_of`) so logs and the response carry the same id. The OpenAI
SDKs read it as ``response.request_id`` / ``_request_id`` and on errors as ``request_id``.
"""

from __future__ import annotations

import uuid

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .http import header_value
from .params import MAX_ID_CHARS

_SCOPE_KEY = "kokoro.request_id"
_HEADER = b"x-request-id"


def fresh_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


def request_id_of(request: Request) -> str:
    """The id the middleware chose for ``request`` (a fresh one where it is not installed)."""
    rid = request.scope.get(_SCOPE_KEY)
    if not rid:
        rid = request.scope[_SCOPE_KEY] = fresh_request_id()
    return rid


def _client_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == _HEADER:
            text = value.decode("latin-1").strip()
            return header_value(text[:MAX_ID_CHARS]) if text else None
    return None


class RequestIdMiddleware:
    """Adds ``x-request-id`` to the HTTP responses under ``prefix``."""

    def __init__(self, app: ASGIApp, prefix: str = "/v1/"):
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        rid = _client_id(scope) or fresh_request_id()
        scope[_SCOPE_KEY] = rid
        header = (_HEADER, rid.encode("latin-1"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != _HEADER]
                message = {**message, "headers": [*headers, header]}
            await send(message)

        await self.app(scope, receive, send_with_id)
