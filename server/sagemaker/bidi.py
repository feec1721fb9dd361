"""WS /invocations-bidirectional-stream — the route: admission at the upgrade, then one session.

Admission is the pipeline's (loaded, warmed up, not draining: ``not_ready``) plus the session limit
(``max_sessions``: ``overloaded``). A refused upgrade gets an HTTP 503 with the JSON error body
where the server supports the denial-response extension, else an accepted socket that receives
one ``error`` event and closes 1013. The session itself — reading, queueing, answering in order —
is :class:`server.sagemaker.bidi_session.Session`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from backends.api import KokoroError, Overloaded
from server.pipeline.synthesis import Synthesis
from server.sagemaker.bidi_session import ROUTE, Session
from server.state import ServerState


async def websocket_endpoint(websocket: WebSocket) -> None:
    """Admit the upgrade (ready, not draining, session limit), then serve one :class:`Session`."""
    await admit_and_serve(websocket, ROUTE, Session, _deny)


async def admit_and_serve(websocket: WebSocket, route: str, session_class: Callable[[WebSocket, ServerState], Any],
                          deny: Callable[[WebSocket, KokoroError], Awaitable[None]]) -> None:
    """Every WebSocket route's upgrade: admission (loaded, warmed up, not draining, the session limit;
    a refusal counted like any request), ``deny`` with the error when refused, else one session of
    ``session_class`` accepted, run and removed."""
    state: ServerState = websocket.app.state.kokoro
    upgrade = Synthesis(state.backend, route, state=state)
    try:
        upgrade.admit()
        if len(state.sessions) >= state.settings.max_sessions:
            raise Overloaded(f"{state.settings.max_sessions} sessions are open; try again shortly")
    except KokoroError as e:
        upgrade.fail(e)
        await deny(websocket, e)
        return
    session = session_class(websocket, state)
    state.add_session(session)
    try:
        await websocket.accept()
        await session.run()
    finally:
        state.remove_session(session)


async def _deny(websocket: WebSocket, error: KokoroError) -> None:
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(JSONResponse({"error": error.to_dict()}, status_code=error.status))
        return
    await websocket.accept()
    await websocket.send_text(json.dumps({"type": "error", "request_id": None, **error.to_dict()}))
    await websocket.close(1013, error.code)
