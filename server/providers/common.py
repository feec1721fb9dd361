"""What the providers' routes share beyond the pipeline: the key refusal, a refusal at the
WebSocket upgrade, a provider request's JSON body, and an HTTP answer's segments as timed
:class:`~server.streaming.events.Audio` events (:func:`timed_audio`), so the HTTP routes place
their words and characters exactly as the WebSocket mappers do (``server.providers.alignment``).

A WebSocket that cannot be served as asked (a format this server does not produce, an unknown
voice or model) is refused at the upgrade with an HTTP status and the provider's JSON body, never
accepted and then closed: stock clients treat a 4xx at the handshake as a non-retryable error,
and an in-band error or a close code as a dropped connection worth retrying.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.requests import Request
from starlette.websockets import WebSocket

from backends.api import AudioChunk, KokoroError
from server.pipeline.http import read_body
from server.pipeline.params import decode_object
from server.pipeline.synthesis import Synthesis
from server.pipeline.word_timings import WordTiming, segment_chunk_timings
from server.providers.formats import WireFormat
from server.streaming.events import Audio
from server.websocket.admission import deny

log = logging.getLogger("kokoro.providers")


class Unauthorized(KokoroError):
    """A missing or wrong key (``KOKORO_API_KEY``), as the provider's clients send it."""

    code, status = "unauthorized", 401


async def refuse_upgrade(websocket: WebSocket, status: int, body: Mapping[str, Any], *,
                         headers: Mapping[str, str] | None = None, reason: str = "") -> None:
    """Refuse a WebSocket upgrade with ``status`` and the provider's ``body`` (a close 1008 where the
    server cannot answer the handshake with a response), through the session core's one refusal."""
    await deny(websocket, status, dict(body), close_code=1008, reason=reason[:120], headers=headers)


async def json_object(request: Request, max_bytes: int) -> dict[str, Any]:
    """The request's JSON object body, whatever its ``Content-Type`` says (some clients send none)."""
    return decode_object(await read_body(request, max_bytes))


async def timed_audio(job: Synthesis, first: AudioChunk, fmt: WireFormat) -> AsyncIterator[Audio]:
    """Each segment of ``job`` encoded in ``fmt`` (the encoder's tail as a last, wordless piece),
    with its place on the request's clock and its words from the model's durations (where the
    runtime reports none, :func:`~server.providers.alignment.words_of` spreads them by letters)."""
    clock = 0.0
    async for chunk in job.chunks(first):
        data = await job.encode(chunk.audio)
        words: tuple[WordTiming, ...] = ()
        if chunk.durations is not None:  # arithmetic over the durations: no G2P, no thread
            words = tuple(segment_chunk_timings(chunk, clock))
        yield Audio(data, round(clock, 4), chunk.seconds, chunk.text, words)
        clock += chunk.seconds
    if tail := await job.flush():
        yield Audio(tail, round(clock, 4), fmt.seconds(tail) or 0.0, "")
