"""POST /invocations — one text in, a streamed audio body out (docs/wire-contract.md).

The handler maps the SageMaker wire format onto the synthesis pipeline (``server.pipeline.synthesis``,
``server.pipeline.http``): admission, the body (at most ``max_message_bytes``), JSON and fields, then
``prepare`` and the **first segment** — all before the status line, so every failure up to there
gets its status and the body ``{"error": {"code", "message"}}`` (400/404/413/503/500/504). The
first bytes leave as soon as the first segment is synthesised; each later segment follows when it
is ready (``Transfer-Encoding: chunked``). A failure after the first bytes cuts the connection
without the final chunk (a truncated body, never a short "success"); a client that leaves before
the first audio stops the work. Every answer, errors included, carries ``X-Request-Id``: the
body's ``request_id``, else the request's ``X-Request-Id`` header, else a fresh id.
``"stream": false`` buffers the whole answer and sends it with a Content-Length (and a WAV header
with the real sizes).
"""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from backends.api import KokoroError, SynthesisRequest
from backends.audio.encoders import wav_header
from server.openai.request_id import client_request_id, id_header
from server.pipeline.http import AudioStream, SpeechEndpoint, read_body, wait_disconnect
from server.pipeline.params import decode_object, parse_http_options, parse_synthesis
from server.pipeline.synthesis import Synthesis
from server.state import ServerState

ROUTE = "invocations"


def error_response(error: KokoroError, job: Synthesis, request: Request) -> JSONResponse:
    headers = {"X-Request-Id": id_header(request.scope, job.request_id)} if job.request_id else None
    return JSONResponse({"error": error.to_dict()}, status_code=error.status, headers=headers)


async def invocations(request: Request, job: Synthesis) -> Response:
    settings = _state(request).settings
    obj = decode_object(await read_body(request, settings.max_message_bytes))
    obj.setdefault("request_id", job.request_id)  # the header's id, else a fresh one (see _request_id)
    params = parse_synthesis(obj, max_text_chars=settings.max_text_chars)
    fmt, streamed = parse_http_options(obj, request.headers.get("accept"))
    job.request_id = str(params.request_id)
    encoder = job.use_encoder(fmt, params.sample_rate)
    first = await job.open(
        SynthesisRequest(text=params.text, voice=params.voice, speed=params.speed, lang=params.lang,
                         request_id=job.request_id, session=job.request_id,
                         fast_first=None if streamed else False),  # whole audio at once: no early cut
        gone=lambda: wait_disconnect(request),
    )
    headers = {"X-Request-Id": id_header(request.scope, job.request_id), "Cache-Control": "no-store"}
    if streamed:
        return AudioStream(job, job.encoded(first), media_type=encoder.content_type, headers=headers)
    data = b"".join([part async for part in job.encoded(first)])
    if fmt == "wav":  # the real sizes instead of the streaming "unknown"
        data = wav_header(encoder.sample_rate, data_size=len(data) - 44) + data[44:]
    job.first_audio()
    job.record(200)
    return Response(data, media_type=encoder.content_type, headers=headers)


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.kokoro
    return state


def _request_id(request: Request) -> str:
    """The request's id before its body is read (so a 400 or 413 carries one too): the client's
    ``X-Request-Id``, else a fresh one; a ``request_id`` in the body wins once it is parsed."""
    return client_request_id(request.scope) or secrets.token_hex(16)


def invocations_endpoint() -> SpeechEndpoint:
    return SpeechEndpoint(ROUTE, invocations, error_response, _request_id)
