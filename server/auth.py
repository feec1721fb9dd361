"""Bearer-token auth (``KOKORO_API_KEY``) as a pure ASGI middleware.

When a key is configured, every HTTP route and the WebSocket upgrade need
``Authorization: Bearer <key>``, except the open paths (``/ping``, which load balancers and
SageMaker poll without credentials). Keys are compared as SHA-256 digests with
:func:`hmac.compare_digest`, so neither the content nor the length leaks through timing.
A refused HTTP request gets 401 with the JSON error body (in OpenAI's shape under ``/v1/``); a refused WebSocket gets a 401 HTTP
response at the upgrade (the denial-response extension), or a 1008 close where the server lacks it.
CORS preflight (``OPTIONS`` with ``Access-Control-Request-Method``) passes through to the CORS layer.
Routes of other providers' protocols (``own_key_paths``: Deepgram's ``/v1/speak`` …), WebSocket and
HTTP alike, pass through too: their clients send the key their own way, and the route checks it
with :func:`key_matches` (``server.websocket.session``, ``server.providers``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

OPEN_PATHS = frozenset({"/ping"})


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


def authorization(headers: Mapping[str, str]) -> tuple[str, str]:
    """The ``Authorization`` header as ``(scheme in lower case, credentials)`` (``("", "")`` when absent)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return scheme.lower(), token.strip()


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of ``Authorization: Bearer <token>``, else None."""
    scheme, token = authorization(headers)
    return token if scheme == "bearer" else None


def key_matches(want: str, given: str | bytes | None) -> bool:
    """Whether ``given`` is the key ``want``, compared as digests in constant time."""
    raw = given.encode("utf-8", "surrogatepass") if isinstance(given, str) else (given or b"")
    return hmac.compare_digest(_digest(raw.strip()), _digest(want.encode("utf-8"))) and bool(raw.strip())


class BearerAuth:
    def __init__(
        self, app: ASGIApp, api_key: str, open_paths: frozenset[str] = OPEN_PATHS,
        own_key_paths: tuple[str, ...] = (),
    ):
        if not api_key:
            raise ValueError("api_key must be non-empty")
        self.app = app
        self._want = _digest(api_key.encode("utf-8"))
        self.open_paths = open_paths
        self.own_key_paths = own_key_paths

    def _own_key(self, path: str) -> bool:
        """``own_key_paths``: exact paths, and folders (ending in ``/``) matched as prefixes."""
        return any(path == p or (p.endswith("/") and path.startswith(p)) for p in self.own_key_paths)

    def authorized(self, scope: Scope) -> bool:
        header = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                header = value
                break
        scheme, _, token = header.partition(b" ")
        ok_scheme = scheme.lower() == b"bearer"
        # Always run the comparison so a missing/odd header costs the same as a wrong key.
        match = hmac.compare_digest(_digest(token.strip()), self._want)
        return ok_scheme and match

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or scope.get("path") in self.open_paths:
            await self.app(scope, receive, send)
            return
        if self._own_key(str(scope.get("path", ""))):
            await self.app(scope, receive, send)  # the route checks the protocol's own key
            return
        if kind == "http" and scope.get("method") == "OPTIONS" and _is_preflight(scope):
            await self.app(scope, receive, send)
            return
        if self.authorized(scope):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": _refusal(scope)}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b'Bearer realm="kokoro-serve"'),
        ]
        if kind == "http":
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        message = await receive()  # websocket.connect
        if message["type"] != "websocket.connect":
            return
        if "websocket.http.response" in scope.get("extensions", {}):
            await send({"type": "websocket.http.response.start", "status": 401, "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})


def _refusal(scope: Scope) -> dict[str, object]:
    """The 401 error object: OpenAI's shape under ``/v1/`` (what its clients parse), else this server's."""
    message = "missing or wrong bearer token"
    if str(scope.get("path", "")).startswith("/v1/"):
        return {"message": message, "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}
    return {"code": "unauthorized", "message": message}


def _is_preflight(scope: Scope) -> bool:
    return any(name == b"access-control-request-method" for name, _ in scope.get("headers", ()))
