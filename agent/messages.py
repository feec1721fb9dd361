"""The bidirectional contract's messages (docs/wire-contract.md) as the clients see them, and their errors.

* Client -> server: :func:`synthesis_request`, :func:`cancel_message`, :data:`CLOSE`, put on the wire by
  :func:`encode` (compact UTF-8 JSON).
* Server -> client: :class:`Answers` reads one session's frames — a ``str`` text frame (control
  JSON) or ``bytes`` binary frame (raw PCM s16le) — into :class:`SynthesisStart`,
  :class:`AudioChunk`, :class:`SynthesisComplete` and :class:`SynthesisFailed` events, keeping track
  of which request the audio belongs to (answers come strictly in request order).
* :class:`VoiceLost` / :class:`VoiceRestored` — what the reconnecting TTS client reports when a
  session drops mid-reply and when a new one is open.
* :class:`TTSError` — a failure of the session itself; ``retryable`` says whether a new session may
  succeed. A refused request is a :class:`SynthesisFailed` event instead, and the session goes on.
* :class:`Transport` — one duplex connection (the WebSocket client and the SageMaker HTTP/2 stream).

Standard library only; every client of the contract (the agent's transports, the deploy smoke test,
the RunPod handler, the benchmarks) builds on this module.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24_000
ENCODING = "pcm_s16le"
CLOSE: dict[str, Any] = {"type": "close"}


class TTSError(Exception):
    """A failure of the TTS session; ``retryable`` says whether opening a new session may succeed."""

    def __init__(self, code: str, message: str, *, request_id: str | None = None, retryable: bool = False):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.request_id = request_id
        self.retryable = retryable


@dataclass(frozen=True)
class SynthesisStart:
    request_id: str
    text: str
    sample_rate: int
    encoding: str
    channels: int


@dataclass(frozen=True)
class AudioChunk:
    """PCM s16le mono at the request's sample rate; ``request_id`` is None for audio that arrived
    outside any request (a contract violation the reader reports rather than hides)."""

    request_id: str | None
    pcm: bytes


@dataclass(frozen=True)
class SynthesisComplete:
    request_id: str
    audio_duration_s: float | None
    elapsed_s: float | None
    ttfa_ms: float | None


@dataclass(frozen=True)
class SynthesisFailed:
    """The server refused or failed one request; the session carries on with the next one."""

    request_id: str | None
    code: str
    message: str


@dataclass(frozen=True)
class VoiceLost:
    """The session to the TTS server was lost mid-reply; the client is opening a new one."""

    code: str
    message: str


@dataclass(frozen=True)
class VoiceRestored:
    """A new session is open; ``resent`` sentences that had not completed were sent again."""

    resent: int


TTSEvent = SynthesisStart | AudioChunk | SynthesisComplete | SynthesisFailed | VoiceLost | VoiceRestored


class Transport(Protocol):
    """One duplex connection to the TTS server: ``send`` puts one JSON object on the wire;
    ``receive`` returns a ``str`` for a text frame, ``bytes`` for a binary frame, or None once the
    server closed the session normally."""

    async def send(self, message: dict[str, Any]) -> None: ...

    async def receive(self) -> str | bytes | None: ...

    async def aclose(self) -> None: ...


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def synthesis_request(
    text: str,
    request_id: str | None = None,
    *,
    voice: str | None = None,
    speed: float | None = None,
    sample_rate: int | None = None,
    timestamp: bool = False,
    typed: bool = True,
) -> dict[str, Any]:
    """A synthesis request; unset options are left out (the server's defaults apply). ``typed=False``
    leaves out ``"type"`` too, as the AWS sample's clients send it."""
    msg: dict[str, Any] = {"type": "synthesize", "text": text} if typed else {"text": text}
    options = {"request_id": request_id, "voice": voice, "speed": speed, "sample_rate": sample_rate}
    msg.update({k: v for k, v in options.items() if v is not None})
    if timestamp:
        msg["request_timestamp"] = time.time()
    return msg


def cancel_message(request_id: str | None = None) -> dict[str, Any]:
    """Drop one request (queued or in flight), or all of them when ``request_id`` is None."""
    return {"type": "cancel"} if request_id is None else {"type": "cancel", "request_id": request_id}


def decode_control(frame: str | bytes) -> dict[str, Any] | None:
    """A control frame's JSON object, or None when it is not one."""
    try:
        msg = json.loads(frame)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


class Answers:
    """Reads one session's server frames into events, in order.

    :meth:`expect` registers each request as it is sent (its text is echoed on its
    :class:`SynthesisStart`); ``pending`` holds the ids sent and not yet answered, oldest first. An
    error without an id answers the oldest outstanding request. Not thread-safe; one per session.
    """

    def __init__(self) -> None:
        self.pending: deque[str] = deque()
        self.texts: dict[str, str] = {}
        self.current: str | None = None

    def expect(self, request_id: str, text: str = "") -> None:
        self.pending.append(request_id)
        self.texts[request_id] = text

    def read(self, frame: str | bytes) -> TTSEvent | None:
        """The event a frame carries; None for a frame that carries none (logged)."""
        if isinstance(frame, bytes):
            return AudioChunk(self.current, frame)
        msg = decode_control(frame)
        if msg is None:
            logger.warning("unparseable control frame dropped: %.200s", frame)
            return None
        event = self._event(msg)
        if event is None:
            logger.debug("unknown control message ignored: %s", msg.get("type"))
        elif isinstance(event, SynthesisStart):
            self.current = event.request_id
        else:
            self._answered(event.request_id)
        return event

    def _answered(self, request_id: str | None) -> None:
        if request_id in self.pending:
            self.pending.remove(request_id)
        self.texts.pop(request_id or "", None)
        self.current = None

    def _event(self, msg: dict[str, Any]) -> TTSEvent | None:
        kind = msg.get("type")
        rid = msg.get("request_id")
        rid = None if rid is None else str(rid)
        if kind == "synthesis_start":
            return SynthesisStart(
                request_id=rid or "",
                text=self.texts.get(rid or "", ""),
                sample_rate=int(msg.get("sample_rate") or SAMPLE_RATE),
                encoding=str(msg.get("encoding", ENCODING)),
                channels=int(msg.get("channels") or 1),
            )
        if kind == "synthesis_complete":
            return SynthesisComplete(rid or "", msg.get("audio_duration_s"), msg.get("elapsed_s"), msg.get("ttfa_ms"))
        if kind == "error":
            if rid is None and self.pending:
                rid = self.pending[0]
            return SynthesisFailed(rid, str(msg.get("code", "error")), str(msg.get("message", "")))
        return None
