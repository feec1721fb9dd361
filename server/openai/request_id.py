"""``x-request-id`` on every response of the OpenAI-compatible routes, as OpenAI sends it.

A pure ASGI middleware for the paths under ``/v1/``: the id is the client's own ``X-Request-Id``
when it sends one (at most 128 characters, sent back byte for byte as it came: a UTF-8 ``café`` is
answered ``café``, see :func:`id_header`), else a fresh ``req_<32 hex>``. It is set on the response whatever answers — a handler's success,
SSE or error, an auth refusal, a 404 — replacing any id a handler set, and handed to the handler
through the scope (:func:`request_id_of`) so logs and the response carry the same id. The OpenAI
SDKs read it as ``response.request_id`` / ``_request_id`` and on errors as ``request_id``.
"""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.pipeline.http import header_text, header_value
from server.pipeline.params import MAX_ID_CHARS

_SCOPE_KEY = "kokoro.request_id"
_HEADER = b"x-request-id"


def fresh_request_id() -> str:
    return f"req_{secrets.token_hex(16)}"


def request_id_of(request: Request) -> str:
    """The id the middleware chose for ``request`` (a fresh one where it is not installed)."""
    rid = request.scope.get(_SCOPE_KEY)
    if not rid:
        rid = request.scope[_SCOPE_KEY] = fresh_request_id()
    return rid


def _client_header(scope: Scope) -> bytes | None:
    for name, value in scope.get("headers", ()):
        if name == _HEADER:
            return bytes(value)
    return None


def client_request_id(scope: Scope) -> str | None:
    """The client's own ``X-Request-Id`` (decoded, at most 128 characters), or None."""
    raw = _client_header(scope)
    text = header_text(raw).strip() if raw is not None else ""
    return text[:MAX_ID_CHARS] if text else None


def id_header(scope: Scope, rid: str) -> str:
    """``rid`` as the ``x-request-id`` value to answer. The client's own id goes back in the bytes
    it came in (UTF-8 or Latin-1; Starlette writes header strings as Latin-1, so the bytes are
    passed as Latin-1 characters); any other id as :func:`server.pipeline.http.header_value` makes it."""
    raw = _client_header(scope)
    if raw is None or client_request_id(scope) != rid:
        return header_value(rid)
    return rid.encode("utf-8").decode("latin-1") if _is_utf8(raw) else rid


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class RequestIdMiddleware:
    """Adds ``x-request-id`` to the HTTP responses under ``prefix``."""

    def __init__(self, app: ASGIApp, prefix: str = "/v1/"):
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        rid = client_request_id(scope) or fresh_request_id()
        scope[_SCOPE_KEY] = rid
        header = (_HEADER, id_header(scope, rid).encode("latin-1"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != _HEADER]
                message = {**message, "headers": [*headers, header]}
            await send(message)

        await self.app(scope, receive, send_with_id)
