"""A stand-in for an OpenAI-only Kokoro server (Kokoro-FastAPI's interface), for the ``compare``
benchmark's tests: no WebSocket, no ``/ping``, no ``/invocations``.

What it keeps of Kokoro-FastAPI (``api/src/routers/openai_compatible.py``, ``api/src/main.py``):

* ``POST /v1/audio/speech`` with ``model``, ``input``, ``voice``, ``response_format``, ``speed``,
  ``stream`` (default true): a streamed body, one chunk per sentence (``pcm``: s16le 24 kHz mono);
* a body that is not JSON, or lacks ``input``: 422 with FastAPI's ``{"detail": [...]}``;
* an unknown model: 400 ``{"detail": {"error": "invalid_model", ...}}``; an unknown voice: 400
  ``{"detail": {"error": "validation_error", "message": "Voice '…' not found. Available voices: …",
  "type": "invalid_request_error"}}``;
* no length limit (long text is split and streamed), and whitespace-only input gives 200 with no audio;
* ``GET /health`` -> ``{"status": "healthy"}``, ``GET /v1/audio/voices`` -> ``{"voices": [...]}``.

The audio is a tone (``seconds_per_char`` of it per character, after ``segment_s`` of "synthesis",
a sleep on the event loop: nothing is computed).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODELS = ("kokoro", "tts-1", "tts-1-hd")
VOICES = ("af_heart", "jm_kumo", "jf_alpha")


def _tone(chars: int, seconds_per_char: float) -> bytes:
    t = np.arange(int(chars * seconds_per_char * 24_000)) / 24_000
    return (np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2").tobytes()


def openai_standin(*, segment_s: float = 0.01, seconds_per_char: float = 0.07) -> Starlette:
    async def speech(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            return JSONResponse({"detail": [{"type": "json_invalid", "loc": ["body", 0], "msg": "JSON decode error",
                                             "input": {}, "ctx": {"error": str(exc)}}]}, status_code=422)
        if not isinstance(body, dict) or not isinstance(body.get("input"), str):
            return JSONResponse({"detail": [{"type": "missing", "loc": ["body", "input"], "msg": "Field required"}]},
                                status_code=422)
        if body.get("model", "kokoro") not in MODELS:
            return JSONResponse({"detail": {"error": "invalid_model", "message": f"Unsupported model: {body['model']}",
                                            "type": "invalid_request_error"}}, status_code=400)
        voice = body.get("voice", "af_heart")
        if voice not in VOICES:
            return JSONResponse({"detail": {"error": "validation_error",
                                            "message": f"Voice '{voice}' not found. Available voices: {', '.join(VOICES)}",
                                            "type": "invalid_request_error"}}, status_code=400)
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", body["input"].strip()) if s]

        async def chunks() -> AsyncIterator[bytes]:
            for sentence in sentences:
                await asyncio.sleep(segment_s)
                yield _tone(len(sentence), seconds_per_char)

        fmt = body.get("response_format", "mp3")
        return StreamingResponse(chunks(), media_type="audio/pcm" if fmt == "pcm" else f"audio/{fmt}")

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "healthy"})

    async def voices(request: Request) -> Response:
        return JSONResponse({"voices": list(VOICES)})

    return Starlette(routes=[Route("/v1/audio/speech", speech, methods=["POST"]), Route("/health", health),
                             Route("/v1/audio/voices", voices)])
