"""Streaming text input: one :class:`TextStream` per turn/context of a voice-agent protocol
(Deepgram ``/v1/speak``, Cartesia, ElevenLabs), on the one synthesis pipeline.

A protocol mapper feeds text in pieces of any size and reads events back, in order::

    stream = TextStream(state, "deepgram", StreamOptions(voice="af_heart"), session=sid)
    stream.push("Hello")                # any size: a token, a word, sentences
    stream.push(" there. How are")      # "Hello there." is cut and starts synthesising
    stream.flush(mark=7)                # cut the rest; Flushed(7) follows its audio
    await stream.clear(mark=8)          # barge-in: drop everything; Cleared(8) follows the last audio
    stream.end()                        # no more text: Done follows the last audio, then the end
    async for event in stream: ...      # Audio, Flushed, Cleared, Failed, Done — from ONE task

Contract (stable; the protocol mappers are built on it):

* ``push(text)`` — never blocks. The text goes through :class:`~backends.text.chunker.SentenceChunker`
  (the agent's sentence rules, ``backends/text/sentences.py``); each completed piece is queued for
  synthesis. The first piece of a turn may end at a clause once it holds ``first_clause_words``
  words, so the first audio starts early. Raises :class:`~backends.api.TextTooLong` (nothing is
  taken) when the text buffered and not yet synthesised would pass ``max_buffered_chars``, and
  :class:`~backends.api.InvalidRequest` after ``end()``.
* ``flush(mark)`` — cut whatever is buffered (even without a full stop) and queue it; once its
  audio has been yielded, :class:`Flushed` ``(mark)`` is. The next piece starts a new turn (its
  first clause is cut early again).
* ``end()`` — ``flush`` then close the input: :class:`Done` is the last event.
* ``await clear(mark)`` — barge-in/cancel, at once: text buffered and queued is dropped, audio
  produced and not yet taken by the reader is dropped, the running request's backend stream is
  closed (its pending segments are never synthesised; a running runtime call is interrupted where
  the runtime can be), and :class:`Cleared` ``(mark)`` is the next event — so a mapper that sends
  each event as it reads it acknowledges only after the last audio frame of the cleared turn. The
  stream stays usable; its audio clock restarts at 0. Returns once nothing of the cleared turn
  can be yielded any more.
* iteration — exactly one reader task (``async for event in stream``). Events come strictly in
  input order. An :class:`Audio` carries one segment's encoded bytes (``encoding`` at ``sample_rate``:
  ``backends.audio.wire``), its place on the turn's clock (``offset``,
  ``duration``) and, when ``word_timings`` was asked and the runtime reports durations (see
  :attr:`TextStream.timed`), the words it speaks with start/end seconds on that clock
  (``server.pipeline.word_timings``). A piece that fails (unknown voice, overloaded, backend fault) yields
  :class:`Failed` and the stream goes on. Iteration ends after :class:`Done`, or after
  :meth:`aclose`.
* backpressure — at most ``ahead`` events wait for the reader; while they do, no further audio is
  pulled from the backend, so a client that stops reading pauses its own synthesis (the mapper's
  bounded send then ends the session, as on the bidi route).
* ``await aclose()`` — stop everything (the socket closed); idempotent.

Each synthesised piece is one request of the pipeline (``server.pipeline.synthesis``: admission, metrics by
``route``, backend ``prepare``/``stream``); pieces already queued when the synthesis worker is free
are sent as one request (up to ``max_request_chars``) so the backend packs its segments. No
protocol gets its own scheduling or synthesis path. Everything runs on the event loop; inference
and G2P run on worker threads.

:class:`server.streaming.stream_set.StreamSet` keeps the contexts of one socket (Cartesia, ElevenLabs
multiplex); :class:`server.websocket.session.WebSocketSession` is the socket side every mapper shares.

Admission: the mapper decides what a turn is and refuses a new one while the server drains; the
pieces of a turn it accepted are synthesised even while the server drains (only a model that is
not ready refuses them), so a drain never cuts a reply mid-turn.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backends.api import (
    SAMPLE_RATE,
    AudioChunk,
    BackendFault,
    InvalidRequest,
    KokoroError,
    SynthesisRequest,
    TextTooLong,
)
from backends.audio.encoders import Encoder
from backends.audio.wire import BYTES_PER_SAMPLE, wire_encoder
from backends.text.chunker import SentenceChunker
from server.pipeline.synthesis import Synthesis, retrieve
from server.pipeline.word_timings import WordTiming, segment_chunk_timings
from server.streaming.events import Audio, Cleared, Done, Event, Failed, Flushed, StreamOptions

__all__ = ["Audio", "Cleared", "Done", "Event", "Failed", "Flushed", "StreamOptions", "TextStream"]

if TYPE_CHECKING:
    from server.state import ServerState

log = logging.getLogger("kokoro.text_stream")


@dataclass(slots=True)
class _Piece:
    text: str
    received: float
    first: bool  # the first piece of its turn


@dataclass(slots=True)
class _Mark:
    event: Flushed | Done


# -- one stream ------------------------------------------------------------------------------
class TextStream:
    """One turn/context: text in pieces, audio events out (see the module docstring)."""

    def __init__(
        self,
        state: ServerState,
        route: str,
        options: StreamOptions,
        *,
        session: str = "",
        max_buffered_chars: int | None = None,
        max_request_chars: int = 1000,
        ahead: int = 2,
    ) -> None:
        self.state = state
        self.route = route
        self.options = options
        self.session = session
        self.max_buffered_chars = max_buffered_chars or state.settings.max_text_chars
        self.max_request_chars = max(1, min(max_request_chars, state.settings.max_text_chars))
        self._chunker = SentenceChunker(first_clause_words=options.first_clause_words or None)
        self._buffered = 0  # characters in the chunker
        self._queue: deque[_Piece | _Mark] = deque()
        self._queued_chars = 0
        self._wake = asyncio.Event()
        self._out: asyncio.Queue[Event | None] = asyncio.Queue()  # bounded by _put, not by put_nowait
        self._ahead = max(1, ahead)
        self._taken = asyncio.Event()
        self._speaking = False
        self._turn_open = False  # a piece of the current turn was already queued
        self._ended = False
        self._closed = False
        self._clock = 0.0  # seconds of audio yielded in this turn
        self._encoder = _encoder(options)
        self._worker: asyncio.Task[None] | None = None

    # -- properties -----------------------------------------------------------------------------
    @property
    def timed(self) -> bool:
        """Whether :class:`Audio` events carry word timings (asked for, and the runtime has durations)."""
        return self.options.word_timings and self.state.backend.info.capabilities.word_timings

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def mid_turn(self) -> bool:
        """A turn has begun and was not flushed yet: its text may still be arriving."""
        return not (self._ended or self._closed) and bool(self._buffered or self._turn_open)

    @property
    def busy(self) -> bool:
        """Text is buffered, queued or being spoken, or events wait for the reader."""
        return bool(self._buffered or self._queue or self._speaking or not self._out.empty())

    # -- input ----------------------------------------------------------------------------------
    def push(self, text: str) -> None:
        if self._ended or self._closed:
            raise InvalidRequest("this stream is closed to new text")
        if not text:
            return
        if self._buffered + self._queued_chars + len(text) > self.max_buffered_chars:
            raise TextTooLong(
                f"more than {self.max_buffered_chars} characters would wait to be spoken; "
                "flush, or send less text ahead of the audio"
            )
        self._buffered += len(text)
        # A message that ends a sentence ends it: no waiting for the next message to settle it.
        self._take(self._chunker.push(text) + self._chunker.settle())

    def flush(self, mark: Any = None) -> None:
        if self._ended or self._closed:
            return
        self._take(self._chunker.flush())
        self._buffered = 0
        self._turn_open = False
        self._queue.append(_Mark(Flushed(mark)))
        self._kick()

    def end(self) -> None:
        if self._ended or self._closed:
            return
        self._take(self._chunker.flush())
        self._buffered = 0
        self._ended = True
        self._queue.append(_Mark(Done()))
        self._kick()

    async def clear(self, mark: Any = None) -> None:
        if self._closed:
            return
        self._chunker.flush()
        self._buffered = 0
        self._queue.clear()
        self._queued_chars = 0
        self._turn_open = False
        await self._stop_worker()
        while not self._out.empty():  # audio of the cleared turn the reader has not taken
            self._out.get_nowait()
        self._clock = 0.0
        self._encoder = _encoder(self.options)  # a fresh resampler: no tail of the old turn
        self._out.put_nowait(Cleared(mark))
        if self._ended:  # the input was closed: the stream ends after the acknowledgement
            self._out.put_nowait(Done())
        self._kick()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.clear()
        await self._stop_worker()
        while not self._out.empty():
            self._out.get_nowait()
        self._out.put_nowait(None)

    def _take(self, chunks: list[str]) -> None:
        now = time.perf_counter()
        for chunk in chunks:
            self._buffered = max(0, self._buffered - len(chunk))
            self._queue.append(_Piece(chunk, now, first=not self._turn_open))
            self._queued_chars += len(chunk)
            self._turn_open = True
        if chunks:
            self._kick()

    def _kick(self) -> None:
        self._wake.set()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name=f"text-stream-{self.route}-{self.session}")
            self._worker.add_done_callback(self._worker_ended)

    def _worker_ended(self, worker: asyncio.Task[None]) -> None:
        """The worker ended: if it died (a bug outside a piece), say so — logged with its traceback,
        a :class:`Failed` for the reader and every flush/end marker still queued, so no client waits
        for an acknowledgement that would never come. The next text starts a new worker."""
        if worker.cancelled() or worker.exception() is None or self._closed:
            return
        error = worker.exception()
        log.error("%s: the text stream's worker failed", self.route, exc_info=error)
        fault = BackendFault(f"synthesis failed: {type(error).__name__}")
        self._out.put_nowait(Failed(fault, ""))
        self._salvage_marks()

    def _salvage_marks(self) -> None:
        """Hand the reader every marker queued (its text is dropped: it failed with the worker)."""
        marks = [item.event for item in self._queue if isinstance(item, _Mark)]
        self._queue.clear()
        self._queued_chars = 0
        self._speaking = False
        for event in marks:
            self._out.put_nowait(Done(round(self._clock, 4)) if isinstance(event, Done) else event)

    async def _stop_worker(self) -> None:
        worker, self._worker = self._worker, None
        self._speaking = False
        if worker is not None and not worker.done():
            worker.cancel()
            await asyncio.wait({worker})  # its pipeline request closes: pending segments aborted
        if worker is not None and worker.done():
            retrieve(worker)

    # -- output ---------------------------------------------------------------------------------
    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        while True:
            event = await self._out.get()
            self._taken.set()
            if event is None:
                return
            yield event
            if isinstance(event, Done):
                return

    # -- the synthesis worker ---------------------------------------------------------------------
    async def _work(self) -> None:
        while not self._closed:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            item = self._queue.popleft()
            if isinstance(item, _Mark):
                try:
                    await self._end_turn_audio()
                except Exception as e:  # a bug costs the turn's last samples, never its marker
                    log.exception("%s: ending a turn's audio failed", self.route)
                    await self._put(Failed(BackendFault(f"synthesis failed: {type(e).__name__}"), ""))
                event = Done(round(self._clock, 4)) if isinstance(item.event, Done) else item.event
                await self._put(event)
                continue
            pieces = [item]
            while (
                self._queue and isinstance(self._queue[0], _Piece) and not self._queue[0].first
                and sum(len(p.text) for p in pieces) + len(self._queue[0].text) + 1 <= self.max_request_chars
            ):
                pieces.append(self._queue.popleft())  # type: ignore[arg-type]
            self._queued_chars = max(0, self._queued_chars - sum(len(p.text) for p in pieces))
            self._speaking = True
            try:
                await self._speak(pieces)
            finally:
                self._speaking = False

    async def _put(self, event: Event) -> None:
        while self._out.qsize() >= self._ahead:
            self._taken.clear()
            await self._taken.wait()
        self._out.put_nowait(event)

    async def _end_turn_audio(self) -> None:
        """At a flush or the end: the resampler's last samples (another rate than the model's)."""
        width = BYTES_PER_SAMPLE.get(self.options.encoding)
        if self.options.sample_rate == SAMPLE_RATE and width is not None:
            return
        encoder, self._encoder = self._encoder, _encoder(self.options)
        tail = await asyncio.to_thread(encoder.flush)
        if tail:  # a compressed encoding's tail is the padding of its last frame: no time of its own
            seconds = len(tail) / width / self.options.sample_rate if width else 0.0
            await self._put(Audio(tail, round(self._clock, 4), seconds, ""))
            self._clock += seconds

    async def _speak(self, pieces: list[_Piece]) -> None:
        """One pipeline request for ``pieces``: each chunk encoded (and timed) and queued in order."""
        text = " ".join(p.text for p in pieces)
        o = self.options
        request = SynthesisRequest(
            text=text, voice=o.voice, speed=o.speed, lang=o.lang, session=self.session, turn=o.turn,
            # the first piece of a turn: the server's fast first segment; later ones: audio is playing
            fast_first=None if pieces[0].first else False,
        )
        async with Synthesis(self.state.backend, self.route, state=self.state, received=pieces[0].received) as job:
            try:
                job.admit(started=True)  # the mapper admitted the turn; a drain lets it finish
                first = await job.open(request)
                async for chunk in job.chunks(first):
                    await self._put(await self._audio(chunk, job))
                    job.first_audio()
            except KokoroError as e:
                job.fail(e)
                await self._put(Failed(e, text))
                return
            except Exception as e:  # a bug costs this piece, not the stream
                log.exception("%s: a piece failed", self.route)
                fault = BackendFault(f"synthesis failed: {type(e).__name__}")
                job.fail(fault)
                await self._put(Failed(fault, text))
                return
            job.record(200)

    async def _audio(self, chunk: AudioChunk, job: Synthesis) -> Audio:
        encoder = self._encoder
        cheap = self.options.sample_rate == chunk.sample_rate and self.options.encoding in ("pcm", "f32")
        data = encoder.encode(chunk.audio) if cheap else await asyncio.to_thread(encoder.encode, chunk.audio)
        words: tuple[WordTiming, ...] = ()
        if self.timed and chunk.durations is not None:  # arithmetic over the durations: no G2P, no thread
            words = tuple(segment_chunk_timings(chunk, self._clock))
        audio = Audio(data, round(self._clock, 4), chunk.seconds, chunk.text, words)
        self._clock += chunk.seconds
        return audio

def _encoder(options: StreamOptions) -> Encoder:
    return wire_encoder(options.encoding, options.sample_rate, options.bit_rate)
