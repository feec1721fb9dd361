"""The sequential backend: one synthesis at a time on one worker thread (the AWS sample's behaviour,
kept as the baseline and as the lowest-latency mode for a single session).

Threading: every runtime call runs on a single dedicated worker thread; the event loop only awaits
futures. Segments of concurrent requests take turns in arrival order (each request submits its next
segment only when the previous one is done, so sessions interleave fairly).
Cancellation: closing/cancelling ``stream()`` stops submitting that request's segments; a segment
that has not started is cancelled outright, one already running finishes and is discarded.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .base import (
    AudioChunk,
    BackendFault,
    BackendInfo,
    Capabilities,
    KokoroError,
    NotReady,
    Overloaded,
    Segment,
    SynthesisRequest,
    SynthesisTimeout,
    TextTooLong,
)
from .text import TextPipeline
from .voices import VoiceStore

log = logging.getLogger("kokoro.backend")
WARMUP_TEXT = "Warming up."


class BaseBackend:
    """What every backend shares: loading, warm-up, health, request preparation."""

    mode = "base"

    def __init__(
        self,
        synthesizer: Any,
        pipeline: TextPipeline,
        voices: VoiceStore,
        *,
        default_lang: str = "en-us",
        fast_first_segment: bool = True,
        max_text_chars: int = 5000,
        max_queue: int = 256,
        request_timeout_s: float | None = 120.0,
        observer: Any = None,
        model_name: str = "",
    ):
        self.synthesizer = synthesizer
        self.pipeline = pipeline
        self.voices = voices
        self.default_lang = default_lang
        self.fast_first_segment = fast_first_segment
        self.max_text_chars = max_text_chars
        self.max_queue = max_queue
        self.request_timeout_s = request_timeout_s
        self.observer = observer
        self.runtime = getattr(synthesizer, "name", "?")
        self.model_name = model_name or getattr(synthesizer, "model_name", "")
        self._ready = False
        self._closing = False
        self._prep_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kokoro-prep")
        self._calls: dict[int, float] = {}  # worker thread -> when its runtime call began

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._ready and not self._closing

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._prep_executor, self.synthesizer.load)
        warm = await self.prepare(SynthesisRequest(text=WARMUP_TEXT, request_id="warmup"))
        async for _ in self.stream(warm):
            pass
        self._ready = True
        log.info("backend ready: runtime=%s mode=%s model=%s", self.runtime, self.mode, self.model_name)

    async def aclose(self) -> None:
        self._closing = True
        self._prep_executor.shutdown(wait=False, cancel_futures=True)

    async def check_health(self) -> None:
        if not self.ready:
            raise NotReady("model is loading" if not self._closing else "server is shutting down")
        stuck = self.stuck_seconds()
        if stuck is not None:
            raise NotReady(f"one runtime call has been running for {stuck:.0f} s, longer than the request "
                           f"timeout ({self.request_timeout_s:g} s): the runtime looks stuck")

    def stuck_seconds(self) -> float | None:
        """How long the oldest runtime call has run, when that is longer than the request timeout
        (a hung runtime fails every request by timeout; /ping must then stop saying healthy)."""
        started = list(self._calls.values())  # a C-level copy: safe against worker threads
        if not started or not self.request_timeout_s:
            return None
        age = time.monotonic() - min(started)
        return age if age > self.request_timeout_s else None

    def _watched(self, fn: Any, *args: Any) -> Any:
        """Run one runtime call (on a worker thread) where :meth:`stuck_seconds` can see it."""
        key = threading.get_ident()
        self._calls[key] = time.monotonic()
        try:
            return fn(*args)
        finally:
            self._calls.pop(key, None)

    @property
    def queue_depth(self) -> int:
        return 0

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(word_timings=callable(getattr(self.synthesizer, "synthesize_timed", None)))

    @property
    def info(self) -> BackendInfo:
        synth = self.synthesizer
        return BackendInfo(
            runtime=self.runtime, mode=self.mode, model=self.model_name,
            device=str(getattr(synth, "device", "cpu")), dtype=str(getattr(synth, "dtype", "float32")),
            capabilities=self.capabilities,
        )

    def phonemize(self, text: str, lang: str) -> str:
        return self.pipeline.phonemes(text, lang)

    # -- requests -------------------------------------------------------------------------------
    def _plan(self, request: SynthesisRequest) -> SynthesisRequest:
        voice = self.voices.resolve(request.voice)  # raises UnknownVoice / InvalidRequest
        fast = self.fast_first_segment if request.fast_first is None else request.fast_first
        request.voice = voice
        request.lang = request.lang or self.default_lang
        request.segments = self.pipeline.plan(
            request.text, voice=voice, speed=request.speed, lang=request.lang, fast_first=fast
        )
        return request

    async def prepare(self, request: SynthesisRequest) -> SynthesisRequest:
        """Validate and plan ``request`` off the event loop. Raises a :class:`KokoroError`."""
        if self._closing:
            raise NotReady("server is shutting down")
        if len(request.text) > self.max_text_chars:
            raise TextTooLong(f"text has {len(request.text)} characters; the limit is {self.max_text_chars}")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._prep_executor, self._plan, request)

    def _observe(self, synth_s: float, audio_s: float) -> None:
        if self.observer is not None and hasattr(self.observer, "segment_done"):
            self.observer.segment_done(synth_s, audio_s)

    def _deadline(self, request: SynthesisRequest) -> float | None:
        return None if not self.request_timeout_s else request.created + self.request_timeout_s

    @staticmethod
    async def _until(deadline: float | None, awaitable):
        if deadline is None:
            return await awaitable
        remaining = deadline - time.perf_counter()
        try:
            async with asyncio.timeout(max(remaining, 0.001)):
                return await awaitable
        except TimeoutError:
            raise SynthesisTimeout("synthesis took longer than the request timeout") from None


class SequentialBackend(BaseBackend):
    """One synthesis at a time, one chunk per segment as soon as it is ready."""

    mode = "sequential"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kokoro-synth")
        self._waiting = 0
        self._timed = callable(getattr(self.synthesizer, "synthesize_timed", None))

    @property
    def queue_depth(self) -> int:
        return self._waiting

    async def aclose(self) -> None:
        await super().aclose()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _run(self, segment: Segment) -> tuple[Any, Any, float]:
        t0 = time.perf_counter()
        durations = None
        if self._timed:  # the torch runtime reports per-token frame durations at no extra cost
            audio, durations = self.synthesizer.synthesize_timed(segment)
        else:
            audio = self.synthesizer.synthesize(segment)
        if len(audio) == 0:  # a segment with phonemes always has sound: never pass silence as success
            raise BackendFault(f"the runtime produced no audio for segment {segment.index}")
        elapsed = time.perf_counter() - t0
        self._observe(elapsed, len(audio) / self.synthesizer.sample_rate)
        return audio, durations, elapsed

    async def stream(self, request: SynthesisRequest) -> AsyncIterator[AudioChunk]:
        if self._waiting >= self.max_queue:
            raise Overloaded(f"{self._waiting} requests are waiting; try again shortly")
        loop = asyncio.get_running_loop()
        deadline = self._deadline(request)
        count = len(request.segments)
        for segment in request.segments:
            self._waiting += 1
            try:
                future = loop.run_in_executor(self._executor, self._watched, self._run, segment)
                audio, durations, elapsed = await self._until(deadline, future)
            except KokoroError:
                raise
            except Exception as e:
                if self._closing:
                    raise NotReady("server is shutting down") from e
                log.exception("synthesis failed for request %s", request.request_id)
                raise BackendFault(f"synthesis failed: {type(e).__name__}: {e}") from e
            finally:
                self._waiting -= 1
            yield AudioChunk(
                audio=audio, index=segment.index, count=count, text=segment.text,
                synth_seconds=elapsed, phonemes=segment.phonemes, durations=durations,
            )

