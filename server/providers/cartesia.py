"""Cartesia's TTS WebSocket at ``/tts/websocket`` — a wire mapper onto the streaming text buffer
(``server.streaming.text_stream``) and the one synthesis pipeline, for Cartesia's clients (Pipecat's
``CartesiaTTSService``, LiveKit's Cartesia plugin, Cartesia's SDKs) pointed at this server.

Connection: the key in the ``X-API-Key`` header or the ``api_key`` query (or ``Authorization:
Bearer``), checked against ``KOKORO_API_KEY`` (any key passes where none is configured); the
``Cartesia-Version`` header or ``cartesia_version`` query is accepted and not required.

Client -> server, one JSON object per message (text or binary frame):

* a generation request — ``context_id``, ``transcript``, ``continue``, ``voice`` (``{"mode":
  "id", "id": ...}``: a Kokoro voice, a blend ``a(2)+b(1)`` or an alias of
  ``KOKORO_VOICE_ALIASES``; none: the server's default), ``model_id`` (any; accepted, not used),
  ``output_format`` (``container: raw``, ``encoding: pcm_s16le | pcm_f32le | pcm_mulaw | pcm_alaw``,
  ``sample_rate``: ``server.providers.formats``),
  ``add_timestamps``, ``generation_config.speed`` (Kokoro's speed, 0.5-2.0), ``flush`` (a manual
  flush), ``max_buffer_delay_ms`` (0: each transcript is spoken as sent — the client cut it;
  otherwise the text is cut at sentence ends server-side, the first clause early). Requests on one
  ``context_id`` continue one stream: its text is concatenated verbatim; ``continue: false`` (with
  or without text) ends the context's input. The voice and format of a context are those of its
  first request.
* ``{"context_id": ..., "cancel": true}`` — stop the context at once: queued text dropped, the
  running synthesis interrupted, no audio of it sent after this; its id is free at once (a request
  reusing it opens a new context). An empty ``continue: false`` for a context whose input already
  ended is ignored (the end repeated).

Server -> client, per context, in order: ``chunk`` (base64 audio, at most :data:`CHUNK_SECONDS`
each, with ``flush_id`` once the context was flushed), ``timestamps`` after each segment's chunks
when asked (``word_timestamps``: ``words``, ``start``, ``end`` in seconds from the context's first
sample), ``flush_done`` (``flush_id``) once a manual flush's audio was sent, ``done`` after the
last audio of an ended context; ``error`` (``status_code``, ``error``) for a request that cannot be
served, and the session goes on. Contexts run side by side, at most ``max_queued_per_session``.

Ignored (accepted, no effect): ``language`` (the voice and the text's script choose the G2P),
``use_normalized_timestamps``, ``add_phoneme_timestamps``, ``pronunciation_dict_id``,
``generation_config.volume`` / ``emotion``, ``duration``, unknown fields.
"""

from __future__ import annotations

import base64
import logging
import math
import uuid
from typing import Any

from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from backends.api import MAX_SPEED, MIN_SPEED, KokoroError, NotReady, UnknownVoice
from server.auth import bearer_token, key_matches
from server.pipeline.params import MAX_ID_CHARS, MAX_VOICE_CHARS
from server.providers.alignment import joined, words_of
from server.providers.contexts import ContextSession
from server.providers.formats import BYTES_PER_SAMPLE, cartesia_format
from server.state import ServerState
from server.streaming.text_stream import Audio, Done, Event, Failed, Flushed, StreamOptions
from server.websocket.admission import websocket_route

log = logging.getLogger("kokoro.cartesia")
PATH = "/tts/websocket"
#: Longest audio in one ``chunk`` message (clients cap a message at 1 MiB; this stays far below).
CHUNK_SECONDS = 0.5


class CartesiaError(KokoroError):
    """A request this protocol answers with its ``error`` message."""

    code, status = "invalid_request", 400


def voice_and_speed(obj: dict[str, Any], voices: Any) -> tuple[str | None, float]:
    """The voice (None: the server's default) and speed of a generation request. Raises a typed error."""
    voice = obj.get("voice")
    voice_id: Any = None
    if isinstance(voice, dict):
        mode = voice.get("mode", "id")
        if mode != "id":
            raise CartesiaError(f"voice mode {str(mode)[:20]!r} is not supported; use {{'mode': 'id', 'id': VOICE}}")
        voice_id = voice.get("id")
    elif isinstance(voice, str):
        voice_id = voice
    elif voice is not None:
        raise CartesiaError("'voice' must be an object {'mode': 'id', 'id': VOICE}")
    if voice_id is not None and (not isinstance(voice_id, str) or len(voice_id) > MAX_VOICE_CHARS):
        raise CartesiaError("'voice.id' must be a Kokoro voice name, a blend or an alias")
    voice_id = voice_id.strip() or None if isinstance(voice_id, str) else None
    if voice_id is not None and voice_id not in voices:
        raise UnknownVoice(f"unknown voice {voice_id[:64]!r}; available: {', '.join(voices.names())}")

    speed: Any = 1.0
    config = obj.get("generation_config")
    if isinstance(config, dict) and config.get("speed") is not None:
        speed = config["speed"]
    elif isinstance(obj.get("speed"), (int, float)) and not isinstance(obj.get("speed"), bool):
        speed = obj["speed"]
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not math.isfinite(speed):
        raise CartesiaError("generation_config.speed must be a number")
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise CartesiaError(f"generation_config.speed must be between {MIN_SPEED} and {MAX_SPEED}")
    return voice_id, float(speed)


def parse_options(obj: dict[str, Any], voices: Any) -> StreamOptions:
    """The stream options of a context's first generation request. Raises a typed error."""
    voice, speed = voice_and_speed(obj, voices)
    fmt = cartesia_format(obj.get("output_format"))
    return StreamOptions(
        voice=voice, speed=speed, sample_rate=fmt.sample_rate, encoding=fmt.encoding,  # type: ignore[arg-type]
        word_timings=obj.get("add_timestamps") is True,
    )


class CartesiaSession(ContextSession):
    """The Cartesia mapper of one socket (see the module docstring). Loop only."""

    ROUTE = "cartesia"

    def __init__(self, websocket: WebSocket, state: ServerState) -> None:
        super().__init__(websocket, state, max_contexts=state.settings.max_queued_per_session)

    @classmethod
    def authorized(cls, websocket: WebSocket, key: str) -> bool:
        given = websocket.headers.get("x-api-key") or websocket.query_params.get("api_key")
        return key_matches(key, given if given is not None else bearer_token(websocket.headers))

    async def on_bad_message(self, error: KokoroError) -> None:
        await self.context_error(None, error)

    # -- client messages ------------------------------------------------------------------------
    async def on_message(self, obj: dict[str, Any]) -> None:
        cid = obj.get("context_id")
        if cid is None or cid == "":
            cid = uuid.uuid4().hex
        if not isinstance(cid, str) or len(cid) > MAX_ID_CHARS:
            await self.context_error(None, CartesiaError(f"'context_id' must be a string of at most {MAX_ID_CHARS} characters"))
            return
        try:
            if obj.get("cancel") is True:
                await self._cancel(cid)
            elif "transcript" in obj or "continue" in obj or obj.get("flush") is True:
                await self._generate(cid, obj)
            else:
                raise CartesiaError("unknown message: expected a generation request (transcript) or a cancel")
        except KokoroError as e:
            await self.context_error(cid, e)

    async def _generate(self, cid: str, obj: dict[str, Any]) -> None:
        transcript = obj.get("transcript", "")
        if not isinstance(transcript, str):
            raise CartesiaError("'transcript' must be a string")
        more = obj.get("continue", False) is True
        stream = self.streams.get(cid)
        if stream is None:
            if self.draining:
                raise NotReady("server is shutting down")
            options = parse_options(obj, self.state.backend.voices)
            stream = self.streams.open(cid, options)
            extra = self.streams.extra(cid)
            extra.update(
                flushes=0, flushed=0, tail="", rate=options.sample_rate, sample_bytes=BYTES_PER_SAMPLE[options.encoding] or 1,
                timestamps=options.word_timings, delay=obj.get("max_buffer_delay_ms"),
            )
            log.debug("cartesia %s: context %s opened (model %r)", self.id, cid[:32], obj.get("model_id"))
        elif stream.ended:
            if not transcript and not more and obj.get("flush") is not True:
                return  # the end repeated: it already happened
            raise CartesiaError(f"context {cid[:64]!r} has ended; open a new context_id")
        extra = self.streams.extra(cid)
        if transcript:
            transcript = joined(extra["tail"], transcript)
            stream.push(transcript)
            extra["tail"] = transcript[-8:]
            if extra["delay"] == 0 and transcript.strip():  # the client cut this text: speak it now
                stream.flush()
        if obj.get("flush") is True:
            extra["flushes"] += 1
            stream.flush(mark=extra["flushes"])
        if not more:
            stream.end()

    async def _cancel(self, cid: str) -> None:
        # Nothing of it is sent after this returns, and the id is free at once: a request that
        # reuses it opens a new context.
        await self.streams.remove(cid)

    # -- events -> wire -------------------------------------------------------------------------
    async def send_event(self, cid: str, event: Event) -> None:
        if cid not in self.streams:
            return  # cancelled or closed: nothing more of it is sent
        extra = self.streams.extra(cid)
        base = {"context_id": cid, "status_code": 206, "done": False}
        if isinstance(event, Audio):
            step = max(1, round(CHUNK_SECONDS * extra["rate"])) * extra["sample_bytes"]
            for i in range(0, len(event.data), step):
                message = {"type": "chunk", "data": base64.b64encode(event.data[i:i + step]).decode("ascii"),
                           "step_time": 0, **base}
                if extra["flushes"]:
                    message["flush_id"] = extra["flushed"] + 1
                await self.send_json(message)
            if extra["timestamps"]:
                words = words_of(event)
                if words:
                    await self.send_json({"type": "timestamps", **base, "word_timestamps": {
                        "words": [w.word for w in words],
                        "start": [round(w.start, 3) for w in words],
                        "end": [round(w.end, 3) for w in words],
                    }})
        elif isinstance(event, Flushed):
            if event.mark is not None:
                extra["flushed"] = event.mark
                await self.send_json({"type": "flush_done", **base, "flush_done": True, "flush_id": event.mark})
        elif isinstance(event, Failed):
            await self.context_error(cid, event.error, done=False)
        elif isinstance(event, Done):
            await self.send_json({"type": "done", "context_id": cid, "status_code": 200, "done": True})

    async def context_error(self, cid: str | None, error: KokoroError, *, done: bool = True) -> None:
        status = error.status if 400 <= error.status < 600 else 500
        await self.send_json({
            "type": "error", "context_id": cid, "status_code": status, "done": done,
            "error": error.message, "title": error.code, "error_code": error.code, "message": error.message,
        })


def cartesia_routes() -> list[WebSocketRoute]:
    """``WS /tts/websocket`` (mount in the app's route list; ``own_key_paths`` gets :data:`PATH`)."""
    return [WebSocketRoute(PATH, websocket_route(CartesiaSession))]
