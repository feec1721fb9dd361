"""ElevenLabs' input-streaming WebSockets — ``/v1/text-to-speech/{voice_id}/stream-input`` (one
stream per socket) and ``/v1/text-to-speech/{voice_id}/multi-stream-input`` (contexts) — as wire
mappers onto the streaming text buffer (``server.streaming.text_stream``) and the one synthesis pipeline, for
ElevenLabs' clients (Pipecat's ``ElevenLabsTTSService``, LiveKit's ElevenLabs plugin, the SDKs).

Connection: ``voice_id`` in the path is a Kokoro voice, a blend or an alias of
``KOKORO_VOICE_ALIASES``; the query's ``output_format`` (``server.providers.formats``: ``pcm_<rate>``,
``ulaw_8000``, ``alaw_8000``, ``mp3_<rate>_<kbps>``; default ``mp3_44100_128``, the service's) sets
the audio; an unknown voice (404) or a format this server does not produce (400) is refused at the
upgrade with ElevenLabs' ``detail`` body. ``model_id`` is accepted and not used. The HTTP twins are
in ``server.providers.elevenlabs_http``. The key
goes in the ``xi-api-key`` header (or ``Authorization: Bearer``) or as ``xi_api_key`` in the first
message, checked against ``KOKORO_API_KEY`` (any key passes where none is configured).

Client -> server, one JSON object per message:

* ``{"text": " ", "voice_settings": {...}, "generation_config": {...}, "xi_api_key": ...}`` — opens
  the stream (multi: ``context_id`` names the context; its first message opens it). Of
  ``voice_settings`` only ``speed`` is used (Kokoro's speed, 0.5-2.0).
* ``{"text": "Hello "}`` — text in pieces of any size, cut at sentence ends server-side (the first
  clause early); ``"flush": true`` speaks whatever is buffered.
* single stream: ``{"text": ""}`` ends the input: the rest is spoken, ``isFinal`` follows, the
  socket closes 1000. Multi: ``{"text": ""}`` is a keep-alive; ``{"context_id", "flush": true}``;
  ``{"context_id", "close_context": true}`` ends the context: text sent up to its last flush is
  spoken to the end, text after it dropped (a barge-in closes a context it never flushed, so that
  stops at once); a second close stops it at once. ``isFinal`` follows its last audio.
  ``{"close_socket": true}`` closes the socket (1000). At most five contexts are open on a
  socket, as on ElevenLabs; one more gets the ``max_active_conversations`` error and a 1008 close.

Server -> client: ``{"audio": base64 audio, "isFinal": false, "alignment": {...},
"normalizedAlignment": {...}}`` per segment (``chars``, ``charStartTimesMs``, ``charDurationsMs``
relative to that message's audio — they restart at 0 in every message, as the service's do; both
alignments are of the text as sent), then ``{"isFinal": true}``. Multi puts the context's id in
each message under both keys: ``contextId`` (the API reference's, the SDK's types', the only one
Pipecat reads) and ``context_id`` (what LiveKit's plugins say the service sends now; they read
either). A message that cannot be served gets ``{"error": code, "message": ...}`` and the session
goes on.

Ignored: ``generation_config`` (``chunk_length_schedule``: cutting follows sentence ends),
``try_trigger_generation``, the other ``voice_settings``, ``pronunciation_dictionary_locators``,
the query's ``auto_mode``, ``sync_alignment``, ``inactivity_timeout`` (the server's idle timeout
applies), ``language_code``, ``enable_ssml_parsing``,
``apply_text_normalization``, ``enable_logging``, unknown fields.
"""

from __future__ import annotations

import base64
import logging
import math
from collections import deque
from typing import Any

from starlette.requests import Request
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from backends.api import (
    MAX_SPEED,
    MIN_SPEED,
    InvalidRequest,
    KokoroError,
    NotReady,
    Overloaded,
    UnknownVoice,
)
from server.auth import bearer_token, key_matches
from server.pipeline.params import MAX_ID_CHARS
from server.providers.alignment import char_alignment, joined
from server.providers.common import refuse_upgrade
from server.providers.contexts import ContextSession
from server.providers.formats import elevenlabs_format
from server.state import ServerState
from server.streaming.text_stream import Audio, Done, Event, Failed, StreamOptions
from server.websocket.admission import websocket_route

log = logging.getLogger("kokoro.elevenlabs")
#: Both routes live under this folder (``/v1/text-to-speech/{voice_id}/...``).
PATH_PREFIX = "/v1/text-to-speech/"
#: ElevenLabs' limit of contexts open on one multi-stream socket.
MAX_CONTEXTS = 5
_CLOSED_REMEMBERED = 64


def voice_speed(obj: dict[str, Any]) -> float:
    settings = obj.get("voice_settings")
    speed = settings.get("speed") if isinstance(settings, dict) else None
    if speed is None:
        return 1.0
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not math.isfinite(speed):
        raise InvalidRequest("voice_settings.speed must be a number")
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise InvalidRequest(f"voice_settings.speed must be between {MIN_SPEED} and {MAX_SPEED}")
    return float(speed)


class ElevenLabsSession(ContextSession):
    """The ElevenLabs mapper of one socket (see the module docstring). Loop only."""

    ROUTE = "elevenlabs"
    #: multi-stream-input (contexts) or stream-input (one stream).
    MULTI = False

    def __init__(self, websocket: WebSocket, state: ServerState) -> None:
        super().__init__(websocket, state, max_contexts=MAX_CONTEXTS if self.MULTI else 1)
        self.voice = websocket.path_params.get("voice_id", "")
        self.format = elevenlabs_format(websocket.query_params.get("output_format"), http=False)  # checked at the upgrade
        key = state.settings.api_key
        # No key at the upgrade: it may still come as xi_api_key in the first message.
        self._key_needed = key is not None and header_key(websocket) is None
        self._closed: deque[str] = deque(maxlen=_CLOSED_REMEMBERED)

    @classmethod
    def authorized(cls, websocket: WebSocket, key: str) -> bool:
        given = header_key(websocket)
        return given is None or key_matches(key, given)

    async def on_open(self) -> None:
        log.debug("elevenlabs %s: voice %s, model %r", self.id, self.voice, self.ws.query_params.get("model_id"))

    # -- client messages ------------------------------------------------------------------------
    async def on_bad_message(self, error: KokoroError) -> None:
        await self.context_error(None, error)

    async def on_message(self, obj: dict[str, Any]) -> None:
        if self._key_needed:
            given = obj.get("xi_api_key")
            key = self.settings.api_key
            if key is None or not isinstance(given, str) or not key_matches(key.get_secret_value(), given):
                await self.send_json({"message": "missing or wrong API key", "error": "invalid_api_key", "code": 1008})
                self.close(1008, "invalid_api_key")
                return
            self._key_needed = False
        cid = obj.get("context_id", "") if self.MULTI else ""
        if not isinstance(cid, str) or len(cid) > MAX_ID_CHARS:
            await self.context_error(None, InvalidRequest(f"'context_id' must be a string of at most {MAX_ID_CHARS} characters"))
            return
        if self.MULTI and obj.get("close_socket") is True:
            self.close(1000, "closed by client")
            return
        try:
            await self._message(cid, obj)
        except Overloaded as e:
            if len(self.streams) >= MAX_CONTEXTS:
                await self.send_json({
                    "message": f"Maximum simultaneous contexts per WebSocket connection exceeded ({MAX_CONTEXTS}). "
                    "Please close an existing context before opening a new one.",
                    "error": "max_active_conversations", "code": 1008,
                })
                self.close(1008, "max_active_conversations")
                return
            await self.context_error(cid, e)
        except KokoroError as e:
            await self.context_error(cid, e)

    async def _message(self, cid: str, obj: dict[str, Any]) -> None:
        text = obj.get("text")
        if text is not None and not isinstance(text, str):
            raise InvalidRequest("'text' must be a string")
        flush = obj.get("flush") is True
        close = self.MULTI and obj.get("close_context") is True
        if text is None and not flush and not close:
            raise InvalidRequest("unknown message: expected text, flush, close_context or close_socket")
        stream = self.streams.get(cid)
        if stream is None:
            if cid in self._closed or not text:  # a keep-alive, or a flush or close of nothing open
                if text and cid in self._closed:
                    raise InvalidRequest(f"context {cid[:64]!r} was closed; open a new context_id")
                return
            if self.draining:
                raise NotReady("server is shutting down")
            fmt = self.format
            options = StreamOptions(voice=self.voice, speed=voice_speed(obj), sample_rate=fmt.sample_rate,
                                    encoding=fmt.encoding, bit_rate=fmt.bit_rate, word_timings=True)  # type: ignore[arg-type]
            stream = self.streams.open(cid, options)
            self.streams.extra(cid).update(unflushed=False, closing=False, tail="")
        extra = self.streams.extra(cid)
        if text == "" and not self.MULTI:  # end of input
            stream.end()
            return
        if text:
            if stream.ended:
                raise InvalidRequest("the input of this stream has ended")
            text = joined(extra["tail"], text)
            stream.push(text)
            extra["tail"] = text[-8:]
            extra["unflushed"] = extra["unflushed"] or bool(text.strip())
        if flush:
            stream.flush()
            extra["unflushed"] = False
        if close:
            self._closed.append(cid)
            if extra["closing"] or extra["unflushed"]:
                await stream.clear()  # barge-in: nothing more of it is spoken
            extra["closing"] = True
            stream.end()

    # -- events -> wire -------------------------------------------------------------------------
    def _tag(self, message: dict[str, Any], cid: str | None) -> dict[str, Any]:
        # Both spellings: the API reference, the SDK's types and Pipecat read ``contextId``; LiveKit's
        # plugins read either, noting that the service itself now answers with ``context_id``.
        if self.MULTI and cid is not None:
            message["contextId"] = message["context_id"] = cid
        return message

    async def send_event(self, cid: str, event: Event) -> None:
        if isinstance(event, Audio):
            # times restart at 0 in every message, as the service sends them (Pipecat adds them up)
            seconds = self.format.seconds(event.data)
            alignment = char_alignment(event, event.duration if seconds is None else seconds)
            await self.send_json(self._tag({
                "audio": base64.b64encode(event.data).decode("ascii"), "isFinal": False,
                "normalizedAlignment": alignment, "alignment": alignment,
            }, cid))
        elif isinstance(event, Failed):
            await self.context_error(cid, event.error)
        elif isinstance(event, Done):
            await self.send_json(self._tag({"isFinal": True}, cid))
            if not self.MULTI:
                self.close(1000, "done")

    async def context_error(self, cid: str | None, error: KokoroError) -> None:
        await self.send_json(self._tag({"error": error.code, "message": error.message}, cid))


class MultiStreamSession(ElevenLabsSession):
    MULTI = True


def header_key(websocket: WebSocket | Request) -> str | None:
    """The key of ``xi-api-key`` or ``Authorization: Bearer`` (None: neither was sent)."""
    key = websocket.headers.get("xi-api-key")
    return key if key is not None else bearer_token(websocket.headers)


async def refuse_unservable(websocket: WebSocket) -> bool:
    """At the upgrade: refuse (HTTP 400/404, ElevenLabs' ``detail`` body) a voice or output format
    this server cannot speak. Returns whether it refused."""
    state: ServerState = websocket.app.state.kokoro
    voice = websocket.path_params.get("voice_id", "")
    try:
        if voice not in state.backend.voices:
            names = ", ".join(state.backend.voices.names())
            raise UnknownVoice(f"A voice with voice_id '{voice[:64]}' was not found (voices: {names}).")
        elevenlabs_format(websocket.query_params.get("output_format"), http=False)
    except KokoroError as e:
        code = "voice_not_found" if isinstance(e, UnknownVoice) else e.code
        await refuse_upgrade(websocket, e.status, {"detail": {"status": code, "message": e.message}}, reason=code)
        return True
    return False


def _endpoint(session_class: type[ElevenLabsSession]) -> Any:
    serve = websocket_route(session_class)

    async def endpoint(websocket: WebSocket) -> None:
        if not await refuse_unservable(websocket):
            await serve(websocket)

    return endpoint


def elevenlabs_routes() -> list[WebSocketRoute]:
    """The two routes (mount in the app's route list; ``own_key_paths`` gets :data:`PATH_PREFIX`)."""
    return [
        WebSocketRoute(PATH_PREFIX + "{voice_id}/stream-input", _endpoint(ElevenLabsSession)),
        WebSocketRoute(PATH_PREFIX + "{voice_id}/multi-stream-input", _endpoint(MultiStreamSession)),
    ]
