"""The sequential backend: one synthesis at a time on one worker thread (the AWS sample's behaviour,
kept as the baseline and as the lowest-latency mode for a single session).

Everything but the scheduling is :class:`~backends.engine.core.Engine`'s: each segment goes through the
engine's single per-segment step (:meth:`~backends.engine.core.Engine.run_segments`,
:mod:`backends.engine.step`), one segment per call, never batched.

Scheduling: each request offers one segment at a time (its next segment becomes runnable as soon as
the previous one is done, before that one's chunk is handed to the reader — so at most one segment
runs ahead of a reader, and the worker's next pick can be the same request's next segment) to a
:class:`~backends.engine.schedule.SegmentQueue`; whenever the worker is free it runs the queue's pick in
the order of the engine's :class:`~backends.engine.policy.SchedulingPolicy` (with ``deadlines`` off: first
in, first out). A listener's first segment that finds the worker busy with a later segment may
interrupt that call (the policy's rule 5); the interrupted segment goes back to the queue with its
own deadline.

Threading: every runtime call runs on a single dedicated worker thread; the queue and the choice
live on the event loop, which only awaits futures.
Admission: at most ``max_queue`` segments wait for or sit in the worker at once, counting the
requests whose first segment is being planned; beyond it, or when the policy refuses a newcomer
under overload (``overload=refuse``), ``prepare()`` raises :class:`~backends.api.Overloaded` (and,
under overload, ``stream()``). ``queue_depth`` (``kokoro_queue_depth``) counts the segments waiting,
not the one running, as in the concurrent mode.
Cancellation: closing/cancelling ``stream()`` stops submitting that request's segments; a segment
that has not started leaves the queue outright; one already running is interrupted where the runtime
can be (``interruptible``, with deadlines on), else it finishes, and its result is discarded. The
request timeout fails the stream with :class:`~backends.api.SynthesisTimeout`. ``aclose()`` fails
every queued segment with :class:`~backends.api.NotReady`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from backends.api import (
    AudioChunk,
    Interrupted,
    KokoroError,
    NotReady,
    Segment,
    SynthesisRequest,
)
from backends.engine.core import Engine
from backends.engine.planning import known_count
from backends.engine.schedule import Entry, Playout, RunningCall
from backends.engine.step import SegmentResult

_Item = tuple[Segment, "asyncio.Future[SegmentResult]", Playout]
log = logging.getLogger("kokoro.backend")


class SequentialBackend(Engine):
    """One synthesis at a time, one chunk per segment as soon as it is ready."""

    mode = "sequential"
    plain_order = "fifo"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kokoro-synth")
        self._waiting = 0
        self._queue = self.policy.new_queue()
        self._running = False
        self._seq = itertools.count()

    @property
    def queue_depth(self) -> int:
        """Segments waiting for the worker (all requests), not counting the one being synthesised
        (the concurrent mode's meaning too)."""
        return len(self._queue)

    def full(self) -> str | None:
        n = self._waiting + self.planning
        return f"{n} requests are waiting; try again shortly" if n >= self.config.max_queue else None

    def table_sizes(self) -> dict[str, int]:
        return {**super().table_sizes(), **self._queue.sizes(), "waiting_segments": self._waiting,
                "worker_busy": int(self._running)}

    async def aclose(self) -> None:
        await super().aclose()
        for entry in self._queue.clear():
            future = entry.item[1]
            if not future.done():
                future.set_exception(NotReady("server is shutting down"))
        self._observer.queue_depth(0)
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _set_waiting(self, n: int) -> None:
        self._waiting = n
        self._observer.queue_depth(len(self._queue))

    async def stream(self, request: SynthesisRequest) -> AsyncIterator[AudioChunk]:
        policy = self.policy
        self.admit(policy.session_of(request), planned=True)
        loop = asyncio.get_running_loop()
        timeout_at = self._timeout_at(request)
        playout = policy.playout(request)
        seq = next(self._seq)
        key = policy.session_of(request)
        with policy.tracked(request, playout):
            outstanding: list[asyncio.Future[SegmentResult]] = []

            def offer(segment: Segment) -> asyncio.Future[SegmentResult]:
                future: asyncio.Future[SegmentResult] = loop.create_future()
                outstanding.append(future)
                self._set_waiting(self._waiting + 1)
                left = len(segment.phonemes) + (request.plan.remaining_phonemes(segment.index)
                                                if request.plan is not None else 0)
                policy.offer(self._queue, (segment, future, playout), segment, playout, session=key,
                             request_seq=seq, remaining=left, busy=self._running, interrupts=self.interrupts,
                             turn=request.turn)
                self._observer.queue_depth(len(self._queue))
                self._run_next()
                return future

            def settle(future: asyncio.Future[SegmentResult]) -> None:
                outstanding.remove(future)
                self._queue.remove(partial(_holds, future))
                self._set_waiting(self._waiting - 1)
                if future.cancel() or future.cancelled():  # closed mid-call (cancel, barge-in): stop it
                    policy.abandon(partial(_holds, future))

            try:
                segment: Segment | None = request.segments[0]
                future = offer(request.segments[0])
                while segment is not None:
                    try:
                        result = await self._until(timeout_at, future)
                    except KokoroError:
                        raise
                    except Exception as e:  # e.g. the worker was shut down by aclose()
                        raise self._as_error(e, request) from e
                    finally:
                        settle(future)
                    if result.error is not None:
                        raise self._as_error(result.error, request) from result.error
                    policy.segment_ready(playout, result.audio, request)
                    index = segment.index + 1
                    following = request.segments[index] if index < len(request.segments) else None
                    if following is not None:
                        # Offered before this chunk is handed on, so the worker's next pick can be it
                        # (a short request is not kept waiting behind another session's segment
                        # while its chunk is being sent); at most one segment ahead of the reader.
                        future = offer(following)
                    yield self._chunk(segment, known_count(request), result)
                    if following is None:  # not planned yet (or the end): this chunk never waits for it
                        following = await self.next_segment(request, index, timeout_at)
                        if following is not None:
                            future = offer(following)
                    segment = following
            finally:
                if request.plan is not None:
                    request.plan.close()
                for pending in list(outstanding):
                    settle(pending)

    def _run_next(self) -> None:
        """Hand the queue's pick to the worker when it is free (event loop)."""
        if self._running or self._closing:
            return
        entry = self._queue.pop()
        if entry is None:
            return
        segment, future, playout = entry.item
        call: RunningCall | None = None
        try:
            self._observer.queue_depth(len(self._queue))
            interruptible = self.interrupts
            call = self.policy.call_started(entry, playout, segment, "solo", interruptible=interruptible)
            run = partial(self.run_segments, interrupt=call.interrupt if interruptible else None)
            work = asyncio.get_running_loop().run_in_executor(self._executor, run, [segment])
        except Exception as e:  # the executor is shut down, or a bug: fail this one, the queue goes on
            if not self._closing:
                log.error("starting a runtime call failed", exc_info=e)
            if call is not None:
                self.policy.call_ended(call)
            if not future.done():
                future.set_exception(e)
            asyncio.get_running_loop().call_soon(self._run_next)
            return
        self._running = True
        work.add_done_callback(partial(self._done, entry, call))

    def _done(self, entry: Entry, call: RunningCall, work: asyncio.Future[Any]) -> None:
        self._running = False
        self.policy.call_ended(call)
        future = entry.item[1]
        if future.done():
            pass  # the stream was cancelled or timed out: the result is discarded
        elif work.cancelled():
            future.set_exception(NotReady("server is shutting down"))
        elif work.exception() is not None:
            future.set_exception(work.exception())
        elif isinstance(work.result()[0].error, Interrupted):
            self._queue.requeue(entry)  # interrupted for a newcomer's first segment: runs again after it
            self._observer.queue_depth(len(self._queue))
        else:
            future.set_result(work.result()[0])
        # Deferred: the stream whose segment this was wakes first and offers its next one, so the
        # pick below can take it.
        asyncio.get_running_loop().call_soon(self._run_next)


def _holds(future: asyncio.Future[SegmentResult], item: Any) -> bool:
    """Whether a queue entry's item, ``(segment, future, playout)``, is the one of ``future``."""
    return item[1] is future
