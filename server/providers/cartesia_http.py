"""Cartesia's REST text-to-speech, ``POST /tts/bytes`` and ``POST /tts/sse`` — the twins of the TTS
WebSocket on the one synthesis pipeline, for Cartesia's SDK (``tts.generate`` / ``tts.bytes``,
``tts.generate_sse``) and LiveKit's ``synthesize()``.

Request (JSON, whatever the ``Content-Type``): ``transcript``, ``voice`` (a bare id, ``{"id"}`` or
``{"mode": "id", "id"}``: a Kokoro voice, a blend or an alias; none: the default voice),
``output_format`` (``server.providers.formats``: ``raw`` on both routes, ``wav`` and ``mp3`` on
``/tts/bytes``), ``generation_config.speed`` (or ``speed``; 0.5-2.0); on ``/tts/sse`` also
``add_timestamps`` and ``context_id``. ``model_id``, ``language``, ``pronunciation_dict_id``,
``save`` are accepted and not used. Key: ``X-API-Key``, ``Authorization: Bearer`` or
``?api_key=`` where ``KOKORO_API_KEY`` is set; ``Cartesia-Version`` is accepted, not required.

``/tts/bytes`` streams the audio from the first segment. ``/tts/sse`` sends ``event: <type>`` /
``data: <json>`` pairs: ``chunk`` (base64 audio of one segment, ``status_code`` 206), then, when
asked, ``timestamps`` (``word_timestamps``: ``words``, ``start``, ``end`` in seconds from the
request's first sample, as on the WebSocket), and ``done``; a failure after the first event is an
``error`` event. Errors before the first byte: Cartesia's JSON ``{"error_code", "title", "message",
"request_id"}`` with the status (400 bad request or format, 401 key, 404 voice, 413 text, 503
with ``Retry-After``) and ``x-should-retry: false`` on a 4xx.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from backends.api import AudioChunk, KokoroError, SynthesisRequest
from server.auth import bearer_token, key_matches
from server.pipeline.http import AudioStream, SpeechEndpoint, wait_disconnect
from server.pipeline.params import parse_synthesis
from server.pipeline.synthesis import Synthesis
from server.providers.alignment import words_of
from server.providers.cartesia import voice_and_speed
from server.providers.common import Unauthorized, json_object, timed_audio
from server.providers.formats import WireFormat, cartesia_format
from server.state import ServerState

ROUTE = "cartesia"
BYTES_PATH = "/tts/bytes"
SSE_PATH = "/tts/sse"
_TITLES = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 413: "Payload Too Large",
           503: "Service Unavailable"}


def _authorize(request: Request, state: ServerState) -> None:
    key = state.settings.api_key
    if key is None:
        return
    given = (request.headers.get("x-api-key") or bearer_token(request.headers)
             or request.query_params.get("api_key"))
    if not key_matches(key.get_secret_value(), given):
        raise Unauthorized("Invalid API key")


def error_json(error: KokoroError, request_id: str) -> tuple[int, dict[str, Any]]:
    status = error.status if 400 <= error.status < 600 else 500
    return status, {"error_code": error.code, "title": _TITLES.get(status, "Error"), "message": error.message,
                    "request_id": request_id}


def _error_response(error: KokoroError, job: Synthesis, request: Request) -> Response:
    status, body = error_json(error, job.request_id)
    headers = {"x-should-retry": "false"} if status < 500 else {}
    if status == 503:
        headers["Retry-After"] = "1"
    return JSONResponse(body, status_code=status, headers=headers)


async def _open(request: Request, job: Synthesis, containers: tuple[str, ...]) -> tuple[dict[str, Any], WireFormat,
                                                                                        AudioChunk]:
    state: ServerState = request.app.state.kokoro
    _authorize(request, state)
    obj = await json_object(request, state.settings.max_message_bytes)
    voice, speed = voice_and_speed(obj, state.backend.voices)
    fmt = cartesia_format(obj.get("output_format"), containers=containers)
    transcript = obj.get("transcript")
    params = parse_synthesis({"text": transcript if transcript is not None else ""},
                             max_text_chars=state.settings.max_text_chars)
    job.encoder = fmt.encoder()
    first = await job.open(SynthesisRequest(text=params.text, voice=voice, speed=speed, request_id=job.request_id),
                           gone=lambda: wait_disconnect(request))
    return obj, fmt, first


async def tts_bytes(request: Request, job: Synthesis) -> Response:
    """``POST /tts/bytes``: the audio, streamed."""
    _, fmt, first = await _open(request, job, ("raw", "wav", "mp3"))
    return AudioStream(job, job.encoded(first), media_type=fmt.content_type, headers={"Cache-Control": "no-store"})


async def tts_sse(request: Request, job: Synthesis) -> Response:
    """``POST /tts/sse``: chunk, timestamps and done events."""
    obj, fmt, first = await _open(request, job, ("raw",))
    cid = obj.get("context_id") if isinstance(obj.get("context_id"), str) else None
    timestamps = obj.get("add_timestamps") is True
    return AudioStream(job, _events(job, first, fmt, cid, timestamps), media_type="text/event-stream",
                       headers={"Cache-Control": "no-store"})


def _event(kind: str, body: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **body})}\n\n".encode()


async def _events(job: Synthesis, first: AudioChunk, fmt: WireFormat, cid: str | None,
                  timestamps: bool) -> AsyncIterator[bytes]:
    base: dict[str, Any] = {"done": False, "status_code": 206}
    if cid is not None:
        base["context_id"] = cid
    try:
        async for audio in timed_audio(job, first, fmt):
            if audio.data:
                yield _event("chunk", {**base, "data": base64.b64encode(audio.data).decode("ascii"), "step_time": 0})
            words = words_of(audio) if timestamps and audio.text else []
            if words:
                yield _event("timestamps", {**base, "word_timestamps": {
                    "words": [w.word for w in words], "start": [round(w.start, 3) for w in words],
                    "end": [round(w.end, 3) for w in words]}})
    except KokoroError as e:
        status, body = error_json(e, job.request_id)
        yield _event("error", {**body, "done": True, "status_code": status, **({"context_id": cid} if cid else {})})
        raise
    yield _event("done", {**base, "done": True})


def _request_id(request: Request) -> str:
    return secrets.token_hex(16)


def cartesia_http_routes() -> list[Route]:
    """``POST /tts/bytes`` and ``POST /tts/sse``."""
    return [
        Route(BYTES_PATH, SpeechEndpoint(ROUTE, tts_bytes, _error_response, _request_id), methods=["POST"]),
        Route(SSE_PATH, SpeechEndpoint(ROUTE, tts_sse, _error_response, _request_id), methods=["POST"]),
    ]
