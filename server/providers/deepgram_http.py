"""Deepgram's REST text-to-speech, ``POST /v1/speak`` — the twin of the speak WebSocket on the one
synthesis pipeline, for the Deepgram SDK's ``speak.v1.audio.generate`` and the clients'
non-streaming calls (LiveKit's ``synthesize()``, Pipecat's ``DeepgramHttpTTSService``).

Request: JSON ``{"text": ...}`` (any ``Content-Type``; ``text/plain`` bodies are the text itself),
query ``model`` (a Kokoro voice, a blend or an alias of ``KOKORO_VOICE_ALIASES``; none: the
default voice; anything else is refused as Deepgram refuses an unknown model), ``encoding``,
``container``, ``sample_rate``, ``bit_rate`` (``server.providers.formats``; no query: MP3 at
22050 Hz, 48 kb/s, Deepgram's REST default), ``speed`` (0.5-2.0, clamped). ``mip_opt_out``,
``tag``, ``callback`` are accepted and ignored. Key: ``Authorization: Token <key>`` (or
``Bearer``) where ``KOKORO_API_KEY`` is set.

Response: the audio streamed from the first segment, with ``dg-request-id``, ``dg-model-name``,
``dg-model-uuid``, ``dg-char-count``. Errors as Deepgram's, ``{"err_code", "err_msg",
"request_id"}``: an unknown model or an empty text 400 ``Bad Request``, an unsupported format 400
``INVALID_QUERY_PARAMETER``, bad JSON 400 ``PAYLOAD_ERROR``, a wrong key 401 ``INVALID_AUTH``, text
over the limit 413, loading/draining/overloaded 503 with ``Retry-After``.
"""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from backends.api import (
    MAX_SPEED,
    MIN_SPEED,
    EmptyText,
    InvalidJSON,
    KokoroError,
    SynthesisRequest,
    TextTooLong,
    UnknownVoice,
)
from server.auth import authorization, key_matches
from server.pipeline.http import AudioStream, SpeechEndpoint, read_body, wait_disconnect
from server.pipeline.params import decode_object, parse_synthesis
from server.pipeline.synthesis import Synthesis
from server.providers.common import Unauthorized
from server.providers.formats import FormatError, deepgram_format
from server.state import ServerState

PATH = "/v1/speak"
ROUTE = "deepgram"
MODEL_VERSION = "kokoro-82m"
UNKNOWN_MODEL = "Bad Request: No such model/version combination found."


class UnknownModel(UnknownVoice):
    """A ``model`` that is no loaded voice, blend or alias: refused (400) as Deepgram refuses one."""

    status = 400


def model_voice(voices: Any, model: str | None) -> str | None:
    """The voice ``model`` names (None: the default). Raises :class:`UnknownModel`."""
    if not model:
        return None
    if model in voices:
        return model
    raise UnknownModel(f"{UNKNOWN_MODEL} ({model[:80]!r} is not a Kokoro voice, blend or alias of "
                       f"KOKORO_VOICE_ALIASES; voices: {', '.join(voices.names())})")


def model_uuid(model: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"kokoro:{model}"))


def clamped_speed(value: str | None) -> float:
    try:
        speed = float(value) if value else 1.0
    except ValueError:
        return 1.0
    return min(MAX_SPEED, max(MIN_SPEED, speed)) if speed == speed else 1.0


def authorized(headers: Any, query: Any, key: str) -> bool:
    """Deepgram's ``Authorization: Token <key>`` (``Bearer`` too) or ``?token=``."""
    scheme, token = authorization(headers)
    given = token if scheme in ("token", "bearer") else None
    return key_matches(key, given) or key_matches(key, query.get("token"))


def error_body(error: KokoroError, request_id: str) -> tuple[int, dict[str, Any]]:
    """Deepgram's status and ``{"err_code", "err_msg", "request_id"}`` for ``error``."""
    if isinstance(error, FormatError):
        status, code, message = 400, "INVALID_QUERY_PARAMETER", error.message
    elif isinstance(error, InvalidJSON):
        status, code, message = 400, "PAYLOAD_ERROR", f"Failed to deserialize JSON payload: {error.message}"
    elif isinstance(error, EmptyText):
        status, code, message = 400, "Bad Request", "Input text contains no characters."
    elif isinstance(error, Unauthorized):
        status, code, message = 401, "INVALID_AUTH", "Invalid credentials."
    elif isinstance(error, TextTooLong):
        status, code, message = 413, "PAYLOAD_TOO_LARGE", error.message
    elif isinstance(error, UnknownVoice):
        status, code, message = 400, "Bad Request", error.message
    elif error.status < 500:
        status, code, message = 400, "Bad Request", error.message
    else:
        status, code, message = error.status, error.code.upper(), error.message
    return status, {"err_code": code, "err_msg": message, "request_id": request_id}


def _error_response(error: KokoroError, job: Synthesis, request: Request) -> Response:
    status, body = error_body(error, job.request_id)
    headers = {"dg-request-id": job.request_id, "dg-error": body["err_msg"][:200]}
    if status == 503:
        headers["Retry-After"] = "1"
    return JSONResponse(body, status_code=status, headers=headers)


async def _text(request: Request, limit: int) -> str:
    raw = await read_body(request, limit)
    if request.headers.get("content-type", "").split(";")[0].strip().lower() == "text/plain":
        return raw.decode("utf-8", "replace")
    text = decode_object(raw).get("text")
    if text is not None and not isinstance(text, str):
        raise InvalidJSON("'text' must be a string")
    return text or ""


async def speak(request: Request, job: Synthesis) -> Response:
    """``POST /v1/speak`` (module docstring)."""
    state: ServerState = request.app.state.kokoro
    key = state.settings.api_key
    if key is not None and not authorized(request.headers, request.query_params, key.get_secret_value()):
        raise Unauthorized("missing or wrong API key")
    q = request.query_params
    fmt = deepgram_format(q, http=True)
    model = q.get("model") or ""
    voice = model_voice(state.backend.voices, model)
    text = await _text(request, state.settings.max_message_bytes)
    params = parse_synthesis({"text": text}, max_text_chars=state.settings.max_text_chars)
    job.encoder = fmt.encoder()
    first = await job.open(
        SynthesisRequest(text=params.text, voice=voice, speed=clamped_speed(q.get("speed")), request_id=job.request_id),
        gone=lambda: wait_disconnect(request),
    )
    name = model or state.backend.voices.default
    headers = {"dg-request-id": job.request_id, "dg-model-name": name, "dg-model-uuid": model_uuid(name),
               "dg-char-count": str(len(params.text)), "Cache-Control": "no-store"}
    return AudioStream(job, job.encoded(first), media_type=fmt.content_type, headers=headers)


def _request_id(request: Request) -> str:
    return str(uuid.uuid4())


def deepgram_http_routes() -> list[Route]:
    """``POST /v1/speak`` (beside the WebSocket route of the same path)."""
    return [Route(PATH, SpeechEndpoint(ROUTE, speak, _error_response, _request_id), methods=["POST"])]
