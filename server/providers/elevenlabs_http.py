"""ElevenLabs' REST text-to-speech — ``POST /v1/text-to-speech/{voice_id}``, ``.../stream``,
``.../with-timestamps``, ``.../stream/with-timestamps`` — the twins of the input-streaming WebSockets
on the one synthesis pipeline, for the ElevenLabs SDK (``convert``, ``stream``,
``convert_with_timestamps``, ``stream_with_timestamps``) and LiveKit's ``synthesize()``.

Request: ``voice_id`` in the path (a Kokoro voice, a blend or an alias of ``KOKORO_VOICE_ALIASES``),
query ``output_format`` (``server.providers.formats``; default ``mp3_44100_128``, the service's),
JSON body ``text`` and ``voice_settings.speed`` (0.5-2.0). ``model_id``, ``language_code``, the
other ``voice_settings``, ``seed``, ``previous_text``/``next_text``, ``apply_text_normalization``,
``enable_logging``, ``optimize_streaming_latency`` are accepted and not used. Key: ``xi-api-key``
(or ``Authorization: Bearer``) where ``KOKORO_API_KEY`` is set.

Responses: the audio streamed from the first segment (``Content-Type`` ``audio/...``, which
LiveKit checks); ``/with-timestamps`` one JSON object ``{"audio_base64", "alignment",
"normalized_alignment"}`` whose ``alignment`` has ``characters``, ``character_start_times_seconds``,
``character_end_times_seconds`` over the whole audio; ``/stream/with-timestamps`` one such object per
line and segment, its times continuous from the request's first sample (as the service sends them:
Pipecat takes the largest end as the utterance's length). The ``x-trace-id`` header names the
request. Errors as ElevenLabs', ``{"detail": {"status", "message"}}``: an unknown voice 404
``voice_not_found``, a wrong key 401 ``invalid_api_key``, a bad request or format 400, text over
the limit 400 ``max_character_limit_exceeded``, loading/draining/overloaded 503 with ``Retry-After``.
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

from backends.api import AudioChunk, KokoroError, SynthesisRequest, TextTooLong, UnknownVoice
from server.auth import key_matches
from server.pipeline.http import AudioStream, SpeechEndpoint, wait_disconnect
from server.pipeline.params import parse_synthesis
from server.pipeline.synthesis import Synthesis
from server.providers.alignment import char_alignment
from server.providers.common import Unauthorized, json_object, timed_audio
from server.providers.elevenlabs import PATH_PREFIX, header_key, voice_speed
from server.providers.formats import WireFormat, elevenlabs_format
from server.state import ServerState
from server.streaming.events import Audio

ROUTE = "elevenlabs"


def error_detail(error: KokoroError) -> tuple[int, dict[str, Any]]:
    """ElevenLabs' status and ``{"detail": {"status", "message"}}`` for ``error``."""
    status, code = error.status, error.code
    if isinstance(error, Unauthorized):
        code = "invalid_api_key"
    elif isinstance(error, UnknownVoice):
        status, code = 404, "voice_not_found"
    elif isinstance(error, TextTooLong):
        status, code = 400, "max_character_limit_exceeded"
    return status, {"detail": {"status": code, "message": error.message}}


def _error_response(error: KokoroError, job: Synthesis, request: Request) -> Response:
    status, body = error_detail(error)
    headers = {"x-trace-id": job.request_id}
    if status == 503:
        headers["Retry-After"] = "1"
    return JSONResponse(body, status_code=status, headers=headers)


async def _open(request: Request, job: Synthesis) -> tuple[WireFormat, AudioChunk]:
    state: ServerState = request.app.state.kokoro
    key = state.settings.api_key
    if key is not None and not key_matches(key.get_secret_value(), header_key(request)):
        raise Unauthorized("Invalid API key")
    voice = request.path_params["voice_id"]
    voices = state.backend.voices
    if voice not in voices:
        raise UnknownVoice(f"A voice with voice_id '{voice[:64]}' was not found (voices: {', '.join(voices.names())}).")
    fmt = elevenlabs_format(request.query_params.get("output_format"), http=True)
    obj = await json_object(request, state.settings.max_message_bytes)
    text = obj.get("text")
    params = parse_synthesis({"text": text if text is not None else ""}, max_text_chars=state.settings.max_text_chars)
    job.encoder = fmt.encoder()
    request_ = SynthesisRequest(text=params.text, voice=voice, speed=voice_speed(obj), request_id=job.request_id)
    return fmt, await job.open(request_, gone=lambda: wait_disconnect(request))


def _headers(job: Synthesis) -> dict[str, str]:
    return {"x-trace-id": job.request_id, "request-id": job.request_id, "Cache-Control": "no-store"}


async def audio(request: Request, job: Synthesis) -> Response:
    """``/v1/text-to-speech/{voice_id}`` and ``/stream``: the audio, streamed."""
    fmt, first = await _open(request, job)
    return AudioStream(job, job.encoded(first), media_type=fmt.content_type, headers=_headers(job))


def seconds_alignment(pieces: list[tuple[Audio, WireFormat]]) -> dict[str, list[Any]]:
    """ElevenLabs' HTTP ``alignment`` of ``pieces`` (characters with start/end seconds from the
    request's first sample)."""
    chars: list[str] = []
    starts: list[float] = []
    ends: list[float] = []
    for piece, fmt in pieces:
        if not piece.text:
            continue
        a = char_alignment(piece, fmt.seconds(piece.data) or piece.duration)
        for c, s, d in zip(a["chars"], a["charStartTimesMs"], a["charDurationsMs"], strict=True):
            chars.append(c)
            starts.append(round(piece.offset + s / 1000, 3))
            ends.append(round(piece.offset + (s + d) / 1000, 3))
    return {"characters": chars, "character_start_times_seconds": starts, "character_end_times_seconds": ends}


def _timed(data: bytes, alignment: dict[str, list[Any]]) -> dict[str, Any]:
    return {"audio_base64": base64.b64encode(data).decode("ascii"), "alignment": alignment,
            "normalized_alignment": alignment}


async def with_timestamps(request: Request, job: Synthesis) -> Response:
    """``/with-timestamps``: the whole audio and its alignment, one JSON object."""
    fmt, first = await _open(request, job)
    pieces = [(piece, fmt) async for piece in timed_audio(job, first, fmt)]
    job.first_audio()
    job.record(200)
    body = _timed(b"".join(p.data for p, _ in pieces), seconds_alignment(pieces))
    return JSONResponse(body, headers=_headers(job))


async def stream_with_timestamps(request: Request, job: Synthesis) -> Response:
    """``/stream/with-timestamps``: one JSON line per segment."""
    fmt, first = await _open(request, job)
    return AudioStream(job, _lines(job, first, fmt), media_type="application/json", headers=_headers(job))


async def _lines(job: Synthesis, first: AudioChunk, fmt: WireFormat) -> AsyncIterator[bytes]:
    async for piece in timed_audio(job, first, fmt):
        if piece.data or piece.text:
            yield (json.dumps(_timed(piece.data, seconds_alignment([(piece, fmt)]))) + "\n").encode()


def _request_id(request: Request) -> str:
    return secrets.token_hex(16)


def elevenlabs_http_routes() -> list[Route]:
    """The four HTTP routes under ``/v1/text-to-speech/{voice_id}``."""
    def route(suffix: str, handler: Any) -> Route:
        return Route(PATH_PREFIX + "{voice_id}" + suffix,
                     SpeechEndpoint(ROUTE, handler, _error_response, _request_id), methods=["POST"])

    return [route("", audio), route("/stream", audio), route("/with-timestamps", with_timestamps),
            route("/stream/with-timestamps", stream_with_timestamps)]
