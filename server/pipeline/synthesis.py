"""The one synthesis pipeline every route goes through: ``/invocations``, the OpenAI routes, each
WebSocket request and ``kokoro-serve say``.

A :class:`Synthesis` is one request's life, used as ``async with Synthesis(backend, route,
state=state) as job:``. In order:

1. **admission** (:meth:`Synthesis.admit`) — the same for every route: the model is loaded and
   warmed up, the server is not draining (``not_ready``, 503). Overload is the backend's answer
   when the request is opened (``overloaded``, 503).
2. **open** (:meth:`Synthesis.open`) — ``backend.prepare`` (voice, length, segment plan, off the
   loop), the backend stream, and the **first chunk**. An optional ``gone`` awaitable (the HTTP
   routes pass "the client disconnected") is watched from then on (:meth:`Synthesis.watch_client`):
   when the client leaves, the request's task is cancelled where it waits and the stream closed —
   its pending segments are never synthesised; before the first chunk, :class:`Cancelled` is raised.
3. **the stream** (:meth:`Synthesis.chunks`, :meth:`Synthesis.encoded`) — one chunk per segment as
   soon as the backend yields it; encoding runs in a worker thread where it is costly (compressed
   formats, resampling) and on the loop where it is a copy (PCM/WAV at the model's rate).
4. **closing** (leaving the ``async with``) — on every path: the backend stream is closed (pending
   segments aborted), the encoder released, and a request that recorded no outcome is counted as
   cancelled (499).

A client that stops reading pauses its own request: every send to it is bounded by
:func:`bounded_send` and no further chunk is pulled while one waits; a send that makes no progress
for ``send_timeout_s`` raises :class:`SendTimeout` (the route closes the session or cuts the body).

Metrics are recorded here and nowhere else: ``requests_total``/``errors_total`` by route and status
exactly once per request (:meth:`Synthesis.record`), time to first audio once
(:meth:`Synthesis.first_audio`), and the request in flight for the whole ``async with``.
Without a ``state`` (``say``), admission only asks the backend whether it is ready and nothing is
recorded.

Everything here runs on the event loop and never blocks it; inference runs on the backend's threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from backends.api import (
    SAMPLE_RATE,
    AudioChunk,
    Backend,
    BackendFault,
    KokoroError,
    NotReady,
    SynthesisRequest,
)
from backends.audio.encoders import Encoder, make_encoder
from server.metrics import CANCELLED_STATUS

if TYPE_CHECKING:
    from server.state import ServerState

log = logging.getLogger("kokoro.pipeline")
#: Formats whose encoding is a plain sample conversion (cheap enough for the event loop).
_CHEAP_FORMATS = ("pcm", "wav")


class Cancelled(KokoroError):
    """The client cancelled the request or went away before its answer."""

    code, status = "cancelled", CANCELLED_STATUS


class SendTimeout(KokoroError):
    """A send to the client made no progress for ``send_timeout_s``: the client stopped reading."""

    code, status = "send_timeout", CANCELLED_STATUS


async def bounded_send(send: Awaitable[None], limit_s: float) -> None:
    """Await ``send`` (one message to the client), raising :class:`SendTimeout` when it has not
    completed within ``limit_s`` seconds. While a send waits for the client to read, the caller
    pulls no further audio from the backend: a client that does not read pauses its synthesis."""
    try:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that
        # arrives as the send completes, and a task told to stop would then wait on forever.
        async with asyncio.timeout(limit_s):
            await send
    except TimeoutError:
        raise SendTimeout(f"the client read nothing for {limit_s:g} s") from None


class Synthesis:
    """One request through the pipeline (see the module docstring). Not reusable; loop only."""

    def __init__(
        self, backend: Backend, route: str, *, state: ServerState | None = None, received: float | None = None
    ):
        self.backend = backend
        self.route = route
        self.state = state
        self.received = time.perf_counter() if received is None else received
        self.encoder: Encoder | None = None
        self.request: SynthesisRequest | None = None
        #: The client's id for this request, once known (logs, response headers).
        self.request_id = ""
        self.recorded = False
        self._stream: AsyncIterator[AudioChunk] | None = None
        #: When the first audio was handed to the client (``perf_counter``), else None.
        self.first_audio_at: float | None = None
        self._track: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        self._watch: asyncio.Future[object] | None = None
        #: The watch cancelled the request's task (the client went away) and no one has caught it yet.
        self._left_uncaught = False

    # -- lifetime -----------------------------------------------------------------------------
    async def __aenter__(self) -> Synthesis:
        if self.state is not None:
            self._track = self.state.track(self.route)
        self._track.__enter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.aclose()
        finally:
            self._track.__exit__(kind, exc, tb)

    async def aclose(self) -> None:
        """Abort pending segments, release the encoder, count an unanswered request as cancelled."""
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                await stream.aclose()  # type: ignore[attr-defined]
            except Exception:
                log.debug("closing a backend stream failed", exc_info=True)
        if self.encoder is not None:
            self.encoder.close()
        self.record(CANCELLED_STATUS, Cancelled.code)  # only when nothing else was recorded

    # -- metrics (the only place requests are counted) ----------------------------------------
    def record(self, status: int, code: str | None = None) -> None:
        """The request's outcome, counted once (later calls are ignored)."""
        if self.recorded:
            return
        self.recorded = True
        if self.state is not None:
            self.state.metrics.request_done(self.route, status, code)

    def fail(self, error: KokoroError) -> None:
        self.record(error.status, error.code)

    def first_audio(self) -> None:
        """The first audio has been handed to the client (counted once)."""
        if self.first_audio_at is not None:
            return
        self.first_audio_at = time.perf_counter()
        if self.state is not None:
            self.state.metrics.first_audio(self.route, self.first_audio_at - self.received)

    # -- admission ----------------------------------------------------------------------------
    def admit(self, *, started: bool = False) -> None:
        """Raise :class:`NotReady` unless new work may start (loaded, warmed up, not draining), and
        :class:`Overloaded` where the backend would refuse a new request now (before anything of it
        is read: a refusal under overload costs next to nothing). ``started``: the request continues
        a turn admitted earlier (a piece of a voice-agent turn), which a drain lets finish: only
        readiness is checked."""
        if self.state is not None and started:
            self.state.check_ready()
            return
        if self.state is not None:
            self.state.check_accepting()
        elif not self.backend.ready:
            raise NotReady("the backend is not started")
        self.backend.admit()

    # -- synthesis ----------------------------------------------------------------------------
    def use_encoder(self, fmt: str, sample_rate: int | None) -> Encoder:
        self.encoder = make_encoder(fmt, sample_rate)
        return self.encoder

    async def open(
        self, request: SynthesisRequest, *, gone: Callable[[], Awaitable[object]] | None = None
    ) -> AudioChunk:
        """Prepare ``request``, start its stream and return the first chunk. Raises a
        :class:`KokoroError` (:class:`Cancelled` when ``gone`` finishes first)."""
        self.request_id = self.request_id or request.request_id
        self.request = await self.backend.prepare(request)
        self._stream = aiter(self.backend.stream(self.request))
        if gone is not None:
            self.watch_client(gone)
        try:
            first = await self.next_chunk()
        except asyncio.CancelledError:
            if self.client_left():  # a client that gave up waiting must not keep the runtime busy
                raise Cancelled("the client went away before the first audio") from None
            raise
        if first is None:  # never pass silence off as success
            raise BackendFault("the backend produced no audio")
        return first

    def watch_client(self, gone: Callable[[], Awaitable[object]]) -> None:
        """From now until the request closes, ``gone`` finishing (the client went away) cancels the
        task that called this, at whatever it awaits: the backend stream unwinds there (its pending
        segments are dropped) and nothing more is sent. The route catches that cancellation with
        :meth:`client_left`. A second call keeps the first watch."""
        if self._watch is not None:
            return
        task = asyncio.current_task()
        watch = asyncio.ensure_future(gone())

        def finished(done: asyncio.Future[object]) -> None:
            if done.cancelled():
                return
            done.exception()  # (read: a failed watch also means the client cannot be reached)
            if self._watch is done and task is not None and not task.done():
                self._left_uncaught = True
                task.cancel()

        watch.add_done_callback(finished)
        self._watch = watch

    def client_left(self) -> bool:
        """On a ``CancelledError``: whether it is :meth:`watch_client`'s (the client went away), in
        which case the cancellation is withdrawn and the task goes on closing the request."""
        if not self._left_uncaught:
            return False
        self._left_uncaught = False
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return True

    async def next_chunk(self) -> AudioChunk | None:
        """The next chunk, or None at the end. Runtime bugs become a typed :class:`BackendFault`."""
        assert self._stream is not None, "open() first"
        try:
            return await anext(self._stream)
        except StopAsyncIteration:
            return None
        except KokoroError:
            raise
        except Exception as e:
            log.exception("request %s: synthesis failed", self.request_id)
            raise BackendFault(f"synthesis failed: {type(e).__name__}") from e

    async def chunks(self, first: AudioChunk) -> AsyncIterator[AudioChunk]:
        """``first``, then every later chunk as the backend yields it."""
        yield first
        while (chunk := await self.next_chunk()) is not None:
            yield chunk

    # -- encoding -----------------------------------------------------------------------------
    def _costly(self) -> bool:
        enc = self.encoder
        assert enc is not None, "use_encoder() first"
        return enc.format not in _CHEAP_FORMATS or enc.sample_rate != SAMPLE_RATE

    async def encode(self, audio: np.ndarray) -> bytes:
        assert self.encoder is not None, "use_encoder() first"
        if self._costly():
            return await asyncio.to_thread(self.encoder.encode, audio)
        return self.encoder.encode(audio)

    async def flush(self) -> bytes:
        assert self.encoder is not None, "use_encoder() first"
        if self._costly():
            return await asyncio.to_thread(self.encoder.flush)
        return self.encoder.flush()

    async def encoded(self, first: AudioChunk) -> AsyncIterator[bytes]:
        """The encoded bytes of the whole answer, one piece per segment, then the encoder's tail.
        Empty pieces are skipped. The last segment's piece leaves with the tail, as one
        :class:`Final` piece, once the stream has ended (a streamed body ends with it: one write)."""
        held = b""
        async for chunk in self.chunks(first):
            if held:
                yield held
            held = await self.encode(chunk.audio)
            if not chunk.is_last and held:
                yield held
                held = b""
        if data := held + await self.flush():
            yield Final(data)


class Final(bytes):
    """The last piece of an answer's bytes: nothing follows it."""


def retrieve(task: asyncio.Future[Any]) -> None:
    """Done-callback for a task cancelled and left behind: read its outcome so asyncio does not
    log "exception was never retrieved"."""
    if not task.cancelled():
        task.exception()
