"""The app factory: ``create_app(settings, backend) -> Starlette`` — no globals.

Routes (docs/wire-contract.md, docs/openai-api.md, docs/voice-agents.md): ``GET /ping`` (with
``warnings`` while synthesis falls behind real time, ``server.realtime_watch``), ``POST /invocations``, ``WS
/invocations-bidirectional-stream``, ``GET /metrics``, the OpenAI-compatible routes and the
voice-agent protocols (Deepgram's ``WS /v1/speak``, Cartesia's ``WS /tts/websocket``, ElevenLabs'
``WS /v1/text-to-speech/{voice}/stream-input`` and ``multi-stream-input``) and their HTTP twins
(``POST /v1/speak``, ``/tts/bytes``, ``/tts/sse``, ``/v1/text-to-speech/{voice}[/stream][/with-timestamps]``); every
speech route goes through the one synthesis pipeline (``server.pipeline.synthesis``). The app knows the
backend only through the :class:`~backends.api.Backend` protocol. Middleware: ``x-request-id`` on
every ``/v1/`` answer (``server.openai.request_id``) around CORS (when ``KOKORO_CORS_ORIGINS`` is set) around bearer
auth (when ``KOKORO_API_KEY`` is set; ``/ping`` stays open) around the admission gate (a speech request
refused at admission is answered before it is routed, ``server.pipeline.http``).

Lifespan: the backend is loaded and warmed up (``backend.start()``, off the loop) in a background
task, so the server listens at once and ``/ping`` answers 503 ``loading`` until the model is ready,
then 200. A load failure leaves ``/ping`` at 503 ``failed`` and calls ``on_fatal`` (the CLI exits).
On shutdown, sessions still open are closed 1001 and the backend is closed. Graceful draining
(``ServerState.drain``) runs before that, started by the CLI's SIGTERM handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute

from backends.api import Backend
from backends.startup import install_hint
from server.auth import BearerAuth
from server.metrics import Metrics
from server.openai.request_id import RequestIdMiddleware
from server.openai.routes import openai_routes
from server.pipeline.http import AdmissionGate, SpeechEndpoint
from server.providers.cartesia import PATH as CARTESIA_PATH
from server.providers.cartesia import cartesia_routes
from server.providers.cartesia_http import BYTES_PATH as CARTESIA_BYTES
from server.providers.cartesia_http import SSE_PATH as CARTESIA_SSE
from server.providers.cartesia_http import cartesia_http_routes
from server.providers.deepgram import PATH as DEEPGRAM_PATH
from server.providers.deepgram import deepgram_routes
from server.providers.deepgram_http import deepgram_http_routes
from server.providers.elevenlabs import PATH_PREFIX as ELEVENLABS_PATHS
from server.providers.elevenlabs import elevenlabs_routes
from server.providers.elevenlabs_http import elevenlabs_http_routes
from server.realtime_watch import default_advice
from server.sagemaker.bidi import websocket_endpoint
from server.sagemaker.invocations import invocations_endpoint
from server.settings import Settings
from server.state import ServerState

log = logging.getLogger("kokoro.server")
PING_HEALTH_TIMEOUT_S = 0.05


async def ping(request: Request) -> JSONResponse:
    """200 when loaded, warmed up and not draining; 503 otherwise. Never waits on synthesis."""
    state: ServerState = request.app.state.kokoro
    body: dict[str, Any] = state.describe()
    if state.load_error is not None:
        body["error"] = f"{type(state.load_error).__name__}: {state.load_error}"
    if not state.ready:
        return JSONResponse(body, status_code=503)
    if warnings := state.metrics.realtime.warnings():
        body["warnings"] = warnings  # still 200: the server works, only late (server.realtime_watch)
    try:
        # A health check that is slow because every core is busy synthesising is not a failure.
        async with asyncio.timeout(PING_HEALTH_TIMEOUT_S):
            await state.backend.check_health()
    except TimeoutError:
        pass
    except Exception as e:
        body.update(status="unhealthy", error=str(e))
        return JSONResponse(body, status_code=503)
    return JSONResponse(body)


async def metrics_endpoint(request: Request) -> Response:
    state: ServerState = request.app.state.kokoro
    state.metrics.queue.set(state.backend.queue_depth)
    return Response(state.metrics.render(), media_type=state.metrics.content_type)


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    """The router's 404/405: this server's error shape, or OpenAI's under ``/v1/`` (what an OpenAI
    client parses: ``message``, ``type``, ``param``, ``code``)."""
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    error: dict[str, Any] = {"code": code, "message": exc.detail}
    if request.url.path.startswith("/v1/"):
        where = f"{request.method} {request.url.path}"
        message = {404: f"Invalid URL ({where})", 405: f"Method not allowed ({where})"}.get(exc.status_code, exc.detail)
        error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    return JSONResponse({"error": error}, status_code=exc.status_code, headers=exc.headers)


async def internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s", request.url.path, exc_info=exc)
    return JSONResponse({"error": {"code": "internal_error", "message": "internal server error"}}, status_code=500)


def create_app(
    settings: Settings,
    backend: Backend,
    *,
    metrics: Metrics | None = None,
    on_fatal: Callable[[BaseException], None] | None = None,
) -> Starlette:
    """Build the app around ``backend`` (started by the lifespan unless already ready).

    ``metrics`` defaults to a fresh :class:`Metrics` (its own registry). The backend reports its
    own series (segments, batches, queue) to the observer it was built with: pass the same
    ``Metrics`` to both for one registry.
    """
    metrics = metrics if metrics is not None else Metrics()
    metrics.realtime.window_s = settings.realtime_window_s
    metrics.realtime.serial = settings.mode == "sequential"  # calls never overlap: the real-time factor tells
    metrics.realtime.advice = default_advice(threads=settings.threads, mode=settings.mode, runtime=settings.backend,
                                             device=settings.device)
    state = ServerState(settings, backend, metrics)
    metrics.watch_tables(state.table_sizes)

    async def load() -> None:
        try:
            if not backend.ready:
                await backend.start()
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            state.load_error = e
            if (hint := install_hint(e)) is not None:  # a missing optional package: how to install it
                log.error("the backend failed to start: %s", hint)
            else:
                log.exception("the backend failed to start")
            if on_fatal is not None:
                on_fatal(e)
            return
        metrics.ready.set(1)
        metrics.realtime.arm()  # judged from here: the warm-up is slow by nature
        fields = state.describe()  # JSON lines carry them as fields (backends.logs)
        log.info("ready: %s", " ".join(f"{k}={v}" for k, v in fields.items()), extra=fields)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        loader = asyncio.create_task(load(), name="kokoro-load")
        try:
            yield
        finally:
            state.draining = True
            metrics.ready.set(0)
            loader.cancel()
            await asyncio.wait([loader])
            await state.close_sessions(1001, "server shutting down")
            await backend.aclose()

    routes: list[BaseRoute] = [
        Route("/ping", ping, methods=["GET"]),
        Route("/invocations", invocations_endpoint(), methods=["POST"]),
        WebSocketRoute("/invocations-bidirectional-stream", websocket_endpoint),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        *openai_routes(backend, settings),
        *deepgram_routes(),
        *deepgram_http_routes(),
        *cartesia_routes(),
        *cartesia_http_routes(),
        *elevenlabs_routes(),
        *elevenlabs_http_routes(),
    ]
    # the providers' routes, WebSocket and HTTP, check their clients' own key
    own_key_paths = (DEEPGRAM_PATH, CARTESIA_PATH, CARTESIA_BYTES, CARTESIA_SSE, ELEVENLABS_PATHS)
    middleware: list[Middleware] = [Middleware(RequestIdMiddleware)]  # outermost: every /v1/ answer has one
    if settings.cors_origin_list:
        middleware.append(Middleware(
            CORSMiddleware, allow_origins=settings.cors_origin_list, allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type"], expose_headers=["X-Request-Id"],
        ))
    if settings.api_key is not None:
        middleware.append(Middleware(
            BearerAuth, api_key=settings.api_key.get_secret_value(), own_key_paths=own_key_paths
        ))

    # innermost: a request refused at admission is answered before it is routed, its body unread
    speech = {r.path: r.endpoint for r in routes
              if isinstance(r, Route) and isinstance(r.endpoint, SpeechEndpoint) and "{" not in r.path}
    middleware.append(Middleware(AdmissionGate, endpoints=speech))

    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error, Exception: internal_error},
    )
    app.state.kokoro = state
    return app
