"""OpenAI-compatible speech API, so clients of the OpenAI SDK (and Kokoro-FastAPI's users) only change
``base_url``.

Routes (see :func:`openai_routes`):

* ``POST /v1/audio/speech`` — ``model``, ``input``, ``voice``, ``response_format`` (mp3 | opus | aac
  | flac | wav | pcm; default mp3), ``speed`` (OpenAI's 0.25–4.0, clamped to Kokoro's 0.5–2.0: see
  ``server.openai.params``), and the extensions ``sample_rate`` (8000, 16000, 22050, 24000, 44100,
  48000) and ``lang``. ``stream_format`` "audio" (default) streams the encoded file; "sse" sends
  ``speech.audio.delta`` events (base64 of the encoded bytes) and a final ``speech.audio.done``
  whose ``usage`` counts, in OpenAI's shape, ``input_tokens``: the characters of ``input``;
  ``output_tokens``: the seconds of audio, rounded up; ``total_tokens``: their sum.
* ``POST /v1/audio/speech/timed`` — same body; JSON with the whole audio (base64) and per-word
  ``start``/``end`` seconds. Needs a runtime that reports durations (torch; onnx with the timed
  model ``kokoro-serve assets`` writes); others answer 501 ``unsupported``.
* ``GET /v1/models``, ``GET /v1/models/{id}``, ``GET /v1/audio/voices``.

Choices: ``model`` accepts ``kokoro``, OpenAI's TTS model names and the served model file's name
(all the same model). ``voice`` is a loaded voice, an alias (``KOKORO_VOICE_ALIASES``), a blend
``a(2)+b(1)`` (weights normalised), or ``{"id": ...}``; OpenAI's built-in names (alloy, nova, ...)
without an alias mean the server's default voice. ``instructions`` is accepted and ignored. Errors
use OpenAI's shape and statuses (``server.openai.params``): an unknown voice and over-long text are
400. Every answer under ``/v1/`` carries ``x-request-id`` (``server.openai.request_id``).

Every speech route goes through the one synthesis pipeline (``server.pipeline.synthesis``, ``server.pipeline.http``):
the same admission as ``/invocations`` (503 ``not_ready`` while loading or draining), the body
bounded by ``KOKORO_MAX_MESSAGE_BYTES`` (413 ``text_too_long`` before the rest is read, on every
route), the first
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
import math
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from backends.api import AudioChunk, Backend, KokoroError, SynthesisRequest, Unsupported
from backends.audio.encoders import Encoder
from server.openai.params import MODEL_IDS, APIError, SpeechParams, parse_speech
from server.openai.request_id import request_id_of
from server.pipeline.http import AudioStream, SpeechEndpoint, read_body, wait_disconnect
from server.pipeline.params import decode_json
from server.pipeline.synthesis import Synthesis
from server.pipeline.word_timings import segment_chunk_timings
from server.settings import Settings

_CREATED = int(time.time())
ROUTE = "openai"


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

    async def _params(self, request: Request, job: Synthesis) -> SpeechParams:
        body = decode_json(await read_body(request, self.settings.max_message_bytes))  # 400 invalid_json
        catalog = self.backend.voices
        return parse_speech(body, model_ids=self._model_ids(), voices={*catalog.names(), *catalog.aliases})

    async def _open(self, p: SpeechParams, request: Request, job: Synthesis) -> AudioChunk:
        req = SynthesisRequest(text=p.input, voice=p.voice, speed=p.speed, lang=p.lang, request_id=job.request_id)
        return await job.open(req, gone=lambda: wait_disconnect(request))

    # -- POST /v1/audio/speech ------------------------------------------------------------------
    async def speech(self, request: Request, job: Synthesis) -> Response:
        p = await self._params(request, job)
        encoder = job.use_encoder(p.format, p.sample_rate)
        first = await self._open(p, request, job)
        headers = {"X-Sample-Rate": str(encoder.sample_rate), "Cache-Control": "no-store"}
        if p.stream_format == "sse":
            return AudioStream(job, _sse(job, first, len(p.input)), media_type="text/event-stream", headers=headers)
        return AudioStream(job, job.encoded(first), media_type=encoder.content_type, headers=headers)

    # -- POST /v1/audio/speech/timed ------------------------------------------------------------
    async def speech_timed(self, request: Request, job: Synthesis) -> Response:
        p = await self._params(request, job)
        info = self.backend.info
        if not info.capabilities.word_timings:
            raise Unsupported(
                f"word timings need a backend that reports phoneme durations (the torch runtime, or onnx "
                f"with the timed model `kokoro-serve assets` writes); this server runs the {info.runtime!r} "
                f"runtime ({info.model}) in {info.mode} mode, which does not"
            )
        encoder = job.use_encoder(p.format, p.sample_rate)
        first = await self._open(p, request, job)
        chunks = [chunk async for chunk in job.chunks(first)]
        if any(chunk.durations is None for chunk in chunks):
            raise Unsupported("the backend did not report durations for this request")
        result = await asyncio.to_thread(self._timed_result, p, encoder, chunks)
        job.first_audio()
        job.record(200)
        return JSONResponse(result)

    def _timed_result(self, p: SpeechParams, encoder: Encoder, chunks: list[AudioChunk]) -> dict[str, Any]:
        """Encode the whole answer and time its words (a worker thread: encoding blocks)."""
        parts, words, offset = [], [], 0.0
        for chunk in chunks:
            parts.append(encoder.encode(chunk.audio))
            words.extend(segment_chunk_timings(chunk, offset))
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
        info = self.backend.info  # where the model runs, beside OpenAI's fields (clients ignore extra keys)
        return {"id": model_id, "object": "model", "created": _CREATED, "owned_by": "kokoro-serve",
                "backend": info.runtime, "device": info.device, "dtype": info.dtype}

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
        return JSONResponse({"voices": catalog.names(), "aliases": catalog.aliases, "default": catalog.default,
                             "languages": catalog.languages()})


def error_response(error: KokoroError, job: Synthesis, request: Request) -> Response:
    return APIError.of(error).response()


def _event(event: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


def _delta(data: bytes) -> bytes:
    return _event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")})


async def _sse(job: Synthesis, first: AudioChunk, characters: int) -> AsyncIterator[bytes]:
    """OpenAI's speech SSE events: one ``delta`` per encoded piece, then ``done`` with the usage
    (module docstring). No ``done`` after a failure: the error propagates and the transfer is cut."""
    seconds = 0.0
    async for chunk in job.chunks(first):
        seconds += chunk.seconds
        if data := await job.encode(chunk.audio):
            yield _delta(data)
    if tail := await job.flush():
        yield _delta(tail)
    audio_seconds = math.ceil(seconds)
    usage = {"input_tokens": characters, "output_tokens": audio_seconds, "total_tokens": characters + audio_seconds}
    yield _event({"type": "speech.audio.done", "usage": usage})


def openai_routes(backend: Backend, settings: Settings) -> list[BaseRoute]:
    """The OpenAI-compatible routes for ``backend`` (mount them in the app's route list). The
    speech routes run through the synthesis pipeline (route label ``openai``)."""
    h = OpenAIRoutes(backend, settings)
    return [
        Route("/v1/audio/speech", SpeechEndpoint(ROUTE, h.speech, error_response, request_id_of), methods=["POST"]),
        Route("/v1/audio/speech/timed", SpeechEndpoint(ROUTE, h.speech_timed, error_response, request_id_of),
              methods=["POST"]),
        Route("/v1/audio/voices", h.voices, methods=["GET"]),
        Route("/v1/models", h.models, methods=["GET"]),
        Route("/v1/models/{model:path}", h.model, methods=["GET"]),
    ]
