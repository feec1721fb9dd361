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

Streaming and cancellation: the first segment is synthesised before the response starts, so
request errors (unknown voice, overload, a failing first segment) get a proper status; the first
encoded bytes leave right after it and then one piece per segment. A failure later in the stream
aborts the connection (the status is already sent), so the client sees a truncated transfer rather
than a short file that looks complete. A client that goes away closes the body iterator, which closes
the backend stream (its pending segments are never synthesised) and discards the encoder. Encoding
runs in a worker thread; nothing blocking runs on the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from backends.audio import check_format, check_sample_rate, make_encoder
from backends.base import (
    MAX_SPEED,
    MIN_SPEED,
    AudioChunk,
    EmptyText,
    InvalidRequest,
    KokoroError,
    SynthesisRequest,
    TextTooLong,
    UnknownVoice,
    Unsupported,
)
from server.params import decode_json
from server.word_timings import segment_word_timings

log = logging.getLogger("kokoro.openai")

MODEL_IDS = ("kokoro", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")
OPENAI_VOICES = frozenset(
    "alloy ash ballad coral echo fable nova onyx sage shimmer verse marin cedar".split()
)
_CREATED = int(time.time())


class APIError(Exception):
    """An error answered in OpenAI's shape."""

    def __init__(self, status: int, message: str, *, code: str, param: str | None = None, type_: str = ""):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.type = type_ or ("invalid_request_error" if status < 500 else "server_error")

    @classmethod
    def from_kokoro(cls, exc: KokoroError) -> APIError:
        param = None
        if isinstance(exc, UnknownVoice) or exc.code == "invalid_voice":
            param = "voice"
        elif isinstance(exc, TextTooLong | EmptyText):
            param = "input"
        return cls(exc.status, exc.message, code=exc.code, param=param)

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        headers = {"Retry-After": "1"} if self.status == 503 else None
        return JSONResponse(body, status_code=self.status, headers=headers)


def _internal_error() -> APIError:
    return APIError(500, "internal server error", code="internal_error")


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

    def __init__(self, backend: Any, settings: Any = None):
        self.backend = backend
        self.settings = settings

    # -- helpers --------------------------------------------------------------------------------
    def _model_ids(self) -> set[str]:
        ids = set(MODEL_IDS)
        name = getattr(self.backend, "model_name", "")
        if name:
            ids.add(name)
        return ids

    def _voices(self) -> Any:
        return self.backend.voices

    async def _params(self, request: Request) -> SpeechParams:
        body = decode_json(await request.body())  # InvalidJSON -> 400 invalid_json
        return parse_speech(body, model_ids=self._model_ids(), loaded=set(self._voices().names()))

    async def _prepare(self, p: SpeechParams, request_id: str) -> SynthesisRequest:
        await self.backend.check_health()
        req = SynthesisRequest(text=p.input, voice=p.voice, speed=p.speed, lang=p.lang, request_id=request_id)
        return await self.backend.prepare(req)

    @staticmethod
    def _request_id(request: Request) -> str:
        return request.headers.get("x-request-id") or f"oai-{time.monotonic_ns():x}"

    # -- POST /v1/audio/speech ------------------------------------------------------------------
    async def speech(self, request: Request) -> Response:
        received = time.perf_counter()
        try:
            p = await self._params(request)
            prepared = await self._prepare(p, self._request_id(request))
            encoder = make_encoder(p.format, p.sample_rate)
            chunks = self.backend.stream(prepared)
            try:
                first: AudioChunk | None = await anext(chunks)
            except StopAsyncIteration:
                first = None
            except BaseException:
                await chunks.aclose()
                raise
        except APIError as e:
            return e.response()
        except KokoroError as e:
            return APIError.from_kokoro(e).response()
        except Exception:
            log.exception("speech request failed")
            return _internal_error().response()

        _observe_first_audio(request, received)
        body = self._encoded(first, chunks, encoder)
        headers = {"X-Sample-Rate": str(encoder.sample_rate), "Cache-Control": "no-store"}
        if p.stream_format == "sse":
            return StreamingResponse(_sse(body), media_type="text/event-stream", headers=headers)
        return StreamingResponse(body, media_type=encoder.content_type, headers=headers)

    @staticmethod
    async def _encoded(
        first: AudioChunk | None, chunks: AsyncIterator[AudioChunk], encoder
    ) -> AsyncIterator[bytes]:
        finished = False
        try:
            async with aclosing(chunks):
                if first is not None:
                    data = await asyncio.to_thread(encoder.encode, first.audio)
                    if data:
                        yield data
                async for chunk in chunks:
                    data = await asyncio.to_thread(encoder.encode, chunk.audio)
                    if data:
                        yield data
            tail = await asyncio.to_thread(encoder.flush)
            finished = True
            if tail:
                yield tail
        except KokoroError as e:
            log.warning("speech stream aborted mid-way: %s (%s)", e.message, e.code)
            raise
        finally:
            if not finished:
                encoder.close()

    # -- POST /v1/audio/speech/timed ------------------------------------------------------------
    def _check_timings_supported(self) -> None:
        if getattr(self.backend, "supports_word_timings", None) is True:
            return
        synth = getattr(self.backend, "synthesizer", None)
        if synth is None or not hasattr(synth, "synthesize_timed"):
            runtime = getattr(self.backend, "runtime", "?")
            raise Unsupported(
                f"word timings need a runtime that reports phoneme durations (torch); "
                f"this server runs the {runtime!r} runtime"
            )

    async def speech_timed(self, request: Request) -> Response:
        try:
            p = await self._params(request)
            self._check_timings_supported()
            prepared = await self._prepare(p, self._request_id(request))
            chunks: list[AudioChunk] = []
            async with aclosing(self.backend.stream(prepared)) as stream:
                async for chunk in stream:
                    if chunk.durations is None:
                        raise Unsupported("the backend did not report durations for this request")
                    chunks.append(chunk)
            result = await asyncio.to_thread(self._timed_result, p, chunks, prepared.lang or "en-us")
        except APIError as e:
            return e.response()
        except KokoroError as e:
            return APIError.from_kokoro(e).response()
        except Exception:
            log.exception("timed speech request failed")
            return _internal_error().response()
        return JSONResponse(result)

    def _timed_result(self, p: SpeechParams, chunks: list[AudioChunk], lang: str) -> dict[str, Any]:
        pipeline = getattr(self.backend, "pipeline", None)
        phonemize = (lambda w: pipeline.phonemes(w, lang)) if pipeline is not None else None
        encoder = make_encoder(p.format, p.sample_rate)
        parts, words, offset = [], [], 0.0
        for chunk in chunks:
            parts.append(encoder.encode(chunk.audio))
            words.extend(
                segment_word_timings(
                    chunk.text, chunk.phonemes, chunk.durations, len(chunk.audio), phonemize, offset
                )
            )
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
        store = self._voices()
        return JSONResponse({"voices": store.names(), "default": getattr(store, "default", None)})


def _observe_first_audio(request: Request, received: float) -> None:
    """Feed the app's time-to-first-audio histogram when this runs inside server.app."""
    state = getattr(request.app.state, "kokoro", None) if "app" in request.scope else None
    metrics = getattr(state, "metrics", None)
    if metrics is not None:
        metrics.first_audio("openai", time.perf_counter() - received)


async def _sse(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """OpenAI's speech SSE events around the encoded byte stream."""
    sent = 0
    async with aclosing(body):
        async for data in body:
            sent += len(data)
            event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
            yield f"data: {json.dumps(event)}\n\n".encode()
    done = {"type": "speech.audio.done", "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}}
    yield f"data: {json.dumps(done)}\n\n".encode()


def openai_routes(backend: Any, settings: Any = None) -> list[BaseRoute]:
    """The OpenAI-compatible routes for ``backend`` (mount them in the app's route list)."""
    h = OpenAIRoutes(backend, settings)
    return [
        Route("/v1/audio/speech", h.speech, methods=["POST"]),
        Route("/v1/audio/speech/timed", h.speech_timed, methods=["POST"]),
        Route("/v1/audio/voices", h.voices, methods=["GET"]),
        Route("/v1/models", h.models, methods=["GET"]),
        Route("/v1/models/{model:path}", h.model, methods=["GET"]),
    ]
