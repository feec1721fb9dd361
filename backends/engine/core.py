"""The engine both scheduling modes share: lifecycle, planning, playback deadlines, and the single
per-segment step (docs/runtimes.md).

:class:`Engine` holds what does not depend on scheduling — loading and warming up the runtime,
health (including a watchdog over stuck runtime calls), validating and planning a request,
the request timeout, the description (:class:`~backends.api.BackendInfo`), voices and G2P — and
:meth:`Engine.run_segments`, the one function that turns segments into audio for both modes.
:class:`~backends.engine.sequential.SequentialBackend` and :class:`~backends.engine.concurrent.ConcurrentBackend`
add only their scheduling (``stream``, ``queue_depth``, ``batched``).

What the runtime can do is its declared :class:`~backends.api.Capabilities`
(``synthesizer.capabilities``); the engine and the modes read them and never probe the runtime.

What runs next — playback deadlines, short first segments, the order, overload, interruption,
holding a worker, solo calls, batches, and the cost of a call — is the engine's
:class:`~backends.engine.policy.SchedulingPolicy` (``engine.policy``); the modes ask it and keep only the
mechanics (queues, workers, futures).

The step, for a list of segments (one runtime call's worth):

* the batch path when the mode batches (:attr:`Engine.batched`) and there is more than one
  segment: ``synthesize_batch_timed`` when the runtime is ``timed``, else ``synthesize_batch``;
  if that call fails, returns the wrong count or an empty item, each segment is retried alone,
  so one bad segment fails only its own request;
* alone: ``synthesize_timed`` when the runtime is ``timed`` (torch; ONNX with a timed model), else
  ``synthesize`` (``solo=True``, every core, when the mode says the call runs alone and the runtime
  has ``solo_calls``);
* every output clipped to [-1, 1] (:func:`~backends.api.clip_audio`); empty audio is a
  :class:`~backends.api.BackendFault` (a segment with phonemes always has sound);
* every output's ends shaped (``join_pauses``, :mod:`backends.engine.joins`): the model's padding
  trimmed, the pause a reading of the whole text makes at the segment's end put back, the
  runtime's durations shifted with the audio, so word timings follow the audio that is sent;
* the observer hears of every runtime call (``batch_done``, size 1 for a single call) and of every
  segment (``segment_done`` with its share of the call's time).

Threading: ``run_segments`` runs on a worker thread (never the event loop) and never raises: each
:class:`SegmentResult` holds audio or the error for its segment. Every runtime call in it is
registered with the watchdog, so ``check_health`` fails while one call has run longer than the
request timeout. Everything else is called on the event loop; planning (G2P) and loading run on
the engine's own single preparation thread. The observer is called from worker threads
(``segment_done``, ``batch_done``, ``interrupted``) and from the event loop (``queue_depth``,
``underrun``).

Cancellation: ``run_segments`` takes an optional ``skip(i)`` that it asks before each single call,
so segments of a request dropped while a failed batch is being retried are never synthesised, and
an optional :class:`~backends.api.Interrupt` that an ``interruptible`` runtime stops its call for
(the segment's result is then :class:`~backends.api.Interrupted`, and the mode queues it again).
The modes stop submitting a cancelled request's segments; ``aclose()`` refuses new work and
releases the threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from backends.api import (
    AudioChunk,
    BackendCapabilities,
    BackendFault,
    BackendInfo,
    BackendObserver,
    Capabilities,
    Interrupt,
    Interrupted,
    KokoroError,
    NoObserver,
    NotReady,
    Segment,
    SynthesisRequest,
    SynthesisTimeout,
    Synthesizer,
    TextTooLong,
    clip_audio,
)
from backends.assets.voices import VoiceStore
from backends.config import BackendConfig
from backends.engine.joins import shape_segment
from backends.engine.policy import CallKind, SchedulingPolicy, input_tokens
from backends.text.lang import resolve_lang, voice_language
from backends.text.planner import TextPipeline

log = logging.getLogger("kokoro.backend")
WARMUP_TEXT = "Warming up."


@dataclass(slots=True)
class SegmentResult:
    """One segment's outcome: audio (clipped) and the runtime's frame durations, or an error.

    ``seconds`` is the wall time of the runtime call that produced it (for a batch, the whole
    call: what the segment waited for)."""

    audio: np.ndarray | None = None
    durations: np.ndarray | None = None
    seconds: float = 0.0
    error: BaseException | None = None


class Engine:
    """The shared lifecycle and the single per-segment step (see the module docstring).

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
        self._prep_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kokoro-prep")
        self._calls: dict[int, float] = {}  # worker thread -> when its runtime call began
        self.policy = SchedulingPolicy(self.config, plain_order=self.plain_order, sample_rate=synthesizer.sample_rate,
                                       observer=self._observer, clock=clock)

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

    def phonemize(self, text: str, lang: str) -> str:
        return self.pipeline.phonemes(text, lang)

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._ready and not self._closing

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # The default language's G2P front end (misaki's tagger: a few seconds) loads beside the model.
        await asyncio.gather(loop.run_in_executor(self._prep_executor, self.synthesizer.load),
                             asyncio.to_thread(self.pipeline.preload, self.config.default_lang))
        warm = await self.prepare(SynthesisRequest(text=WARMUP_TEXT, request_id="warmup"))
        async for _ in self.stream(warm):
            pass
        self._ready = True
        fields = self.info.describe()  # JSON lines carry them as fields (backends.logs)
        log.info("backend ready: %s", " ".join(f"{k}={v}" for k, v in fields.items()), extra=fields)

    async def aclose(self) -> None:
        self._closing = True
        self._prep_executor.shutdown(wait=False, cancel_futures=True)

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
        started = list(self._calls.values())  # a C-level copy: safe against worker threads
        timeout = self.config.request_timeout_s
        if not started or not timeout:
            return None
        age = time.monotonic() - min(started)
        return age if age > timeout else None

    def stream(self, request: SynthesisRequest) -> AsyncIterator[AudioChunk]:
        """One chunk per segment, in order: each mode schedules the segments its own way."""
        raise NotImplementedError

    # -- requests -------------------------------------------------------------------------------
    def _plan(self, request: SynthesisRequest, short: bool = False) -> SynthesisRequest:
        voice = self.voices.resolve(request.voice)  # raises UnknownVoice / InvalidRequest
        fast = self.config.fast_first_segment if request.fast_first is None else request.fast_first
        request.voice = voice
        request.lang = resolve_lang(request.text, request.lang, voice_language(voice), self.config.default_lang)
        request.segments = self.pipeline.plan(
            request.text, voice=voice, speed=request.speed, lang=request.lang, fast_first=fast,
            short_first_words=self.config.short_first_segment_words if short else None,
            windowed=self.config.windowed_first_segment and self.synthesizer.capabilities.windowed,
        )
        return request

    async def prepare(self, request: SynthesisRequest) -> SynthesisRequest:
        """Validate and plan ``request`` off the event loop. Raises a :class:`KokoroError`."""
        if self._closing:
            raise NotReady("server is shutting down")
        limit = self.config.max_text_chars
        if len(request.text) > limit:
            raise TextTooLong(f"text has {len(request.text)} characters; the limit is {limit}")
        loop = asyncio.get_running_loop()
        short = self.policy.short_first(request)  # (before this request counts as its session's own)
        with self.policy.tracked(request):
            return await loop.run_in_executor(self._prep_executor, self._plan, request, short)

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
        )

    # -- the per-segment step (worker threads) --------------------------------------------------
    def run_segments(
        self, segments: Sequence[Segment], skip: Callable[[int], bool] | None = None, *, solo: bool = False,
        interrupt: Interrupt | None = None,
    ) -> list[SegmentResult]:
        """Synthesise ``segments`` (worker thread; never raises): one batch call when the mode
        batches, else (or when the batch fails) one call per segment. ``skip(i)`` is asked before
        each single call; a skipped segment gets a :class:`NotReady` error. ``solo``: the call runs
        alone, so a runtime with ``solo_calls`` gives it every core. ``interrupt`` (single calls of
        an ``interruptible`` runtime): set, it stops the call (:class:`Interrupted`)."""
        if self.batched and len(segments) > 1:
            results = self._run_batch(segments)
            if results is not None:
                return results
        return [
            SegmentResult(error=NotReady("request cancelled")) if skip is not None and skip(i)
            else self._run_one(seg, solo, interrupt)
            for i, seg in enumerate(segments)
        ]

    def _run_batch(self, segments: Sequence[Segment]) -> list[SegmentResult] | None:
        """One batch call; None when it failed in any way (the caller retries one by one)."""
        t0 = self.clock()
        timed = self.runtime_capabilities.timed
        try:
            outs: Sequence[Any]
            if timed:
                outs = self._call(self.synthesizer.synthesize_batch_timed, list(segments))
            else:
                outs = self._call(self.synthesizer.synthesize_batch, list(segments))
            if len(outs) != len(segments):
                raise BackendFault(f"the batch call returned {len(outs)} outputs for {len(segments)} segments")
            pairs = [self._joined(s, clip_audio(o[0]), o[1]) if timed else self._joined(s, clip_audio(o), None)
                     for s, o in zip(segments, outs, strict=True)]
            if any(audio.size == 0 for audio, _ in pairs):  # retried one by one: only that segment fails
                raise BackendFault("the runtime produced no audio for a segment")
        except Exception as e:
            log.warning("batch of %d failed (%r); retrying its segments one by one", len(segments), e)
            return None
        elapsed = self.clock() - t0
        self.policy.cost.measured("batch", elapsed, sum(input_tokens(s) for s in segments), len(segments))
        self._observer.batch_done(len(segments))
        for audio, _ in pairs:  # each segment's share of the runtime's time
            self._observer.segment_done(elapsed / len(segments), len(audio) / self.synthesizer.sample_rate)
        return [SegmentResult(audio, durations, elapsed) for audio, durations in pairs]

    def _run_one(self, segment: Segment, solo: bool = False, interrupt: Interrupt | None = None) -> SegmentResult:
        t0 = self.clock()
        caps = self.runtime_capabilities
        options = {"solo": solo and caps.solo_calls, "interrupt": interrupt if caps.interruptible else None}
        try:
            durations = None
            if caps.timed:  # per-token frame durations come from the same run, at no extra cost
                audio, durations = self._call(self.synthesizer.synthesize_timed, segment, **options)
            else:
                audio = self._call(self.synthesizer.synthesize, segment, **options)
            audio = clip_audio(audio)
            if audio.size == 0:  # a segment with phonemes always has sound: never pass silence as success
                raise BackendFault(f"the runtime produced no audio for segment {segment.index}")
            audio, durations = self._joined(segment, audio, durations)
        except Exception as e:
            if isinstance(e, Interrupted):
                self._observer.interrupted(self.clock() - t0)
            return SegmentResult(seconds=self.clock() - t0, error=e)
        elapsed = self.clock() - t0
        self.policy.cost.measured(self.call_kind(solo and caps.solo_calls), elapsed, input_tokens(segment),
                                  windowed=segment.sentence is not None)
        self._observer.batch_done(1)
        self._observer.segment_done(elapsed, len(audio) / self.synthesizer.sample_rate)
        return SegmentResult(audio, durations, elapsed)

    def _joined(
        self, segment: Segment, audio: np.ndarray, durations: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The one place a segment's ends are shaped (:mod:`backends.engine.joins`): padding trimmed, the
        reading's pause after it, its durations shifted with the audio."""
        if not self.config.join_pauses:
            return audio, durations
        return shape_segment(segment, audio, durations)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One runtime call, where :meth:`stuck_seconds` can see it."""
        with self._watch():
            return fn(*args, **kwargs)

    @contextlib.contextmanager
    def _watch(self) -> Iterator[None]:
        key = threading.get_ident()
        self._calls[key] = time.monotonic()
        try:
            yield
        finally:
            self._calls.pop(key, None)
