"""TTS client: one interface, two transports, speaking the server's bidirectional contract (DESIGN.md §4).

* :class:`Transport` — one duplex connection: ``send(message)`` puts one JSON object on the wire as a
  *binary* payload (what SageMaker delivers to the container unless told otherwise); ``receive()``
  returns a ``str`` for a text frame (control JSON) or ``bytes`` for a binary frame (raw PCM s16le), or
  None once the server closed the session normally. Two implementations: :class:`WebSocketTransport`
  (direct: local, RunPod, a container) and ``agent.sagemaker_transport.SageMakerTransport`` (HTTP/2
  bidirectional stream; Python >= 3.12, imported only when chosen).
* :class:`TTSClient` — ``speak(sentences)`` opens one session, sends every sentence the moment it
  arrives (sentence N+1 leaves before N's audio is complete; the server answers strictly in order),
  sends ``close`` when the sentences run out, and yields :class:`SynthesisStart`, :class:`AudioChunk`,
  :class:`SynthesisComplete` and :class:`SynthesisFailed` events in order.

Cancellation: closing the ``speak`` iterator early (``aclose()``, or cancelling the task that iterates
it — e.g. the listener went away) sends ``{"type": "cancel"}`` so the server drops queued and in-flight
work, then closes the connection. All methods run on the caller's event loop; nothing blocks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24_000


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
    request_id: str
    pcm: bytes  # s16le, mono, at the sample rate of the request's SynthesisStart


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


TTSEvent = SynthesisStart | AudioChunk | SynthesisComplete | SynthesisFailed


class Transport(Protocol):
    """One duplex connection to the TTS server (see the module docstring for the frame rules)."""

    async def send(self, message: dict[str, Any]) -> None: ...

    async def receive(self) -> str | bytes | None: ...

    async def aclose(self) -> None: ...


def encode_message(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class WebSocketTransport:
    """Direct WebSocket to ``ws[s]://host:port/invocations-bidirectional-stream``."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws

    @classmethod
    async def connect(cls, url: str, *, open_timeout: float = 10.0, max_size: int = 2**24) -> WebSocketTransport:
        from websockets.asyncio.client import connect

        try:
            # PCM does not compress; deflate would only cost CPU on both ends.
            ws = await connect(url, open_timeout=open_timeout, max_size=max_size, compression=None)
        except (OSError, TimeoutError) as exc:
            raise TTSError("connect_failed", f"cannot reach {url}: {exc}", retryable=True) from exc
        except Exception as exc:  # InvalidStatus, InvalidHandshake, ...
            raise TTSError("connect_failed", f"handshake with {url} failed: {exc}", retryable=True) from exc
        return cls(ws)

    async def send(self, message: dict[str, Any]) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await self._ws.send(encode_message(message))  # bytes -> binary frame
        except ConnectionClosed as exc:
            raise TTSError("connection_lost", f"send failed: {exc}", retryable=True) from exc

    async def receive(self) -> str | bytes | None:
        from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK

        try:
            return await self._ws.recv()
        except ConnectionClosedOK:
            return None
        except ConnectionClosedError as exc:
            code = "message_too_big" if exc.rcvd and exc.rcvd.code == 1009 else "connection_lost"
            raise TTSError(code, f"connection closed: {exc}", retryable=code == "connection_lost") from exc

    async def aclose(self) -> None:
        await self._ws.close()


class TTSClient:
    """Speaks text through a TTS server over one :class:`Transport` per :meth:`speak` call.

    ``connect`` opens a fresh transport; use :meth:`websocket` or :meth:`sagemaker` to build one.
    ``receive_timeout_s`` bounds the wait for the next frame while requests are outstanding.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[Transport]],
        *,
        voice: str | None = None,
        speed: float | None = None,
        sample_rate: int | None = None,
        receive_timeout_s: float = 60.0,
    ) -> None:
        self._connect = connect
        self.voice = voice
        self.speed = speed
        self.sample_rate = sample_rate
        self.receive_timeout_s = receive_timeout_s

    @staticmethod
    def _ws_url(url: str) -> str:
        url = url.rstrip("/")
        if url.startswith("http"):
            url = "ws" + url[4:]
        elif not url.startswith("ws"):
            url = "ws://" + url
        if url.count("/") < 3:
            url += "/invocations-bidirectional-stream"
        return url

    @classmethod
    def websocket(cls, url: str, **kwargs: Any) -> TTSClient:
        """A client for ``url`` (``http(s)://`` is accepted and turned into ``ws(s)://``; a bare
        ``host:port`` gets the bidirectional path)."""
        url = cls._ws_url(url)
        return cls(lambda: WebSocketTransport.connect(url), **kwargs)

    @classmethod
    def sagemaker(cls, endpoint_name: str, region: str, *, boto_session: Any = None, **kwargs: Any) -> TTSClient:
        """A client for a SageMaker endpoint's HTTP/2 bidirectional stream (Python >= 3.12; the SDK is
        imported on the first session). Sessions share one SDK client and its connections."""
        from .sagemaker_transport import SageMakerConnector

        connector = SageMakerConnector(endpoint_name, region, boto_session=boto_session)
        return cls(connector.open, **kwargs)

    def _request(self, text: str, request_id: str, voice: str | None, speed: float | None) -> dict[str, Any]:
        msg: dict[str, Any] = {"type": "synthesize", "text": text, "request_id": request_id}
        voice = voice or self.voice
        speed = speed if speed is not None else self.speed
        if voice:
            msg["voice"] = voice
        if speed is not None:
            msg["speed"] = speed
        if self.sample_rate is not None:
            msg["sample_rate"] = self.sample_rate
        msg["request_timestamp"] = time.time()
        return msg

    async def speak(
        self, sentences: AsyncIterable[str], *, voice: str | None = None, speed: float | None = None
    ) -> AsyncIterator[TTSEvent]:
        """Synthesize each sentence as it arrives; yield the server's answers in order.

        ``voice``/``speed`` override the client's defaults for this session.

        Raises :class:`TTSError` when the session itself fails (cannot connect, connection lost,
        timeout). A refused sentence is a :class:`SynthesisFailed` event, not an exception.
        """
        transport = await self._connect()
        prefix = uuid.uuid4().hex[:8]
        counter = itertools.count(1)
        texts: dict[str, str] = {}
        pending: deque[str] = deque()  # sent, not yet answered, in order
        sending_done = asyncio.Event()

        async def send_all() -> None:
            try:
                async for text in sentences:
                    if not text.strip():
                        continue
                    rid = f"{prefix}-{next(counter)}"
                    texts[rid] = text
                    pending.append(rid)
                    await transport.send(self._request(text, rid, voice, speed))
                await transport.send({"type": "close"})
            finally:
                sending_done.set()

        sender = asyncio.create_task(send_all(), name="tts-send")
        finished = False
        current: str | None = None
        try:
            while True:
                if sending_done.is_set() and not pending:
                    if sender.done() and sender.exception() is not None:
                        raise sender.exception()  # type: ignore[misc]
                    finished = True
                    return
                frame = await self._next_frame(transport, sender, pending)
                if frame is None:
                    if pending:
                        raise TTSError("connection_lost", "server closed the session with requests pending",
                                       request_id=pending[0], retryable=True)
                    continue  # closed after our close; the loop head ends the stream
                if isinstance(frame, bytes):
                    if current is None:
                        logger.warning("audio frame outside a request; dropped (%d bytes)", len(frame))
                        continue
                    yield AudioChunk(current, frame)
                    continue
                event = self._control(frame, texts, pending)
                if event is None:
                    continue
                if isinstance(event, SynthesisStart):
                    current = event.request_id
                elif isinstance(event, SynthesisComplete | SynthesisFailed):
                    if event.request_id in pending:
                        pending.remove(event.request_id)
                    current = None
                yield event
        finally:
            await self._shutdown(transport, sender, cancel=not finished)

    async def _next_frame(self, transport: Transport, sender: asyncio.Task[None], pending: deque[str]) -> Any:
        """The next frame, waking early when the sender fails or finishes with nothing pending."""
        recv = asyncio.ensure_future(transport.receive())
        try:
            while True:
                waiters: set[asyncio.Future[Any]] = {recv}
                if not sender.done():
                    waiters.add(sender)
                timeout = self.receive_timeout_s if pending else None
                done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if recv in done:
                    return recv.result()
                if not done:
                    raise TTSError("timeout", f"no answer from the TTS server in {self.receive_timeout_s:.0f} s",
                                   request_id=pending[0] if pending else None, retryable=True)
                if sender.exception() is not None:
                    raise sender.exception()  # type: ignore[misc]
                if not pending:
                    # Everything sent was answered and the close went out: no need to wait for the
                    # server's closing handshake to end the stream.
                    return None
        finally:
            if not recv.done():
                recv.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await recv

    @staticmethod
    def _control(frame: str, texts: dict[str, str], pending: deque[str]) -> TTSEvent | None:
        try:
            msg = json.loads(frame)
        except ValueError:
            logger.warning("unparseable control frame dropped: %.200s", frame)
            return None
        if not isinstance(msg, dict):
            return None
        kind = msg.get("type")
        rid = msg.get("request_id")
        if kind == "synthesis_start":
            return SynthesisStart(
                request_id=rid,
                text=texts.get(rid, ""),
                sample_rate=int(msg.get("sample_rate") or SAMPLE_RATE),
                encoding=msg.get("encoding", "pcm_s16le"),
                channels=int(msg.get("channels") or 1),
            )
        if kind == "synthesis_complete":
            return SynthesisComplete(rid, msg.get("audio_duration_s"), msg.get("elapsed_s"), msg.get("ttfa_ms"))
        if kind == "error":
            # An error without an id answers the oldest outstanding request (answers come in order).
            if rid is None and pending:
                rid = pending[0]
            return SynthesisFailed(rid, str(msg.get("code", "error")), str(msg.get("message", "")))
        logger.debug("unknown control message ignored: %s", kind)
        return None

    @staticmethod
    async def _shutdown(transport: Transport, sender: asyncio.Task[None], *, cancel: bool) -> None:
        if not sender.done():
            sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await sender
        if cancel:
            # The listener went away (or the session failed): tell the server to drop the work.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(transport.send({"type": "cancel"}), 2.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(transport.aclose(), 5.0)

    async def synthesize(
        self, text: str, *, voice: str | None = None, speed: float | None = None
    ) -> AsyncIterator[TTSEvent]:
        """One text, one request: the batch baseline (same events as :meth:`speak`)."""

        async def one() -> AsyncIterator[str]:
            yield text

        async for event in self.speak(one(), voice=voice, speed=speed):
            yield event
