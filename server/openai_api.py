"""OpenAI-compatible speech API, so clients of the OpenAI SDK (and Kokoro-FastAPI's users) only change
``base_url``.

Routes (see :func:`openai_routes`):

* ``POST /v1/audio/speech`` — ``model``, ``input``, ``voice``, ``response_format`` (mp3 | opus | aac
  | flac | wav | pcm; default mp3), ``speed`` (0.5–2.0, Kokoro's range), and the extensions
  ``sample_rate`` (8000, 16000, 22050, 24000, 44100, 48000) and ``lang``. ``stream_format`` "audio"
  (default) streams the encoded file; "sse" sends ``speech.audio.delta`` events (base64 of the
  encoded bytes) and a final ``speech.audio.done``.
* ``POST /v1/audio/speech/timed`` — same body; JSON with the whole audio (base64) and per-word
  ``start``/``end`` seconds. Needs a runtime that reports durations (torch); others answer 501
  ``unsupported``.
* ``GET /v1/models``, ``GET /v1/models/{id}``, ``GET /v1/audio/voices``.

Choices: ``model`` accepts ``kokoro``, OpenAI's TTS model names and the served model file's name
(all the same model). ``voice`` is a loaded voice, a blend ``a(2)+b(1)`` (weights normalised), or
``{"id": ...}``; OpenAI's built-in names (alloy, nova, ...) that are not loaded voices map to the
server's default voice. ``instructions`` is accepted and ignored. Errors use OpenAI's shape
``{"error": {"message", "type", "param", "code"}}``.

Every speech route goes through the one synthesis pipeline (``server.pipeline``, ``server.http``):
the same admission as ``/invocations`` (503 ``not_ready`` while loading or draining), the body
bounded by ``KOKORO_MAX_MESSAGE_BYTES`` (413 ``text_too_long`` before the rest is read), the first
segment synthesised before the response starts (so request errors get a proper status) while a
client that leaves stops the work, then one encoded piece per segment. A failure later in the
stream cuts the connection (the status is already sent), so the client sees a truncated transfer
rather than a short file that looks complete. Compressed formats are encoded in a worker thread;
nothing blocking runs on the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from backends.audio import Encoder, check_format, check_sample_rate
from backends.base import (
    MAX_SPEED,
    MIN_SPEED,
    AudioChunk,
    Backend,
    EmptyText,
    InvalidRequest,
    KokoroError,
    SynthesisRequest,
    TextTooLong,
    UnknownVoice,
    Unsupported,
)

from .http import AudioStream, SpeechEndpoint, read_body, wait_disconnect
from .params import decode_json
from .pipeline import Synthesis
from .settings import Settings
from .word_timings import segment_word_timings

MODEL_IDS = ("kokoro", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")
OPENAI_VOICES = frozenset(
    "alloy ash ballad coral echo fable nova onyx sage shimmer verse marin cedar".split()
)
_CREATED = int(time.time())
ROUTE = "openai"


class APIError(KokoroError):
    """An error answered in OpenAI's shape."""

    def __init__(self, status: int, message: str, *, code: str, param: str | None = None, type_: str = ""):
        super().__init__(message, code=code)
        self.status, self.param = status, param
        self.type = type_ or ("invalid_request_error" if status < 500 else "server_error")

    @classmethod
    def from_kokoro(cls, exc: KokoroError) -> APIError:
        param = None
        if isinstance(exc, UnknownVoice) or exc.code == "invalid_voice":
            param = "voice"
        elif isinstance(exc, TextTooLong | EmptyText):
            param = "input"
        return cls(exc.status, exc.message, code=exc.code, param=param)

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


def parse_speech(body: Any, *, model_ids: set[str], loaded: set[str]) -> SpeechParams:
    """Validate a speech request body (types, ranges, names). Raises :class:`APIError`."""
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object", None, "invalid_json")
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
    text = body.get("input")
    if not isinstance(text, str) or not text.strip():
        raise _bad("'input' must be a non-empty string", "input")

    voice = body.get("voice")
    if isinstance(voice, dict):
        voice = voice.get("id")
    if voice is not None and not isinstance(voice, str):
        raise _bad("'voice' must be a voice name, a blend like 'a(2)+b(1)', or {'id': name}", "voice")
    if voice is not None and voice.strip().lower() in OPENAI_VOICES and voice.strip() not in loaded:
        voice = None  # OpenAI's built-in names stand for the server's default voice

    try:
        fmt = check_format(body.get("response_format") or "mp3")
    except InvalidRequest as e:
        raise _bad(e.message, "response_format") from None

    speed = body.get("speed", 1.0)
    if speed is None:
        speed = 1.0
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not MIN_SPEED <= speed <= MAX_SPEED:
        raise _bad(f"'speed' must be a number from {MIN_SPEED} to {MAX_SPEED}", "speed")

    rate = body.get("sample_rate")
    try:
        rate = check_sample_rate(rate)
    except InvalidRequest as e:
        raise _bad(e.message, "sample_rate") from None

    lang = body.get("lang", body.get("lang_code"))
    if lang is not None and not isinstance(lang, str):
        raise _bad("'lang' must be a string such as 'en-us'", "lang")

    stream_format = body.get("stream_format") or "audio"
    if stream_format not in ("audio", "sse"):
        raise _bad("'stream_format' must be 'audio' or 'sse'", "stream_format")
    return SpeechParams(text, voice, fmt, float(speed), rate, lang, stream_format)


class OpenAIRoutes:
    """Handlers bound to one backend. Stateless between requests; safe under concurrency."""

    def __init__(self, backend: Backend, settings: Settings):
        self.backend = backend
        self.settings = settings

    # -- helpers --------------------------------------------------------------------------------
    def _model_ids(self) -> set[str]:
        ids = set(MODEL_IDS)
        if name := self.backend.info.model:
            ids.add(name)
        return ids

    async def _params(self, request: Request) -> SpeechParams:
        body = decode_json(await read_body(request, self.settings.max_message_bytes))  # 400 invalid_json
        return parse_speech(body, model_ids=self._model_ids(), loaded=set(self.backend.voices.names()))

    async def _open(self, p: SpeechParams, request: Request, job: Synthesis) -> AudioChunk:
        job.request_id = request.headers.get("x-request-id") or f"oai-{time.monotonic_ns():x}"
        req = SynthesisRequest(text=p.input, voice=p.voice, speed=p.speed, lang=p.lang, request_id=job.request_id)
        return await job.open(req, gone=lambda: wait_disconnect(request))

    # -- POST /v1/audio/speech ------------------------------------------------------------------
    async def speech(self, request: Request, job: Synthesis) -> Response:
        p = await self._params(request)
        encoder = job.use_encoder(p.format, p.sample_rate)
        first = await self._open(p, request, job)
        headers = {"X-Sample-Rate": str(encoder.sample_rate), "Cache-Control": "no-store"}
        if p.stream_format == "sse":
            return AudioStream(job, _sse(job.encoded(first)), media_type="text/event-stream", headers=headers)
        return AudioStream(job, job.encoded(first), media_type=encoder.content_type, headers=headers)

    # -- POST /v1/audio/speech/timed ------------------------------------------------------------
    async def speech_timed(self, request: Request, job: Synthesis) -> Response:
        p = await self._params(request)
        info = self.backend.info
        if not info.capabilities.word_timings:
            raise Unsupported(
                f"word timings need a backend that reports phoneme durations (the torch runtime); "
                f"this server runs the {info.runtime!r} runtime in {info.mode} mode, which does not"
            )
        encoder = job.use_encoder(p.format, p.sample_rate)
        first = await self._open(p, request, job)
        chunks = [chunk async for chunk in job.chunks(first)]
        if any(chunk.durations is None for chunk in chunks):
            raise Unsupported("the backend did not report durations for this request")
        lang = (job.request.lang if job.request is not None else None) or "en-us"
        result = await asyncio.to_thread(self._timed_result, p, encoder, chunks, lang)
        job.first_audio()
        job.record(200)
        return JSONResponse(result)

    def _timed_result(self, p: SpeechParams, encoder: Encoder, chunks: list[AudioChunk], lang: str) -> dict[str, Any]:
        """Encode the whole answer and time its words (a worker thread: encoding and G2P block)."""
        parts, words, offset = [], [], 0.0

        def phonemize(word: str) -> str:
            return self.backend.phonemize(word, lang)

        for chunk in chunks:
            parts.append(encoder.encode(chunk.audio))
            assert chunk.durations is not None
            words.extend(segment_word_timings(
                chunk.text, chunk.phonemes, chunk.durations, len(chunk.audio), phonemize, offset
            ))
            offset += chunk.seconds
        parts.append(encoder.flush())
        return {
            "audio": base64.b64encode(b"".join(parts)).decode("ascii"),
            "format": p.format,
            "content_type": encoder.content_type,
            "sample_rate": encoder.sample_rate,
            "duration": round(offset, 3),
            "words": [w.to_dict() for w in words],
        }

    # -- GET routes -----------------------------------------------------------------------------
    def _model_card(self, model_id: str) -> dict[str, Any]:
        return {"id": model_id, "object": "model", "created": _CREATED, "owned_by": "kokoro-serve"}

    async def models(self, request: Request) -> Response:
        ids = ["kokoro", *sorted(self._model_ids() - {"kokoro"})]
        return JSONResponse({"object": "list", "data": [self._model_card(i) for i in ids]})

    async def model(self, request: Request) -> Response:
        model_id = request.path_params["model"]
        if model_id not in self._model_ids():
            return APIError(
                404, f"The model '{model_id}' does not exist", code="model_not_found", param="model"
            ).response()
        return JSONResponse(self._model_card(model_id))

    async def voices(self, request: Request) -> Response:
        catalog = self.backend.voices
        return JSONResponse({"voices": catalog.names(), "default": catalog.default})


def error_response(error: KokoroError, job: Synthesis) -> Response:
    return APIError.of(error).response()


async def _sse(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """OpenAI's speech SSE events around the encoded byte stream (no ``done`` after a failure:
    the error propagates and the transfer is cut)."""
    async with aclosing(body):
        async for data in body:
            event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
            yield f"data: {json.dumps(event)}\n\n".encode()
    done = {"type": "speech.audio.done", "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}}
    yield f"data: {json.dumps(done)}\n\n".encode()


def openai_routes(backend: Backend, settings: Settings) -> list[BaseRoute]:
    """The OpenAI-compatible routes for ``backend`` (mount them in the app's route list). The
    speech routes run through the synthesis pipeline (route label ``openai``)."""
    h = OpenAIRoutes(backend, settings)
    return [
        Route("/v1/audio/speech", SpeechEndpoint(ROUTE, h.speech, error_response), methods=["POST"]),
        Route("/v1/audio/speech/timed", SpeechEndpoint(ROUTE, h.speech_timed, error_response), methods=["POST"]),
        Route("/v1/audio/voices", h.voices, methods=["GET"]),
        Route("/v1/models", h.models, methods=["GET"]),
        Route("/v1/models/{model:path}", h.model, methods=["GET"]),
    ]
