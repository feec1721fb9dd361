"""TTS client: one interface, two transports, speaking the server's bidirectional contract
(docs/wire-contract.md).

* :class:`~agent.messages.Transport` — one duplex connection: ``send(message)`` puts one JSON object
  on the wire as a *binary* payload (what SageMaker delivers to the container unless told otherwise);
  ``receive()`` returns a ``str`` for a text frame (control JSON) or ``bytes`` for a binary frame (raw
  PCM s16le), or None once the server closed the session normally. Two implementations:
  :class:`~agent.ws_client.ContractSession` (direct WebSocket: local, RunPod, a container) and
  ``agent.sagemaker_transport.SageMakerTransport`` (HTTP/2 bidirectional stream; Python >= 3.12,
  imported only when chosen). Both speak the messages of :mod:`agent.messages`.
* :class:`TTSClient` — ``speak(sentences)`` opens one session, sends every sentence the moment it
  arrives (sentence N+1 leaves before N's audio is complete; the server answers strictly in order),
  sends ``close`` when the sentences run out, and yields :class:`SynthesisStart`, :class:`AudioChunk`,
  :class:`SynthesisComplete` and :class:`SynthesisFailed` events in order.
* Reconnection (:mod:`agent.reconnect`): when the session drops mid-reply, ``speak`` yields
  :class:`VoiceLost`, opens a new session under its :class:`Reconnect` policy (bounded tries,
  capped backoff), yields :class:`VoiceRestored` and sends again, under the same request ids, the
  sentences that had not completed — a completed sentence is never sent twice, a sentence cut
  mid-way resumes its audio at the byte where it stopped (the same text and voice synthesise to
  the same audio), and no sentence is lost. With the tries spent it raises ``tts_unavailable``.

Cancellation: closing the ``speak`` iterator early (``aclose()``, or cancelling the task that iterates
it — e.g. the listener went away) sends ``{"type": "cancel"}`` so the server drops queued and in-flight
work, then closes the connection. All methods run on the caller's event loop; nothing blocks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

from .messages import (
    CLOSE,
    Answers,
    AudioChunk,
    SynthesisComplete,
    SynthesisFailed,
    SynthesisStart,
    Transport,
    TTSError,
    TTSEvent,
    VoiceLost,
    VoiceRestored,
    cancel_message,
    synthesis_request,
)
from .reconnect import Reconnect, reopening, websocket_sessions
from .ws_client import ContractSession, ws_url

__all__ = ["AudioChunk", "Reconnect", "SynthesisComplete", "SynthesisFailed", "SynthesisStart", "TTSClient",
           "TTSError", "TTSEvent", "Transport", "VoiceLost", "VoiceRestored"]

logger = logging.getLogger(__name__)


class TTSClient:
    """Speaks text through a TTS server over one :class:`Transport` per :meth:`speak` call.

    ``connect`` opens a fresh transport; use :meth:`websocket` or :meth:`sagemaker` to build one.
    ``receive_timeout_s`` bounds the wait for the next frame while requests are outstanding.
    ``retry`` (:class:`~agent.reconnect.Reconnect`) says how often a lost session is opened again
    (default: never); ``sessions``, when given, yields the sessions instead (the WebSocket
    client's reconnecting iterator).
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[Transport]],
        *,
        voice: str | None = None,
        speed: float | None = None,
        sample_rate: int | None = None,
        receive_timeout_s: float = 60.0,
        retry: Reconnect | None = None,
        sessions: Callable[[], AsyncIterator[Transport]] | None = None,
    ) -> None:
        self._connect = connect
        self._open_sessions = sessions
        self.retry = retry or Reconnect()
        self.voice = voice
        self.speed = speed
        self.sample_rate = sample_rate
        self.receive_timeout_s = receive_timeout_s

    @classmethod
    def websocket(cls, url: str, *, api_key: str | None = None, **kwargs: Any) -> TTSClient:
        """A client for ``url`` (``http(s)://`` is accepted and turned into ``ws(s)://``; a bare
        ``host:port`` gets the bidirectional path)."""
        url = ws_url(url)
        retry = kwargs.pop("retry", None) or Reconnect()
        return cls(lambda: ContractSession.connect(url, api_key=api_key, open_timeout=10.0), retry=retry,
                   sessions=lambda: websocket_sessions(url, retry, api_key=api_key), **kwargs)

    @classmethod
    def sagemaker(cls, endpoint_name: str, region: str, *, boto_session: Any = None, **kwargs: Any) -> TTSClient:
        """A client for a SageMaker endpoint's HTTP/2 bidirectional stream (Python >= 3.12; the SDK is
        imported on the first session). Sessions share one SDK client and its connections."""
        from .sagemaker_transport import SageMakerConnector

        connector = SageMakerConnector(endpoint_name, region, boto_session=boto_session)
        return cls(connector.open, **kwargs)

    def _request(self, text: str, request_id: str, voice: str | None, speed: float | None) -> dict[str, Any]:
        return synthesis_request(
            text, request_id, voice=voice or self.voice, speed=speed if speed is not None else self.speed,
            sample_rate=self.sample_rate, timestamp=True,
        )

    async def speak(
        self, sentences: AsyncIterable[str], *, voice: str | None = None, speed: float | None = None
    ) -> AsyncIterator[TTSEvent]:
        """Synthesize each sentence as it arrives; yield the server's answers in order.

        ``voice``/``speed`` override the client's defaults for this session.

        When the session drops mid-reply and :attr:`retry` allows, a :class:`VoiceLost` event is
        yielded, a new session opened (with backoff) and :class:`VoiceRestored` yielded; the
        sentences that had not completed are sent again under their request ids, so each
        sentence's start and completion are yielded once and its audio resumes where it stopped.

        Raises :class:`TTSError` when the session fails for good (cannot connect, lost with no
        tries left — ``tts_unavailable`` —, timeout). A refused sentence is a
        :class:`SynthesisFailed` event, not an exception.
        """
        speech = _Speech(sentences)
        pump = asyncio.create_task(speech.pump(), name="tts-sentences")
        lost: TTSError | None = None
        try:
            async with contextlib.aclosing(self._sessions()) as sessions:
                async for transport in sessions:
                    if lost is not None:
                        yield VoiceRestored(resent=len(speech.sent))
                    try:
                        async with contextlib.aclosing(self._session(transport, speech, voice, speed)) as events:
                            async for event in events:
                                yield event
                        return
                    except TTSError as exc:
                        if not exc.retryable or self.retry.tries == 0:
                            raise
                        if speech.losses >= self.retry.tries:
                            raise self.retry.gave_up() from exc
                        speech.losses += 1
                        lost = exc
                        logger.warning("TTS session lost (%s); reconnecting", exc)
                        yield VoiceLost(exc.code, exc.message)
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump

    def _sessions(self) -> AsyncIterator[Any]:
        return self._open_sessions() if self._open_sessions is not None else reopening(self._connect, self.retry)

    async def _session(
        self, transport: Transport, speech: _Speech, voice: str | None, speed: float | None
    ) -> AsyncIterator[TTSEvent]:
        """One session: what is unanswered goes out again, then every new sentence; its events."""
        answers = Answers()
        sending_done = asyncio.Event()

        async def send_all() -> None:
            try:
                for rid, text in list(speech.sent.items()):
                    answers.expect(rid, text)
                    await transport.send(self._request(text, rid, voice, speed))
                while (item := await speech.next_sentence()) is not None:
                    rid, text = item
                    answers.expect(rid, text)
                    await transport.send(self._request(text, rid, voice, speed))
                await transport.send(CLOSE)
            finally:
                sending_done.set()

        sender = asyncio.create_task(send_all(), name="tts-send")
        finished = False
        try:
            while not (sending_done.is_set() and not answers.pending):
                event = await self._next_event(transport, sender, answers)
                if event is not None and (event := speech.once(event)) is not None:
                    yield event
            if sender.done() and sender.exception() is not None:
                raise sender.exception()  # type: ignore[misc]
            finished = True
        finally:
            await self._shutdown(transport, sender, cancel=not finished)

    async def _next_event(self, transport: Transport, sender: asyncio.Task[None], answers: Answers) -> TTSEvent | None:
        """The event of the next frame (None when the frame carries none or the stream may end)."""
        frame = await self._next_frame(transport, sender, answers.pending)
        if frame is None:
            if answers.pending:
                raise TTSError("connection_lost", "server closed the session with requests pending",
                               request_id=answers.pending[0], retryable=True)
            return None  # closed after our close; the loop head ends the stream
        event = answers.read(frame)
        if isinstance(event, AudioChunk) and event.request_id is None:
            logger.warning("audio frame outside a request; dropped (%d bytes)", len(event.pcm))
            return None
        return event

    async def _next_frame(self, transport: Transport, sender: asyncio.Task[None], pending: Any) -> Any:
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
    async def _shutdown(transport: Transport, sender: asyncio.Task[None], *, cancel: bool) -> None:
        if not sender.done():
            sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await sender
        if cancel:
            # The listener went away (or the session failed): tell the server to drop the work.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(transport.send(cancel_message()), 2.0)
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


_END = object()


class _Speech:
    """One ``speak`` call's sentences across sessions: read from the caller's iterable by one task
    (so a lost session never interrupts the caller's iterator), numbered once, remembered until
    answered, and their events passed on once — a sentence sent again after a reconnect yields no
    second start, and its audio resumes at the byte where the listener stopped."""

    def __init__(self, sentences: AsyncIterable[str]) -> None:
        self._source = sentences
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._error: BaseException | None = None
        self._ended = False
        self._prefix = uuid.uuid4().hex[:8]
        self._counter = itertools.count(1)
        #: Sent and not yet answered, in order: request id -> text.
        self.sent: dict[str, str] = {}
        self.losses = 0  # sessions lost since the last answer
        self._started: set[str] = set()
        self._delivered: dict[str, int] = {}  # bytes of audio passed on, per request id
        self._seen: dict[str, int] = {}  # bytes of audio received in the current session

    async def pump(self) -> None:
        try:
            async for text in self._source:
                if text.strip():
                    self._queue.put_nowait(text)
        except Exception as exc:
            self._error = exc
        finally:
            self._queue.put_nowait(_END)

    async def next_sentence(self) -> tuple[str, str] | None:
        """The next new sentence with its id (remembered as sent), or None at the end."""
        if self._ended:
            return None
        text = await self._queue.get()
        if text is _END:
            self._ended = True
            if self._error is not None:
                raise self._error
            return None
        rid = f"{self._prefix}-{next(self._counter)}"
        self.sent[rid] = text
        return rid, text

    def once(self, event: TTSEvent) -> TTSEvent | None:
        """``event`` as the caller should see it, or None when it was already passed on."""
        if isinstance(event, SynthesisStart):
            self._seen[event.request_id] = 0
            if event.request_id in self._started:
                return None
            self._started.add(event.request_id)
        elif isinstance(event, AudioChunk) and event.request_id is not None:
            return self._resume(event)
        elif isinstance(event, SynthesisComplete | SynthesisFailed):
            self.sent.pop(event.request_id or "", None)
            self.losses = 0
        return event

    def _resume(self, event: AudioChunk) -> AudioChunk | None:
        rid = event.request_id or ""
        start = self._seen.get(rid, 0)
        end = self._seen[rid] = start + len(event.pcm)
        done = self._delivered.get(rid, 0)
        if end <= done:
            return None
        self._delivered[rid] = end
        return event if start >= done else AudioChunk(rid, event.pcm[done - start:])
