"""The upgrade of every WebSocket route: admission, then one session.

Admission is the same on every protocol: the protocol's key where ``KOKORO_API_KEY`` is set
(401), the pipeline's readiness (loaded, warmed up, not draining: ``not_ready``, 503) and the
session limit (``max_sessions``: ``overloaded``, 503). A refusal is counted like any request and
answered by :func:`deny`: an HTTP response at the upgrade where the server supports the
denial-response extension (uvicorn does) — the status, a JSON body and, on 503, ``Retry-After`` so
a client or load balancer retries elsewhere — else an accepted socket that gets the protocol's
refusal message (if it has one) and a close: 1013 (try again later) for 503, 1008 otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from backends.api import KokoroError, Overloaded
from server.pipeline.http import RETRY_AFTER_S
from server.pipeline.synthesis import Synthesis
from server.state import ServerState
from server.websocket.session import WebSocketSession

log = logging.getLogger("kokoro.websocket")


def websocket_route(session_class: type[WebSocketSession]) -> Callable[[WebSocket], Awaitable[None]]:
    """The WebSocket endpoint of ``session_class``."""

    async def endpoint(websocket: WebSocket) -> None:
        await admit_and_serve(websocket, session_class)

    return endpoint


async def admit_and_serve(websocket: WebSocket, session_class: type[WebSocketSession]) -> None:
    """Admit the upgrade (key, ready, not draining, the session limit), then serve one session of
    ``session_class``, removed from the server's state when it ends."""
    state: ServerState = websocket.app.state.kokoro
    key = state.settings.api_key
    if key is not None and not session_class.authorized(websocket, key.get_secret_value()):
        await refuse(websocket, KokoroError("missing or wrong API key", code="unauthorized"), status=401)
        return
    upgrade = Synthesis(state.backend, session_class.ROUTE, state=state)
    try:
        upgrade.admit()
        if len(state.sessions) >= state.settings.max_sessions:
            raise Overloaded(f"{state.settings.max_sessions} sessions are open; try again shortly")
    except KokoroError as e:
        upgrade.fail(e)
        await refuse(websocket, e, message=session_class.refusal(e))
        return
    session = session_class(websocket, state)
    state.add_session(session)
    try:
        await websocket.accept()
        await session.run()
    finally:
        state.remove_session(session)


async def refuse(websocket: WebSocket, error: KokoroError, *, status: int | None = None,
                 message: dict[str, Any] | None = None) -> None:
    """Refuse the upgrade with ``error`` (``{"error": {"code", "message"}}``, its status unless given)."""
    status = status or error.status
    await deny(websocket, status, {"error": error.to_dict()}, close_code=1013 if status == 503 else 1008,
               reason=error.code, message=message)


async def deny(websocket: WebSocket, status: int, body: dict[str, Any], *, close_code: int, reason: str,
               message: dict[str, Any] | None = None, headers: Mapping[str, str] | None = None) -> None:
    """The one way an upgrade is refused (see the module docstring): an ordinary answer, logged at
    INFO. ``headers`` go with the HTTP response (a provider's own error header)."""
    log.info("%s: upgrade refused (%d %s)", websocket.url.path, status, reason)
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        extra = {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else {}
        await websocket.send_denial_response(JSONResponse(body, status_code=status, headers={**extra, **(headers or {})}))
        return
    await websocket.accept()
    if message is not None:
        await websocket.send_json(message)
    await websocket.close(close_code, reason)
