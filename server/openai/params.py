"""What an OpenAI speech request may carry, and the errors it gets in OpenAI's shape.

Pure functions, no I/O (the routes are in ``server.openai.routes``):

* :class:`APIError` — an error as OpenAI answers it, ``{"error": {"message", "type", "param",
  "code"}}``. The backend's typed errors map onto it with OpenAI's statuses: an unknown voice and
  text over ``KOKORO_MAX_TEXT_CHARS`` are **400** here (OpenAI's answer, so a client's
  ``BadRequestError`` catches them), though ``/invocations`` keeps its documented 404
  ``unknown_voice`` / 413 ``text_too_long``. A body over ``KOKORO_MAX_MESSAGE_BYTES`` stays 413 on
  every route: the server refuses it before reading it, whatever it holds.
* :func:`parse_speech` — validates a ``POST /v1/audio/speech`` body.

Speed: OpenAI's range, 0.25–4.0, is accepted and clamped to Kokoro's 0.5–2.0 (what
``/invocations`` accepts). Measured with the ONNX runtime on four sentences (``jm_kumo``), audio
length against speed, and a speech recogniser (pocketsphinx) as the listener:

* slower than 1.0 the audio lengthens in proportion (0.25 gives 4.0x the length), but the words
  blur: the recogniser recovers 88% of the words at 1.0, 68% at 0.5, 54% at 0.4 and 24% at 0.25;
* faster than 1.0 the model's durations shrink until they reach their floor of one frame per
  phoneme: 2.0 is 1.84x shorter than 1.0, but 3.0 only 2.2x and 4.0 2.3x, so past 2.0 the speed
  barely changes while the words run together (the recogniser: 46% at 1.5, 20% at 2.0, 15% at
  3.0, 12% at 4.0).

So 4.0 gives the same audio as 2.0 and 0.25 the same as 0.5. 2.0 stays the top (Kokoro's
documented range, where the length still follows the speed); for the clearest fast speech keep to
1.5 or less.

Voices: a loaded voice, an alias (``KOKORO_VOICE_ALIASES``), a blend ``a(2)+b(1)``, or
``{"id": ...}``. OpenAI's built-in names (alloy, nova, ...) that are neither loaded voices nor
aliases mean the server's default voice.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

from backends.api import (
    MAX_SPEED,
    MIN_SPEED,
    EmptyText,
    InvalidRequest,
    KokoroError,
    TextTooLong,
    UnknownVoice,
)
from backends.audio.encoders import check_format, check_sample_rate
from server.pipeline.http import BodyTooLarge

MODEL_IDS = ("kokoro", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")
OPENAI_VOICES = frozenset(
    "alloy ash ballad coral echo fable nova onyx sage shimmer verse marin cedar".split()
)
#: The speeds OpenAI accepts; they are clamped to Kokoro's MIN_SPEED..MAX_SPEED (module docstring).
OPENAI_MIN_SPEED, OPENAI_MAX_SPEED = 0.25, 4.0


class APIError(KokoroError):
    """An error answered in OpenAI's shape."""

    def __init__(self, status: int, message: str, *, code: str, param: str | None = None, type_: str = ""):
        super().__init__(message, code=code)
        self.status, self.param = status, param
        self.type = type_ or ("invalid_request_error" if status < 500 else "server_error")

    @classmethod
    def from_kokoro(cls, exc: KokoroError) -> APIError:
        param, status = None, exc.status
        if isinstance(exc, UnknownVoice) or exc.code == "invalid_voice":
            param, status = "voice", 400
        elif isinstance(exc, TextTooLong | EmptyText) and not isinstance(exc, BodyTooLarge):
            param, status = "input", 400
        return cls(status, exc.message, code=exc.code, param=param)

    @classmethod
    def of(cls, exc: KokoroError) -> APIError:
        return exc if isinstance(exc, APIError) else cls.from_kokoro(exc)

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        headers = {"Retry-After": "1"} if self.status == 503 else None
        return JSONResponse(body, status_code=self.status, headers=headers)


@dataclass(slots=True)
class SpeechParams:
    input: str
    voice: str | None
    format: str
    speed: float
    sample_rate: int
    lang: str | None
    stream_format: str


def _bad(message: str, param: str | None, code: str = "invalid_request") -> APIError:
    return APIError(400, message, code=code, param=param)


def _model(body: dict[str, Any], model_ids: Collection[str]) -> None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' is required (e.g. 'kokoro' or 'tts-1')", "model")
    if model not in model_ids:
        raise APIError(
            404,
            f"The model '{model}' does not exist; available: {', '.join(sorted(model_ids))}",
            code="model_not_found",
            param="model",
        )


def _voice(body: dict[str, Any], known: Collection[str]) -> str | None:
    voice = body.get("voice")
    if isinstance(voice, dict):
        voice = voice.get("id")
    if voice is not None and not isinstance(voice, str):
        raise _bad("'voice' must be a voice name, a blend like 'a(2)+b(1)', or {'id': name}", "voice")
    if voice is not None and voice.strip().lower() in OPENAI_VOICES and voice.strip() not in known:
        return None  # OpenAI's built-in names without an alias stand for the server's default voice
    return voice


def clamp_speed(speed: float) -> float:
    """An OpenAI speed (0.25–4.0) as the speed Kokoro synthesises (0.5–2.0; module docstring)."""
    return min(max(float(speed), MIN_SPEED), MAX_SPEED)


def _speed(body: dict[str, Any]) -> float:
    speed = body.get("speed", 1.0)
    if speed is None:
        speed = 1.0
    if (isinstance(speed, bool) or not isinstance(speed, int | float)
            or not OPENAI_MIN_SPEED <= speed <= OPENAI_MAX_SPEED):
        raise _bad(f"'speed' must be a number from {OPENAI_MIN_SPEED} to {OPENAI_MAX_SPEED}", "speed")
    return clamp_speed(speed)


def parse_speech(body: Any, *, model_ids: Collection[str], voices: Collection[str]) -> SpeechParams:
    """Validate a speech request body (types, ranges, names). ``voices``: the names the server
    knows (loaded voices and aliases). Raises :class:`APIError`."""
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object", None, "invalid_json")
    _model(body, model_ids)
    text = body.get("input")
    if not isinstance(text, str) or not text.strip():
        raise _bad("'input' must be a non-empty string", "input")
    voice = _voice(body, voices)
    try:
        fmt = check_format(body.get("response_format") or "mp3")
    except InvalidRequest as e:
        raise _bad(e.message, "response_format") from None
    speed = _speed(body)
    try:
        rate = check_sample_rate(body.get("sample_rate"))
    except InvalidRequest as e:
        raise _bad(e.message, "sample_rate") from None
    lang = body.get("lang", body.get("lang_code"))
    if lang is not None and not isinstance(lang, str):
        raise _bad("'lang' must be a string such as 'en-us'", "lang")
    stream_format = body.get("stream_format") or "audio"
    if stream_format not in ("audio", "sse"):
        raise _bad("'stream_format' must be 'audio' or 'sse'", "stream_format")
    return SpeechParams(text, voice, fmt, speed, rate, lang, stream_format)
