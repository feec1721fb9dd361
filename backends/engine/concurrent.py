"""The concurrent backend: one scheduler over every session, forming micro-batches (docs/runtimes.md).

Shape (vLLM's per-request collectors fed by one background loop; LitServe's batch filling):

* ``stream(request)`` admits the request (or raises :class:`Overloaded`), registers a *job* with a
  per-request collector (an ``asyncio.Queue``) and yields from it, one :class:`AudioChunk` per
  segment, in text order.
* Each job offers the scheduler **one segment at a time**: segment ``i + 1`` becomes ready only when
  segment ``i`` is synthesised, and only while fewer than ``max_ahead`` of its chunks wait unread in
  the collector (back-pressure against slow readers). So a batch never holds two segments of one
  request, a request's short first segment never waits behind its own long second one, and a long
  text cannot crowd out a short one.
* One background task (on the event loop; it does no inference) forms batches: when a worker slot is
  free and segments are ready, it waits up to ``max_wait_ms`` for the batch to fill to
  ``max_batch_size`` (when a batch ends and a queued segment must start now — a listener's first,
  or a later one due — the next one starts at once from what queued meanwhile: the runtime does not
  idle between batches under load), then takes segments from a :class:`~backends.engine.schedule.SegmentQueue` in the
  order of the engine's :class:`~backends.engine.policy.SchedulingPolicy` (with ``deadlines`` off:
  round-robin across sessions, ``request.session`` falling back to ``request_id``), and hands them
  to a worker thread. Which segments fill a batch, when a free worker is held for urgent work, when
  a call runs solo and when a running call is interrupted are the policy's rules too (6, 7, 8, 5).
* Runtimes with a batch path (``capabilities.batch``, e.g. torch on CUDA) get one worker and
  whole batches. Others fall back to per-segment calls: one segment per worker
  call, so the scheduler decides with the freshest queue at every step; a ``thread_safe`` runtime
  (ONNX) gets ``workers`` parallel calls (default: 2 on a machine with 2+ cores) and, when it has
  not been loaded yet and no thread count was chosen, ``cpu_count // workers`` intra-op threads per
  call (measured here: one intra-op thread costs ~0.5 CPU-s per audio-s, two cost ~0.75, so two
  1-thread calls out-run one 2-thread call; ``benchmarks/concurrent_probe.py``). A call the policy
  lets run alone runs with ``solo=True`` when the runtime has ``solo_calls`` (ONNX: a second
  session with every core), so one listener never gets less than the sequential mode gives it.
  The worker count and thread shares, the per-request job and the queued item are
  :mod:`backends.engine.jobs`.
* A batch runtime on a CPU device (``capabilities.device == "cpu"``) gets single calls too unless
  ``batch_on_cpu``: measured here, torch's batched forward on CPU costs 1.3x the CPU time of the
  same segments one by one at equal lengths and ~2x with padding, and it made first audio wait.
* Each batch goes through the engine's single per-segment step
  (:meth:`~backends.engine.core.Engine.run_segments`, :mod:`backends.engine.step`), as the sequential mode's segments do: the
  runtime's frame durations kept (word timings work in both modes), audio clipped, and a failed
  batch retried one segment at a time, so one bad segment fails only its own request
  (:class:`BackendFault`). The loop is a :class:`~backends.engine.watch.WatchedTask`: should it fail
  (a bug in its own code; runtime calls cannot reach it), the error is logged with its traceback,
  every admitted request fails at once with :class:`BackendFault` and the loop starts again; after
  three failures within a minute it stays down and ``check_health`` fails (``/ping`` 503). A
  completion step that raises fails only the requests of that call.

Admission: ``max_queue`` bounds the requests admitted at once (being planned, answered or waiting). Each
admitted request holds at most one queued segment and ``max_ahead`` unread chunks, so memory is
bounded. Beyond it, or when the policy refuses a newcomer under overload (``overload=refuse``),
``prepare()`` raises :class:`Overloaded` (503 / ``overloaded`` error event; under overload,
``stream()`` too).

Threading: all scheduler state lives on the event loop; worker threads only run the synthesizer and
call the observer's ``segment_done`` / ``batch_done`` (``queue_depth`` is called from the loop).
For a batch, ``segment_done`` gets each segment's share of the call's time (the runtime cost) and
``AudioChunk.synth_seconds`` the whole call's time (what that segment waited for).
Cancellation: closing or cancelling ``stream()``, or the request timeout, drops the job: its queued
segment leaves the queue at once and its later segments are never synthesised; a single call of
its segment already running is interrupted where the runtime can be (the policy's rule 5), a
segment inside a running batch finishes; either way the result is discarded. ``aclose()`` fails every open stream with
:class:`NotReady`, drops the queue and stops the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from backends.api import (
    AudioChunk,
    BackendFault,
    Interrupted,
    NotReady,
    SynthesisRequest,
)
from backends.engine.core import Engine
from backends.engine.jobs import Item, Job, segment_of, tokens, tune_threads, worker_count
from backends.engine.planning import known_count
from backends.engine.schedule import Entry, RunningCall
from backends.engine.step import SegmentResult
from backends.engine.watch import WatchedTask

log = logging.getLogger("kokoro.backend")


class ConcurrentBackend(Engine):
    """Cross-session micro-batching scheduler (mode ``concurrent``)."""

    mode = "concurrent"
    plain_order = "round_robin"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        config = self.config
        self.max_batch_size = config.max_batch_size
        self.max_wait_s = config.max_wait_ms / 1000.0
        self.max_ahead = config.max_ahead
        self.batch_on_cpu = config.batch_on_cpu
        self.workers = worker_count(config, self.runtime_capabilities)
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="kokoro-batch")
        self._free = self.workers
        self._queue = self.policy.new_queue()
        self._queued = 0
        self._jobs: set[Job] = set()
        self._seq = itertools.count()
        self._wake: asyncio.Event | None = None
        self.scheduler = WatchedTask("the batch scheduler", self._schedule, on_failure=self._fail_all)

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def batched(self) -> bool:
        """Whether whole batches go to ``synthesize_batch``: when the runtime has it, except on a
        CPU device (a batched forward there costs more CPU per audio second than single calls and
        pads short segments to long ones; see the module docstring) unless ``batch_on_cpu``."""
        if not self.has_batch_path:
            return False
        return self.batch_on_cpu or self.runtime_capabilities.device != "cpu"

    @property
    def parallel_calls(self) -> bool:
        return self.workers > 1 and not self.batched

    @property
    def queue_depth(self) -> int:
        """Segments ready and waiting for a worker (not counting those being synthesised)."""
        return self._queued

    @property
    def active_requests(self) -> int:
        """Requests admitted and not yet finished, not counting those being planned (``max_queue``
        bounds both together)."""
        return len(self._jobs)

    async def start(self) -> None:
        tune_threads(self.synthesizer, self.config, self.workers)
        await super().start()

    async def aclose(self) -> None:
        self._closing = True
        for job in list(self._jobs):
            self._drop(job)
            job.outbox.put_nowait(NotReady("server is shutting down"))
        self._queue.clear()
        self._set_queued(0)
        self.scheduler.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)
        await super().aclose()

    async def check_health(self) -> None:
        await super().check_health()
        if self.scheduler.down is not None:
            raise NotReady(f"{self.scheduler.down}: replace this instance")

    def full(self) -> str | None:
        n = len(self._jobs) + self.planning
        return f"{n} requests are in progress; try again shortly" if n >= self.config.max_queue else None

    def table_sizes(self) -> dict[str, int]:
        return {**super().table_sizes(), **self._queue.sizes(), "queued_segments": self._queued,
                "admitted_requests": len(self._jobs), "busy_workers": self.workers - self._free}

    def _ensure_loop(self) -> None:
        if self.scheduler.down is not None:
            raise BackendFault(self.scheduler.down)
        if not self.scheduler.running:
            self._wake = asyncio.Event()
            self.scheduler.ensure()

    def _fail_all(self, error: BaseException) -> None:
        """The scheduler failed: every admitted request fails now (typed), the queue is emptied."""
        fault = BackendFault(f"the batch scheduler failed: {type(error).__name__}: {error}")
        for job in list(self._jobs):
            self._drop(job)
            job.outbox.put_nowait(fault)
        self._queue.clear()
        self._set_queued(0)
        self._wake = asyncio.Event()  # the restarted loop's

    # -- requests -------------------------------------------------------------------------------
    async def stream(self, request: SynthesisRequest) -> AsyncIterator[AudioChunk]:
        """Yield one chunk per segment of a prepared request, in order (see the module docstring
        for admission, ordering and cancellation)."""
        policy = self.policy
        self.admit(policy.session_of(request), planned=True)
        seq = next(self._seq)
        job = Job(request=request, key=policy.session_of(request), seq=seq, pending=deque(request.segments),
                   playout=policy.playout(request), planned=len(request.segments))
        if request.plan is not None:  # segments planned from now on join the job's pending ones
            request.plan.listen(partial(self._planned, job))
        self._jobs.add(job)
        deadline = self._timeout_at(request)
        with policy.tracked(request, job.playout):
            try:
                self._ensure_loop()
                index = 0
                while True:
                    self._submit_next(job)
                    out = await self._until(deadline, job.outbox.get())
                    if isinstance(out, BaseException):
                        raise out
                    self._submit_next(job)  # room in the collector again: let it run ahead
                    out.count = known_count(request)
                    yield out
                    # (its later segments join as they are planned: _planned)
                    if await self.next_segment(request, index + 1, deadline) is None:
                        break
                    index += 1
            finally:
                if request.plan is not None:
                    request.plan.close()
                self._drop(job)

    def _planned(self, job: Job) -> None:
        """The planner read more of the job's text: its new segments wait their turn."""
        if job.cancelled:
            return
        segments = job.request.segments
        job.pending.extend(segments[job.planned:])
        job.planned = len(segments)
        self._submit_next(job)

    def _submit_next(self, job: Job) -> None:
        if job.busy or job.cancelled or not job.pending or job.outbox.qsize() >= self.max_ahead:
            return
        job.busy = True
        segment = job.pending.popleft()
        if job.request.plan is not None:
            job.request.plan.want(segment.index + 1)
        self._enqueue(Item(job, segment))

    def _enqueue(self, item: Item, entry: Entry | None = None) -> None:
        """Queue a job's segment (``entry``: one taken before, whose call was interrupted)."""
        job = item.job
        if entry is not None:
            self._queue.requeue(entry)
        else:
            plan = job.request.plan
            later = plan.remaining_phonemes(item.segment.index) if plan is not None else sum(
                len(s.phonemes) for s in job.pending)
            left = len(item.segment.phonemes) + later
            self.policy.offer(self._queue, item, item.segment, job.playout, session=job.key, request_seq=job.seq,
                              remaining=left, busy=not self._free, interrupts=self.interrupts, turn=job.request.turn)
        self._set_queued(self._queued + 1)
        if self._wake is not None:
            self._wake.set()

    def _drop(self, job: Job) -> None:
        """Forget a finished, failed or abandoned job; its queued segment leaves the queue now."""
        if job.cancelled:
            return
        job.cancelled = True
        job.pending.clear()
        self._jobs.discard(job)
        if not job.busy:  # nothing of it queued or in a call (the common end): no scan of either
            return
        dropped = self._queue.remove(lambda it: it.job is job)
        if dropped:
            self._set_queued(self._queued - dropped)
        self.policy.abandon(lambda it: it.job is job)  # closed mid-call (cancel, barge-in): stop that call

    def _set_queued(self, n: int) -> None:
        self._queued = n
        self._observer.queue_depth(n)

    # -- the scheduler loop ---------------------------------------------------------------------
    async def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        while True:
            while not (self._queued and self._free):
                self._wake.clear()
                await self._wake.wait()
            hold = self.policy.hold_s(self._queue, segment_of, free=self._free, workers=self.workers)
            if hold > 0:  # rule 6: everything queued has slack and a call is running: keep this worker
                await self._nap(hold)
                continue
            if self.batched and self._queued < self.max_batch_size and self.max_wait_s > 0:
                await self._fill(loop)  # LitServe's collate: up to a size or a timeout
            self._start(loop)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take the next call's segments in the policy's order, if any, and launch it."""
        if entries := self._take(self.max_batch_size if self.batched else 1):
            solo = self.policy.runs_alone(self._queue, segment_of, taken=len(entries), free=self._free,
                                          workers=self.workers)  # rule 7
            self._launch(loop, entries, solo=solo)

    def _start_next_batch(self) -> None:
        """As a batch ends, launch the next one at once when a queued segment must start now (a
        listener's first, or a later one due) or a full batch waits: they waited through the whole
        call, and the runtime would idle until the scheduler's next turn on a busy loop. Segments
        with time to spare keep the collate wait (a newcomer may join their batch)."""
        if not (self.batched and self._queued and self._free):
            return
        full = self._queued >= self.max_batch_size
        if (full or self.policy.must_start(self._queue, segment_of)) and not self.policy.hold_s(
                self._queue, segment_of, free=self._free, workers=self.workers):
            self._start(asyncio.get_running_loop())

    def _launch(self, loop: asyncio.AbstractEventLoop, entries: list[Entry], *, solo: bool) -> None:
        """Hand the entries' segments to a worker thread (a single call may be interrupted)."""
        items: list[Item] = [e.item for e in entries]
        interruptible = self.interrupts and len(entries) == 1
        kind = self.call_kind(solo) if len(entries) == 1 else "batch"
        call = self.policy.call_started(entries[0], items[0].job.playout, items[0].segment, kind,
                                        interruptible=interruptible)
        self._free -= 1
        try:
            future = loop.run_in_executor(
                self._executor, partial(self.run_segments, solo=solo, interrupt=call.interrupt if interruptible else None),
                [it.segment for it in items], lambda i: items[i].job.cancelled)
            future.add_done_callback(lambda f: self._batch_done(entries, call, f))
        except Exception as e:  # e.g. the executor is shut down: fail these, the loop goes on
            self._free += 1
            self.policy.call_ended(call)
            self._finish(entries, [SegmentResult(error=e)] * len(items))

    async def _nap(self, seconds: float) -> None:
        """Sleep until ``seconds`` pass or the queue or the workers change."""
        assert self._wake is not None
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    async def _fill(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._wake is not None
        deadline = loop.time() + self.max_wait_s
        while self._queued < self.max_batch_size:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._wake.clear()
            try:
                async with asyncio.timeout(remaining):
                    await self._wake.wait()
            except TimeoutError:
                return

    def _take(self, n: int) -> list[Entry]:
        """Up to ``n`` ready segments in the policy's order; beyond the head, only those that fit
        the batch (the policy's rule 8). A segment passed over keeps its place."""

        def fits(taken: list[Entry], entry: Entry) -> bool:
            return self.policy.fits(taken, entry, tokens)

        taken = self._queue.take(n, fits)
        if taken:
            self._set_queued(self._queued - len(taken))
        return taken

    def _batch_done(self, entries: list[Entry], call: RunningCall, future: asyncio.Future[Any]) -> None:
        self._free += 1
        self.policy.call_ended(call)
        if future.cancelled():
            results = [SegmentResult(error=NotReady("server is shutting down"))] * len(entries)
        elif future.exception() is not None:
            results = [SegmentResult(error=future.exception())] * len(entries)
        else:
            results = future.result()
        self._finish(entries, results)  # (the requests' next segments are queued here)
        self._start_next_batch()

    def _finish(self, entries: list[Entry], results: Sequence[SegmentResult]) -> None:
        for entry, result in zip(entries, results, strict=True):
            job = entry.item.job
            try:
                self._finish_one(entry, result)
            except Exception as e:  # a bug here fails this request, never leaves it waiting
                log.error("request %s: handing its segment over failed", job.request.request_id, exc_info=e)
                if not job.cancelled:
                    self._drop(job)
                    job.outbox.put_nowait(BackendFault(f"synthesis failed: {type(e).__name__}: {e}"))
        if self._wake is not None:
            self._wake.set()

    def _finish_one(self, entry: Entry, result: SegmentResult) -> None:
        item: Item = entry.item
        job = item.job
        if job.cancelled:
            job.busy = False
            return
        if isinstance(result.error, Interrupted):  # for a newcomer's first segment: runs again after it
            self._enqueue(item, entry)
            return
        job.busy = False
        if result.error is not None:
            job.outbox.put_nowait(self._as_error(result.error, job.request))
            job.pending.clear()
            return
        self.policy.segment_ready(job.playout, result.audio, job.request)
        job.outbox.put_nowait(self._chunk(item.segment, len(job.request.segments), result))
        self._submit_next(job)

