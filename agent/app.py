"""The AgentCore app: ``POST /invocations`` runs one spoken turn and streams it as Server-Sent Events;
``GET /`` serves the browser page; ``GET /ping`` is AgentCore's health check; ``GET /tts-status``
relays the TTS server's ``/ping`` (its ``warnings`` — synthesis behind real time — show on the page).

Request JSON: ``prompt`` (required), ``mode`` (``bidi`` — speech starts with the first sentence, the
default — or ``batch`` — the whole reply first, then one synthesis: the baseline), ``voice``,
``speed`` (0.5–2.0). A bad request is answered 400 with ``{"error": {"code", "message"}}``.

Each SSE event is one ``data: {json}`` line whose ``type`` is ``agent_start``, ``text_delta``
(``text``), ``audio_stream_start`` (``sample_rate``, ``encoding``: ``pcm_s16le``, ``channels``),
``audio_chunk`` (``audio``: base64 PCM s16le 24 kHz mono, ``seq``, ``request_id``, and on a
sentence's first chunk its ``text``), ``audio_stream_end`` (``chunks``, ``bytes``,
``audio_duration_s``), ``voice_lost`` (``code``, ``message``: the TTS session dropped; the text
keeps streaming while a new session is opened), ``voice_restored`` (``resent``: the sentences not
yet spoken, sent again — each sentence is still spoken once), ``agent_end`` (``text``,
``first_text_ms``, ``first_audio_ms``, ``total_ms``, ``sentences``) or ``error`` (``code``,
``message``, ``fatal``; ``tts_unavailable`` once the reconnect tries are spent); every event
carries ``t_ms`` since the turn began. Every turn ends with ``agent_end``, whatever failed.

Disconnects: the entrypoint returns the turn as a ``StreamingResponse`` over an async generator
(formatted as BedrockAgentCoreApp formats an entrypoint's generator) rather than returning the
generator itself. The SDK's bridge for a returned generator iterates it on a worker loop through a
queue and only stops it when its synchronous wrapper is garbage-collected; in practice a turn went on
synthesising to the end after the browser had left. Streamed directly, Starlette's disconnect
listener cancels the turn at once, and the TTS client sends ``cancel`` to the server. The turn makes
no blocking calls (the model's HTTP calls run in Strands' worker threads), so ``/ping`` stays
responsive on the same loop.

The app is configured by :class:`agent.settings.AgentSettings`, passed in. The model provider and the
TTS client are built once per app and shared by all turns; each turn gets
its own Strands ``Agent`` (no history between turns) and its own TTS session.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bedrock_agentcore.runtime import BedrockAgentCoreApp
from starlette.responses import FileResponse, JSONResponse, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .agent import build_agent, build_model, converse
from .settings import AgentSettings
from .tts_client import TTSClient

log = logging.getLogger("kokoro.agent")
STATIC_DIR = Path(__file__).parent / "static"
MAX_PROMPT_CHARS = 4000
TTS_PING_TIMEOUT_S = 2.0


class InvalidPayload(ValueError):
    pass


@dataclass(frozen=True)
class TurnRequest:
    prompt: str
    mode: str = "bidi"
    voice: str | None = None
    speed: float | None = None

    @classmethod
    def parse(cls, payload: Any) -> TurnRequest:
        if not isinstance(payload, dict):
            raise InvalidPayload("the body must be a JSON object")
        prompt = payload.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidPayload("`prompt` is required and must be a non-empty string")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise InvalidPayload(f"`prompt` is longer than {MAX_PROMPT_CHARS} characters")
        mode = payload.get("mode") or "bidi"
        if mode not in ("bidi", "batch"):
            raise InvalidPayload("`mode` must be `bidi` or `batch`")
        voice = payload.get("voice") or None
        if voice is not None and not isinstance(voice, str):
            raise InvalidPayload("`voice` must be a string")
        speed = payload.get("speed")
        if speed is not None:
            if isinstance(speed, bool) or not isinstance(speed, int | float) or not math.isfinite(speed):
                raise InvalidPayload("`speed` must be a number")
            if not 0.5 <= speed <= 2.0:
                raise InvalidPayload("`speed` must be within 0.5-2.0")
            speed = float(speed)
        return cls(prompt.strip(), mode, voice, speed)


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def logged(events: AsyncIterator[dict[str, Any]], mode: str) -> AsyncIterator[dict[str, Any]]:
    """The turn's events, passed on; one log line when the turn ends (the SDK's own line comes
    when the response starts, not when the turn is done)."""
    async for event in events:
        if event.get("type") == "agent_end":
            log.info("turn done (%s) in %s ms: %s sentence(s), first text %s ms, first audio %s ms", mode,
                     event.get("total_ms"), event.get("sentences"), event.get("first_text_ms"),
                     event.get("first_audio_ms"))
        yield event


async def sse(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """``data: {json}`` blocks, as BedrockAgentCoreApp formats an entrypoint's generator."""
    async for event in events:
        yield f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode()


def build_tts(settings: AgentSettings) -> TTSClient:
    if settings.endpoint_name:
        if not settings.region:
            raise ValueError("a region is required with a SageMaker endpoint name")
        return TTSClient.sagemaker(settings.endpoint_name, settings.region, voice=settings.voice,
                                   speed=settings.speed, retry=settings.reconnect())
    if not settings.tts_url:
        raise ValueError("either a TTS URL or a SageMaker endpoint name is required")
    return TTSClient.websocket(settings.tts_url, api_key=settings.tts_api_key, voice=settings.voice,
                               speed=settings.speed, retry=settings.reconnect())


def ping_url(tts_url: str) -> str:
    """The TTS server's ``/ping`` for a ``ws(s)://`` or ``http(s)://`` URL (or a bare ``host:port``)."""
    parts = urlsplit(tts_url if "://" in tts_url else f"http://{tts_url}")
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return f"{scheme}://{parts.netloc}/ping"


def _read_ping(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=TTS_PING_TIMEOUT_S) as r:
            body = json.loads(r.read())
    except urllib.error.HTTPError as e:  # 503 while loading or draining: its body says why
        try:
            body = json.loads(e.read())
        except ValueError:
            body = {}
    except (OSError, ValueError) as e:
        return {"reachable": False, "error": f"{type(e).__name__}: {e}"}
    return {"reachable": True, "status": body.get("status"), "warnings": body.get("warnings", [])}


async def tts_status(settings: AgentSettings) -> dict[str, Any]:
    """What the TTS server's ``/ping`` says — its status and ``warnings`` (the slow-machine warning:
    synthesis behind real time, with what to do). A SageMaker endpoint has no ``/ping`` the agent
    can reach: ``reachable`` is None there and the page judges from the gaps it hears."""
    if settings.endpoint_name or not settings.tts_url:
        return {"reachable": None, "warnings": []}
    return await asyncio.to_thread(_read_ping, ping_url(settings.tts_url))


def create_app(settings: AgentSettings, *, model: Any = None) -> BedrockAgentCoreApp:
    """The app; ``model`` overrides the provider that ``settings.model`` names (tests, embedding)."""
    model = model or build_model(
        settings.model,
        tokens_per_second=settings.tokens_per_second,
        reply=settings.scripted_reply,
        bedrock_model_id=settings.bedrock_model_id,
        region=settings.region,
        endpoint_url=settings.bedrock_endpoint_url,
    )
    tts = build_tts(settings)  # shared: the SageMaker connector inside keeps its HTTP/2 connection
    app = BedrockAgentCoreApp()

    @app.entrypoint
    async def invoke(payload: Any) -> Any:
        try:
            req = TurnRequest.parse(payload)
        except InvalidPayload as exc:
            return JSONResponse({"error": {"code": "invalid_request", "message": str(exc)}}, status_code=400)
        turn = logged(converse(build_agent(model), tts, req.prompt, mode=req.mode, voice=req.voice, speed=req.speed,
                               first_clause_words=settings.first_clause_words or None), req.mode)
        return StreamingResponse(sse(turn), media_type="text/event-stream", headers=SSE_HEADERS)

    async def index(request: Any) -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    async def info(request: Any) -> JSONResponse:
        return JSONResponse({
            "model": settings.model,
            "tokens_per_second": settings.tokens_per_second if settings.model == "scripted" else None,
            "tts": f"sagemaker:{settings.endpoint_name}" if settings.endpoint_name else settings.tts_url,
            "voice": settings.voice,
            "speed": settings.speed,
        })

    async def tts_health(request: Any) -> JSONResponse:
        return JSONResponse(await tts_status(settings))

    app.router.routes.extend([
        Route("/", index, methods=["GET"]),
        Route("/info", info, methods=["GET"]),
        Route("/tts-status", tts_health, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ])
    return app
