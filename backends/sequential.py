"""The sequential backend: one synthesis at a time on one worker thread (the AWS sample's behaviour,
kept as the baseline and as the lowest-latency mode for a single session).

Everything but the scheduling is :class:`~backends.engine.Engine`'s: each segment goes through the
engine's single per-segment step (:meth:`~backends.engine.Engine.run_segments`), one segment per
call, never batched.

Threading: every runtime call runs on a single dedicated worker thread; the event loop only awaits
futures. Segments of concurrent requests take turns in arrival order (each request submits its next
segment only when the previous one is done, so sessions interleave fairly).
Admission: at most ``max_queue`` segments wait for or sit in the worker at once; beyond it
``stream()`` raises :class:`~backends.base.Overloaded`.
Cancellation: closing/cancelling ``stream()`` stops submitting that request's segments; a segment
that has not started is cancelled outright, one already running finishes and is discarded. The
request timeout fails the stream with :class:`~backends.base.SynthesisTimeout`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .base import AudioChunk, KokoroError, NotReady, Overloaded, SynthesisRequest
from .engine import Engine, SegmentResult


class SequentialBackend(Engine):
    """One synthesis at a time, one chunk per segment as soon as it is ready."""

    mode = "sequential"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kokoro-synth")
        self._waiting = 0

    @property
    def queue_depth(self) -> int:
        """Segments waiting for the worker or being synthesised (all requests)."""
        return self._waiting

    async def aclose(self) -> None:
        await super().aclose()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _set_waiting(self, n: int) -> None:
        self._waiting = n
        self._observer.queue_depth(n)

    async def stream(self, request: SynthesisRequest) -> AsyncIterator[AudioChunk]:
        if self._closing:
            raise NotReady("server is shutting down")
        if self._waiting >= self.config.max_queue:
            raise Overloaded(f"{self._waiting} requests are waiting; try again shortly")
        loop = asyncio.get_running_loop()
        deadline = self._deadline(request)
        count = len(request.segments)
        for segment in request.segments:
            self._set_waiting(self._waiting + 1)
            try:
                future = loop.run_in_executor(self._executor, self.run_segments, [segment])
                result: SegmentResult = (await self._until(deadline, future))[0]
            except KokoroError:
                raise
            except Exception as e:  # e.g. the worker was shut down by aclose()
                raise self._as_error(e, request) from e
            finally:
                self._set_waiting(self._waiting - 1)
            if result.error is not None:
                raise self._as_error(result.error, request) from result.error
            yield self._chunk(segment, count, result)
