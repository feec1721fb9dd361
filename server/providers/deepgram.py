"""Deepgram's Aura speak WebSocket, ``WS /v1/speak`` — a thin mapper onto the streaming text buffer
(``server.streaming.text_stream``), so Pipecat's ``DeepgramTTSService`` (``base_url``) and
``DeepgramSageMakerTTSService`` (SageMaker's model invocation path ``v1/speak``) speak Kokoro unchanged.

Query: ``model`` (the voice: a Kokoro voice name, a blend ``a(2)+b(1)``, or an alias from
``KOKORO_VOICE_ALIASES`` such as ``aura-2-thalia-en=af_heart``; none: the default voice; anything
else is refused at the upgrade, 400, as Deepgram refuses an unknown model), ``encoding``
(``linear16``, or ``mulaw``/``alaw`` for telephony) and ``sample_rate`` (``server.providers.formats``;
default linear16 at 24000; another format is refused at the upgrade, 400, with the reason in the
body and the ``dg-error`` header), ``speed`` (clamped to 0.5-2.0). Other parameters
(``mip_opt_out``, ``container``, ``bit_rate``, ``tag`` …) are accepted and ignored. ``POST
/v1/speak`` is the REST twin (``server.providers.deepgram_http``).

Client messages, in text or binary frames alike (SageMaker delivers binary): ``Speak {text}`` (text
of any size: a token, a word, sentences; cut at sentence ends, the first clause of each turn started
early), ``Flush`` (speak what is buffered; ``Flushed {sequence_id}`` follows its last audio frame),
``Clear`` (barge-in: drop the text and audio not yet sent, abort the synthesis running;
``Cleared {sequence_id}`` follows the last audio frame that was sent), ``Close`` (speak what is
buffered, then close 1000). ``KeepAlive`` is accepted silently. Anything else — bad JSON, an unknown
type, ``Speak`` without text, text past the buffer limit, a piece that could not be spoken — gets a
``Warning {description, code}`` and the session goes on.

Server messages: ``Metadata {request_id, model_name, model_version, model_uuid}`` at open, binary
frames of raw audio (the asked encoding) at ``sample_rate`` (one per synthesised segment), ``Flushed``, ``Cleared``,
``Warning``. ``sequence_id`` counts the flushes of the socket (the first ``Flushed`` is 0);
``Cleared`` carries the number the next ``Flush`` would get. No word timings (Deepgram has none).

Key: where ``KOKORO_API_KEY`` is set, ``Authorization: Token <key>`` (Deepgram's scheme; ``Bearer``
too), the ``token`` WebSocket subprotocol pair browsers use, or ``?token=``; any key otherwise.
"""

from __future__ import annotations

import uuid
from typing import Any

from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from backends.api import KokoroError, NotReady
from server.auth import key_matches
from server.providers.common import refuse_upgrade
from server.providers.deepgram_http import (
    MODEL_VERSION,
    authorized,
    clamped_speed,
    error_body,
    model_uuid,
    model_voice,
)
from server.providers.formats import deepgram_format
from server.state import ServerState
from server.streaming.text_stream import (
    Audio,
    Cleared,
    Done,
    Event,
    Failed,
    Flushed,
    StreamOptions,
    TextStream,
)
from server.websocket.admission import websocket_route
from server.websocket.session import WebSocketSession

PATH = "/v1/speak"
IGNORED_TYPES = ("KeepAlive",)


class DeepgramSession(WebSocketSession):
    ROUTE = "deepgram"

    def __init__(self, websocket: WebSocket, state: Any) -> None:
        super().__init__(websocket, state)
        q = websocket.query_params
        self.model = q.get("model") or ""
        fmt = deepgram_format(q, http=False)  # checked at the upgrade
        self.sample_rate = fmt.sample_rate
        options = StreamOptions(
            voice=model_voice(state.backend.voices, self.model), speed=clamped_speed(q.get("speed")),
            sample_rate=fmt.sample_rate, encoding=fmt.encoding,  # type: ignore[arg-type]
        )
        self.stream = TextStream(state, self.ROUTE, options, session=self.id)
        self.sequence = 0
        self.request_id = str(uuid.uuid4())

    @classmethod
    def authorized(cls, websocket: WebSocket, key: str) -> bool:
        protocols = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",")]
        if len(protocols) == 2 and protocols[0].lower() == "token" and key_matches(key, protocols[1]):
            return True
        return authorized(websocket.headers, websocket.query_params, key)

    # -- the protocol -------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.stream.busy

    @property
    def mid_turn(self) -> bool:
        return self.stream.busy or self.stream.mid_turn

    async def on_cut(self, error: KokoroError) -> None:
        if self.mid_turn:
            await self.stream.aclose()
            await self.warn(error.message, error.code.upper())

    async def on_open(self) -> None:
        await self.send_json({
            "type": "Metadata", "request_id": self.request_id, "model_name": self.model or self._default_voice(),
            "model_version": MODEL_VERSION, "model_uuid": model_uuid(self.model),
        })
        self.spawn(self._pump(), "send")

    def _default_voice(self) -> str:
        return self.state.backend.voices.default

    async def warn(self, description: str, code: str) -> None:
        await self.send_json({"type": "Warning", "description": description, "code": code})

    async def on_bad_message(self, error: KokoroError) -> None:
        await self.warn(error.message, "INTERNAL_ERROR" if error.code == "internal_error" else "INVALID_MESSAGE")

    async def on_message(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "Speak":
            text = msg.get("text")
            if not isinstance(text, str):
                await self.warn("'Speak' needs a string 'text'", "INVALID_MESSAGE")
                return
            try:
                if self.draining and not self.stream.mid_turn:
                    raise NotReady("server is shutting down; this turn was not started")
                self.stream.push(text)
            except KokoroError as e:
                await self.warn(e.message, e.code.upper())
        elif kind == "Flush":
            self.stream.flush(self.sequence)
            self.sequence += 1
        elif kind == "Clear":
            await self.stream.clear(self.sequence)
        elif kind == "Close":
            self.stream.end()
        elif kind in IGNORED_TYPES:
            return
        else:
            await self.warn(f"unknown message type {str(kind)[:40]!r}; expected Speak, Flush, Clear or Close",
                            "UNKNOWN_MESSAGE_TYPE")

    async def _pump(self) -> None:
        try:
            async for event in self.stream:
                await self._send_event(event)
        except Exception as e:  # the client stopped reading or went away
            self.send_failed(e)
            return
        self.close(1000, "closed by client")  # after Close: the last audio has been sent

    async def _send_event(self, event: Event) -> None:
        if isinstance(event, Audio):
            if event.data:
                await self.send_bytes(event.data)
        elif isinstance(event, Flushed):
            await self.send_json({"type": "Flushed", "sequence_id": event.mark})
        elif isinstance(event, Cleared):
            await self.send_json({"type": "Cleared", "sequence_id": event.mark})
        elif isinstance(event, Failed):
            await self.warn(event.error.message, event.error.code.upper())
        elif isinstance(event, Done):
            return

    async def on_close(self) -> None:
        await self.stream.aclose()


async def _speak_endpoint(websocket: WebSocket) -> None:
    """The upgrade: a format the socket cannot stream, or a model that is no voice, is refused
    with Deepgram's 400 body and its reason in the ``dg-error`` header (Pipecat shows it)."""
    state: ServerState = websocket.app.state.kokoro
    try:
        deepgram_format(websocket.query_params, http=False)
        model_voice(state.backend.voices, websocket.query_params.get("model"))
    except KokoroError as e:
        status, body = error_body(e, str(uuid.uuid4()))
        await refuse_upgrade(websocket, status, body, headers={"dg-error": body["err_msg"][:200]},
                             reason=body["err_code"])
        return
    await _endpoint(websocket)


_endpoint = websocket_route(DeepgramSession)


def deepgram_routes() -> list[WebSocketRoute]:
    """``WS /v1/speak`` (mount in the app's route list; ``own_key_paths`` gets :data:`PATH`)."""
    return [WebSocketRoute(PATH, _speak_endpoint)]
