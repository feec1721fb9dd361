"""Deepgram's Aura speak WebSocket, ``WS /v1/speak`` — a thin mapper onto the streaming text buffer
(``server.streaming.text_stream``), so Pipecat's ``DeepgramTTSService`` (``base_url``) and
``DeepgramSageMakerTTSService`` (SageMaker's model invocation path ``v1/speak``) speak Kokoro unchanged.

Query: ``model`` (the voice: a Kokoro voice name, a blend ``a(2)+b(1)``, or an alias from
``KOKORO_VOICE_ALIASES`` such as ``aura-2-thalia-en=af_heart``; anything else speaks the default
voice with a ``Warning``), ``encoding`` (``linear16`` only; another is refused at the upgrade, 400),
``sample_rate`` (default 24000), ``speed`` (clamped to 0.5-2.0). Other parameters (``mip_opt_out``,
``container``, ``bit_rate``, ``tag`` …) are accepted and ignored.

Client messages, in text or binary frames alike (SageMaker delivers binary): ``Speak {text}`` (text
of any size: a token, a word, sentences; cut at sentence ends, the first clause of each turn started
early), ``Flush`` (speak what is buffered; ``Flushed {sequence_id}`` follows its last audio frame),
``Clear`` (barge-in: drop the text and audio not yet sent, abort the synthesis running;
``Cleared {sequence_id}`` follows the last audio frame that was sent), ``Close`` (speak what is
buffered, then close 1000). ``KeepAlive`` is accepted silently. Anything else — bad JSON, an unknown
type, ``Speak`` without text, text past the buffer limit, a piece that could not be spoken — gets a
``Warning {description, code}`` and the session goes on.

Server messages: ``Metadata {request_id, model_name, model_version, model_uuid}`` at open, binary
frames of raw PCM s16le at ``sample_rate`` (one per synthesised segment), ``Flushed``, ``Cleared``,
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

from backends.api import MAX_SPEED, MIN_SPEED, KokoroError, NotReady
from server.auth import authorization, key_matches
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
from server.websocket.admission import deny, websocket_route
from server.websocket.session import WebSocketSession

PATH = "/v1/speak"
SAMPLE_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)
MODEL_VERSION = "kokoro-82m"
IGNORED_TYPES = ("KeepAlive",)


class DeepgramSession(WebSocketSession):
    ROUTE = "deepgram"

    def __init__(self, websocket: WebSocket, state: Any) -> None:
        super().__init__(websocket, state)
        q = websocket.query_params
        self.model = q.get("model") or ""
        self.warnings: list[tuple[str, str]] = []
        voice = self._voice(self.model)
        self.sample_rate = int(q.get("sample_rate") or 24000)
        speed = _float(q.get("speed"))
        options = StreamOptions(
            voice=voice, speed=min(MAX_SPEED, max(MIN_SPEED, speed)) if speed else 1.0,
            sample_rate=self.sample_rate,
        )
        self.stream = TextStream(state, self.ROUTE, options, session=self.id)
        self.sequence = 0
        self.request_id = str(uuid.uuid4())

    @classmethod
    def authorized(cls, websocket: WebSocket, key: str) -> bool:
        scheme, token = authorization(websocket.headers)
        if scheme in ("token", "bearer") and key_matches(key, token):
            return True
        protocols = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",")]
        if len(protocols) == 2 and protocols[0].lower() == "token" and key_matches(key, protocols[1]):
            return True
        return key_matches(key, websocket.query_params.get("token"))

    def _voice(self, model: str) -> str | None:
        catalog = self.state.backend.voices
        if not model:
            return None
        if model in catalog:
            return model
        self.warnings.append((
            f"model {model[:80]!r} is not a Kokoro voice, blend or alias (KOKORO_VOICE_ALIASES); "
            f"speaking the default voice {catalog.default!r}",
            "UNKNOWN_VOICE",
        ))
        return None

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
            "model_version": MODEL_VERSION, "model_uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"kokoro:{self.model}")),
        })
        for description, code in self.warnings:
            await self.warn(description, code)
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


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


async def _speak_endpoint(websocket: WebSocket) -> None:
    q = websocket.query_params
    problem = None
    if q.get("encoding", "linear16").lower() != "linear16":
        problem = f"encoding {q.get('encoding', '')[:20]!r} is not supported; use linear16"
    elif (q.get("sample_rate") or "24000") not in {str(r) for r in SAMPLE_RATES}:
        problem = f"sample_rate must be one of {', '.join(map(str, SAMPLE_RATES))}"
    if problem is not None:
        body = {"err_code": "INVALID_QUERY_PARAMETER", "err_msg": problem}
        await deny(websocket, 400, body, close_code=1008, reason="INVALID_QUERY_PARAMETER")
        return
    await _endpoint(websocket)


_endpoint = websocket_route(DeepgramSession)


def deepgram_routes() -> list[WebSocketRoute]:
    """``WS /v1/speak`` (mount in the app's route list; ``own_key_paths`` gets :data:`PATH`)."""
    return [WebSocketRoute(PATH, _speak_endpoint)]
