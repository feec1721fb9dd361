"""Stand-ins shaped like the peers ``python -m benchmarks compare`` is pointed at, each with the one
trait that used to trip it. Tones stand for speech (``SECONDS_PER_CHAR`` of audio per character);
each app records the request bodies it received in ``app.state.bodies``.

* :func:`wav_only_post` — the AWS sample's ``POST /invocations``: ``wav`` only (a streamed RIFF header
  with unknown sizes, then s16le), a 400 for ``"format": "pcm"``; one synthesis at a time (its lock).
* :func:`empty_ok` — an OpenAI-shaped server that answers every speech request 200 with no body.
* :func:`stalling_health` — the contract's ``POST /invocations`` (pcm), but ``/ping`` stalls.
* :func:`dropping_socket` — the bidirectional WebSocket contract, but bad input gets one error frame
  and then the socket is closed (1011); a new session works.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

SAMPLE_RATE = 24_000
SECONDS_PER_CHAR = 0.07  # about as fast as speech (14 characters a second)
VOICES = ("jm_kumo", "af_heart")
LIMIT = 5000


def tone(text: str) -> bytes:
    t = np.arange(int(len(text) * SECONDS_PER_CHAR * SAMPLE_RATE)) / SAMPLE_RATE
    return (np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2").tobytes()


def streaming_wav_header() -> bytes:
    """A RIFF/WAVE header whose sizes are unknown (0xFFFFFFFF), as streamed WAV bodies have."""
    fmt = (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + SAMPLE_RATE.to_bytes(4, "little") \
        + (SAMPLE_RATE * 2).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
    return b"RIFF" + b"\xff" * 4 + b"WAVE" + b"fmt " + len(fmt).to_bytes(4, "little") + fmt \
        + b"LIST" + (4).to_bytes(4, "little") + b"INFO" + b"data" + b"\xff" * 4


async def _body(request: Request) -> dict[str, Any] | None:
    try:
        body = json.loads(await request.body())
    except ValueError:
        return None
    request.app.state.bodies.append(body)
    return body if isinstance(body, dict) else None


def _app(routes: list[Any]) -> Starlette:
    app = Starlette(routes=routes)
    app.state.bodies = []
    return app


async def _ping(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def wav_only_post() -> Starlette:
    lock = asyncio.Lock()

    async def invocations(request: Request) -> Response:
        body = await _body(request)
        if body is None or not str(body.get("text", "")).strip():
            return JSONResponse({"error": "text is required"}, status_code=400)
        if body.get("format", "wav") != "wav":
            return JSONResponse({"error": f"unsupported format {body['format']!r}: only wav"}, status_code=400)

        async def stream():
            async with lock:
                yield streaming_wav_header()
                await asyncio.sleep(0.01)
                yield tone(body["text"])
        return StreamingResponse(stream(), media_type="audio/wav")

    return _app([Route("/ping", _ping), Route("/invocations", invocations, methods=["POST"])])


def empty_ok() -> Starlette:
    async def speech(request: Request) -> Response:
        await _body(request)
        return Response(b"", media_type="audio/pcm")

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "healthy"})

    return _app([Route("/health", health), Route("/v1/audio/speech", speech, methods=["POST"])])


def stalling_health(stall_s: float = 3.0) -> Starlette:
    async def ping(request: Request) -> Response:
        if request.query_params.get("ready") is None:  # the test harness's own readiness check passes
            await asyncio.sleep(stall_s)
        return JSONResponse({"status": "ok"})

    async def invocations(request: Request) -> Response:
        body = await _body(request)
        if body is None:
            return JSONResponse({"error": {"code": "invalid_json", "message": "not JSON"}}, status_code=400)
        return Response(tone(body.get("text", "")), media_type="audio/L16; rate=24000; channels=1")

    return _app([Route("/ping", ping), Route("/invocations", invocations, methods=["POST"])])


def dropping_socket() -> Starlette:
    async def session(ws: WebSocket) -> None:
        await ws.accept()
        try:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                raw = msg.get("bytes") or (msg.get("text") or "").encode()
                try:
                    req = json.loads(raw)
                except ValueError:
                    req = None
                if not isinstance(req, dict) or req.get("type") == "cancel":
                    if req is None:
                        await _drop(ws, None, "invalid_json")
                        return
                    continue
                rid = req.get("request_id")
                text = str(req.get("text", ""))
                if not text.strip() or req.get("voice", VOICES[0]) not in VOICES or len(text) > LIMIT:
                    await _drop(ws, rid, "invalid_request")
                    return
                await ws.send_text(json.dumps({"type": "synthesis_start", "request_id": rid,
                                               "sample_rate": SAMPLE_RATE, "encoding": "pcm_s16le", "channels": 1}))
                pcm = tone(text)
                await ws.send_bytes(pcm)
                await ws.send_text(json.dumps({"type": "synthesis_complete", "request_id": rid,
                                               "audio_duration_s": len(pcm) / 2 / SAMPLE_RATE, "elapsed_s": 0.01,
                                               "ttfa_ms": 10.0}))
        except WebSocketDisconnect:
            return

    return _app([Route("/ping", _ping), WebSocketRoute("/invocations-bidirectional-stream", session)])


async def _drop(ws: WebSocket, rid: str | None, code: str) -> None:
    await ws.send_text(json.dumps({"type": "error", "request_id": rid, "code": code, "message": "refused"}))
    await ws.close(1011)
