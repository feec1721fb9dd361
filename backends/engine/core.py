"""The engine both scheduling modes share: lifecycle, planning, playback deadlines and the
description (docs/runtimes.md).

:class:`Engine` holds what does not depend on scheduling — loading and warming up the runtime,
health (including a watchdog over stuck runtime calls), validating and planning a request,
the request timeout, the description (:class:`~backends.api.BackendInfo`), voices and G2P — and
owns the single per-segment step both modes run (:class:`~backends.engine.step.SegmentStep`,
behind :meth:`Engine.run_segments`).
:class:`~backends.engine.sequential.SequentialBackend` and :class:`~backends.engine.concurrent.ConcurrentBackend`
add only their scheduling (``stream``, ``queue_depth``, ``batched``).

What the runtime can do is its declared :class:`~backends.api.Capabilities`
(``synthesizer.capabilities``); the engine and the modes read them and never probe the runtime.

What runs next — playback deadlines, short first segments, the order, overload, interruption,
holding a worker, solo calls, batches, and the cost of a call — is the engine's
:class:`~backends.engine.policy.SchedulingPolicy` (``engine.policy``); the modes ask it and keep only the
mechanics (queues, workers, futures).

Threading: ``run_segments`` runs on a worker thread (never the event loop) and never raises
(:mod:`backends.engine.step`); ``check_health`` fails while one runtime call has run longer than
the request timeout. Everything else is called on the event loop; loading and first segments run
on a preparation pool, the rest of each text on a planning pool (:mod:`backends.engine.planning`).
The observer is called from worker threads (``segment_done``, ``batch_done``, ``interrupted``) and
from the event loop (``queue_depth``, ``underrun``).

Cancellation: the modes stop submitting a cancelled request's segments (``run_segments``' ``skip``
and ``interrupt``, :mod:`backends.engine.step`); ``aclose()`` refuses new work and releases the
threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from backends.api import (
    AudioChunk,
    BackendCapabilities,
    BackendFault,
    BackendInfo,
    BackendObserver,
    Capabilities,
    Interrupt,
    KokoroError,
    NoObserver,
    NotReady,
    Overloaded,
    Segment,
    SynthesisRequest,
    SynthesisTimeout,
    Synthesizer,
    TextTooLong,
)
from backends.assets.voices import VoiceStore
from backends.config import BackendConfig
from backends.engine.cost import CallKind
from backends.engine.planning import PLAN_THREADS, SegmentFeed, plan_first
from backends.engine.policy import SchedulingPolicy
from backends.engine.step import SegmentResult, SegmentStep
from backends.engine.watch import WatchedTask
from backends.text.planner import TextPipeline

log = logging.getLogger("kokoro.backend")
WARMUP_TEXT = "Warming up."


class Engine:
    """The shared lifecycle, planning and description; the per-segment step is its ``step``
    (see the module docstring).

    ``config`` is the backend's part of the settings (defaults without the environment when
    omitted); ``observer`` receives the backend's measurements (the server's metrics);
    ``model_name`` is the file the runtime loads (default: the synthesizer's ``model_name``);
    ``clock`` is "now" for every scheduling decision, request arrival (``SynthesisRequest.created``)
    and timeout, and the measured cost of a call (``time.perf_counter``; tests inject a virtual
    clock they advance, so which segment runs next never depends on how busy the machine is).
    """

    mode = "engine"
    #: The order segments run in with ``deadlines`` off (the mode's own; see backends.engine.policy).
    plain_order: Literal["fifo", "round_robin"] = "fifo"

    def __init__(
        self,
        synthesizer: Synthesizer,
        pipeline: TextPipeline,
        voices: VoiceStore,
        config: BackendConfig | None = None,
        *,
        observer: BackendObserver | None = None,
        model_name: str = "",
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.config = config if config is not None else BackendConfig.defaults()
        self.clock = clock
        self.synthesizer = synthesizer
        self.pipeline = pipeline
        self.voices = voices
        self.model_name = model_name or synthesizer.model_name
        self._observer: BackendObserver = observer if observer is not None else NoObserver()
        self._ready = False
        self._closing = False
        #: Requests admitted whose first segment is being planned (``max_queue`` counts them too).
        self.planning = 0
        # Loading and first segments on one pool, the rest of the texts on another (planning.py).
        self._prep_executor = ThreadPoolExecutor(max_workers=PLAN_THREADS, thread_name_prefix="kokoro-prep")
        self._plan_executor = ThreadPoolExecutor(max_workers=PLAN_THREADS, thread_name_prefix="kokoro-plan")
        self.policy = SchedulingPolicy(self.config, plain_order=self.plain_order, sample_rate=synthesizer.sample_rate,
                                       observer=self._observer, clock=clock)
        # How late the event loop runs, which overload=refuse counts into a newcomer's wait (real time,
        # whatever ``clock`` is: it measures the loop, not the schedule); nothing waits on the probe.
        self._lag_probe = WatchedTask("the event-loop lag probe", self.policy.loop_lag.probe,
                                      on_failure=lambda _error: None)
        # The mode's batching and call kind are asked per call: the modes override them.
        self.step = SegmentStep(synthesizer, self.config, self.policy.cost, self._observer, clock,
                                batched=lambda: self.batched, call_kind=self.call_kind)

    # -- description ----------------------------------------------------------------------------
    @property
    def runtime(self) -> str:
        return str(self.synthesizer.name)

    @property
    def runtime_capabilities(self) -> Capabilities:
        """What the runtime declares it can do."""
        return self.synthesizer.capabilities

    @property
    def has_batch_path(self) -> bool:
        """Whether the runtime can synthesise several segments in one call."""
        return self.runtime_capabilities.batch

    @property
    def batched(self) -> bool:
        """Whether :meth:`run_segments` sends several segments as one runtime call (the
        concurrent mode decides; the sequential mode never batches)."""
        return False

    @property
    def parallel_calls(self) -> bool:
        """Whether single calls run side by side (each with a share of the cores)."""
        return False

    @property
    def interrupts(self) -> bool:
        """Whether a running single call may be interrupted for first audio (the policy's rule 5)."""
        return self.policy.interrupts(batched=self.batched, interruptible=self.runtime_capabilities.interruptible)

    def call_kind(self, solo: bool) -> CallKind:
        """How a single call runs: alone with every core, or beside other calls."""
        return "shared" if self.parallel_calls and not solo else "solo"

    @property
    def capabilities(self) -> BackendCapabilities:
        return BackendCapabilities(word_timings=self.runtime_capabilities.timed, batching=self.batched)

    @property
    def info(self) -> BackendInfo:
        caps = self.runtime_capabilities
        return BackendInfo(
            runtime=self.runtime, mode=self.mode, model=self.model_name, device=caps.device, dtype=caps.dtype,
            capabilities=self.capabilities,
        )

    @property
    def queue_depth(self) -> int:
        return 0

    def table_sizes(self) -> dict[str, int]:
        """Entries per table kept per session, request or call (see :class:`~backends.api.Backend`);
        the modes add their queues."""
        return {"runtime_calls": self.step.running_calls, "planning_requests": self.planning,
                **self.policy.table_sizes()}

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._ready and not self._closing

    async def start(self) -> None:
        """Load the runtime and the default language's text front end, warm up with one request, and
        say ready. A runtime already loaded (``synthesizer.loaded``: one handed to
        :func:`~backends.factory.create_backend` after a benchmark used it alone) is not loaded again;
        the warm-up request still runs."""
        loop = asyncio.get_running_loop()
        # The default language's G2P front end (misaki's tagger: a few seconds) loads beside the model.
        loading: list[Awaitable[None]] = [asyncio.to_thread(self.pipeline.preload, self.config.default_lang)]
        if not self.synthesizer.loaded:
            loading.append(loop.run_in_executor(self._prep_executor, self.synthesizer.load))
        await asyncio.gather(*loading)
        warm = await self.prepare(SynthesisRequest(text=WARMUP_TEXT, request_id="warmup"))
        async for _ in self.stream(warm):
            pass
        self._ready = True
        if self.config.overload == "refuse":
            self._lag_probe.ensure()
        fields = self.info.describe()  # JSON lines carry them as fields (backends.logs)
        log.info("backend ready: %s", " ".join(f"{k}={v}" for k, v in fields.items()), extra=fields)

    async def aclose(self) -> None:
        self._closing = True
        self._lag_probe.cancel()
        self._prep_executor.shutdown(wait=False, cancel_futures=True)
        self._plan_executor.shutdown(wait=False, cancel_futures=True)

    async def check_health(self) -> None:
        if not self.ready:
            raise NotReady("model is loading" if not self._closing else "server is shutting down")
        stuck = self.stuck_seconds()
        if stuck is not None:
            raise NotReady(f"one runtime call has been running for {stuck:.0f} s, longer than the request "
                           f"timeout ({self.config.request_timeout_s:g} s): the runtime looks stuck")

    def stuck_seconds(self) -> float | None:
        """How long the oldest runtime call has run, when that is longer than the request timeout
        (a hung runtime fails every request by timeout; /ping must then stop saying healthy)."""
        return self.step.stuck_seconds()

    def stream(self, request: SynthesisRequest) -> AsyncIterator[AudioChunk]:
        """One chunk per segment, in order: each mode schedules the segments its own way."""
        raise NotImplementedError

    # -- requests -------------------------------------------------------------------------------
    def full(self) -> str | None:
        """Why the mode's queue takes no more requests now (``max_queue``: the requests it holds and
        those being planned for it), or None: the modes say."""
        return None

    def admit(self, session: str | None = None, *, planned: bool = False) -> None:
        """Refuse a new request of ``session`` now, as :meth:`prepare` and :meth:`stream` would:
        shutting down, the queue full, or the policy's rule 10 (see :class:`~backends.api.Backend`).
        ``planned``: asked again as the request's stream starts, its first segment planned — by
        :meth:`prepare`, which counted it against ``max_queue`` (a newcomer admitted in between may
        have taken the place it leaves for a moment), or whole by its caller (the warm-up, a tool in
        process) — so only shutting down and the policy refuse it."""
        if self._closing:
            raise NotReady("server is shutting down")
        if not planned and (why := self.full()) is not None:
            raise Overloaded(why)
        self.policy.admit(session, planned=planned)

    async def prepare(self, request: SynthesisRequest) -> SynthesisRequest:
        """Validate the request and plan its first segment off the event loop; the rest is planned
        behind it (``request.plan``), so first audio never waits for it. Raises a :class:`KokoroError`;
        a request the mode would refuse (:meth:`admit`) is refused before its text is read."""
        if self._closing:
            raise NotReady("server is shutting down")
        limit = self.config.max_text_chars
        if len(request.text) > limit:
            raise TextTooLong(f"text has {len(request.text)} characters; the limit is {limit}")
        self.admit(self.policy.session_of(request))
        loop = asyncio.get_running_loop()
        short = self.policy.short_first(request)  # (before this request counts as its session's own)
        self.planning += 1
        try:
            with self.policy.tracked(request):
                windowed = self.config.windowed_first_segment and self.synthesizer.capabilities.windowed
                rest = await loop.run_in_executor(self._prep_executor, plan_first, request, self.pipeline,
                                                  self.voices, self.config, short, windowed)
        finally:
            self.planning -= 1
        request.plan = SegmentFeed(request.segments, rest, self._plan_executor, text_chars=len(request.text))
        request.plan.want(1)  # the next ones are planned while the first is synthesised
        return request

    async def next_segment(self, request: SynthesisRequest, index: int, deadline: float | None) -> Segment | None:
        """Segment ``index`` of a prepared request (planned by now, as a rule), or None after its
        last; by the request's ``deadline``. Raises the planner's error as the client's."""
        if request.plan is None:  # planned whole by the caller
            return request.segments[index] if index < len(request.segments) else None
        try:
            segment: Segment | None = await self._until(deadline, request.plan.get(index))
        except Exception as e:
            raise self._as_error(e, request) from e
        return segment

    def _timeout_at(self, request: SynthesisRequest) -> float | None:
        timeout = self.config.request_timeout_s
        return None if not timeout else request.created + timeout

    async def _until(self, deadline: float | None, awaitable: Any) -> Any:
        if deadline is None:
            return await awaitable
        remaining = deadline - self.clock()
        try:
            async with asyncio.timeout(max(remaining, 0.001)):
                return await awaitable
        except TimeoutError:
            raise SynthesisTimeout("synthesis took longer than the request timeout") from None

    def _as_error(self, exc: BaseException, request: SynthesisRequest) -> KokoroError:
        """What the client is told about a failed segment."""
        if self._closing:
            return NotReady("server is shutting down")
        if isinstance(exc, KokoroError):
            return exc
        log.error("synthesis failed for request %s: %r", request.request_id, exc, exc_info=exc)
        return BackendFault(f"synthesis failed: {type(exc).__name__}: {exc}")

    @staticmethod
    def _chunk(segment: Segment, count: int, result: SegmentResult) -> AudioChunk:
        assert result.audio is not None
        return AudioChunk(
            audio=result.audio, index=segment.index, count=count, text=segment.text,
            synth_seconds=result.seconds, phonemes=segment.phonemes, durations=result.durations,
            words=segment.words,
        )

    # -- the per-segment step (worker threads; backends.engine.step) -----------------------------
    def run_segments(
        self, segments: Sequence[Segment], skip: Callable[[int], bool] | None = None, *, solo: bool = False,
        interrupt: Interrupt | None = None,
    ) -> list[SegmentResult]:
        """Synthesise ``segments`` on a worker thread (never raises): :meth:`SegmentStep.run
        <backends.engine.step.SegmentStep.run>` with this mode's batching."""
        return self.step.run(segments, skip, solo=solo, interrupt=interrupt)
