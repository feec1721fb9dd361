"""A request's segments as they are planned: the first before ``prepare`` returns, the rest behind it.

:class:`SegmentFeed` advances the planner's :meth:`~backends.text.planner.TextPipeline.plan_iter` one
segment per step on a shared, bounded pool of planning threads, a few segments ahead of what the
request has asked for (``ahead``), and appends each planned segment to the request's
``segments``. So a request's first audio waits for its first segment's G2P only, never for the
rest of its own text, and one request's long text is planned one step at a time beside every other
request's, never as one block ahead of them.

Threading: everything here runs on the event loop except the generator's steps, which run on the
pool one at a time (a step is started only when none is running, so the generator is never
advanced from two threads at once). The G2P front ends hold their own locks.

Cancellation and lifetime: :meth:`SegmentFeed.close` (the stream ended, the request was
abandoned) stops planning after the step in flight; a feed nobody reads plans at most ``ahead``
segments and stops, so nothing is kept or run for a request after it ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import Executor

from backends.api import NotReady, Segment, SynthesisRequest
from backends.assets.voices import VoiceStore
from backends.config import BackendConfig
from backends.text.lang import resolve_lang, voice_language
from backends.text.planner import TextPipeline

#: Threads of each planning pool (loading and first segments; the rest of the texts). G2P holds a
#: lock per front end, so more threads would only queue on it; a few keep one language's long
#: text from holding up another's, and a first segment from waiting for a busy pool.
PLAN_THREADS = 4


def plan_first(request: SynthesisRequest, pipeline: TextPipeline, voices: VoiceStore, config: BackendConfig,
               short: bool, windowed: bool) -> Iterator[tuple[Segment, bool]] | None:
    """Resolve the request's voice and language and plan its first segment into
    ``request.segments`` (a planning thread); the planner's iterator over the rest (None: the first
    is the only one). ``short``: a
    short first segment (the policy's rule 2); ``windowed``: the runtime decodes windows of a
    sentence. Raises a :class:`~backends.api.KokoroError` for the voice or the text."""
    voice = voices.resolve(request.voice)  # raises UnknownVoice / InvalidRequest
    fast = config.fast_first_segment if request.fast_first is None else request.fast_first
    request.voice = voice
    request.lang = resolve_lang(request.text, request.lang, voice_language(voice), config.default_lang)
    rest = pipeline.plan_steps(
        request.text, voice=voice, speed=request.speed, lang=request.lang, fast_first=fast,
        short_first_words=config.short_first_segment_words if short else None, windowed=windowed,
    )
    first, final = next(rest)  # (the planner raises EmptyText rather than end with none)
    request.segments = [first]
    return None if final else rest


def known_count(request: SynthesisRequest) -> int:
    """A chunk's ``count``: the request's segments once its plan is complete, else those planned so
    far and one more (so ``is_last`` is never claimed before it is known)."""
    plan = request.plan
    return len(request.segments) + (0 if plan is None or plan.complete else 1)


class SegmentFeed:
    """The segments of one request, planned a step at a time (see the module docstring).

    ``segments``: the request's list (it holds the first segment already and grows as planning
    goes on); ``source``: the planner's iterator over the rest, each segment with whether it is
    the last (:meth:`~backends.text.planner.TextPipeline.plan_steps`); ``executor``: the planning pool;
    ``text_chars``: the request's length, for the estimate of the work it has left."""

    def __init__(self, segments: list[Segment], source: Iterator[tuple[Segment, bool]] | None, executor: Executor, *,
                 ahead: int = 2, text_chars: int = 0):
        self.segments = segments
        self._source = source if source is not None else iter(())
        self._executor = executor
        self.ahead = ahead
        self._text_chars = text_chars
        self._wanted = 0
        self._step: asyncio.Future[tuple[Segment, bool] | None] | None = None
        self._listeners: list[Callable[[], None]] = []
        self.complete = source is None  # (None: the request's one segment is planned)
        self.error: BaseException | None = None

    # -- what the modes use ---------------------------------------------------------------------
    async def get(self, index: int) -> Segment | None:
        """Segment ``index``, planned now if it is not yet; None when the text has no more. Raises
        the planner's error for the text (a :class:`~backends.api.KokoroError`, or what G2P raised)."""
        self.want(index + 1)
        while index >= len(self.segments) and not self.complete:
            step = self._start()
            if step is None:
                break
            await asyncio.wait([step])  # (not cancelled with the reader: the step ends on its own)
        if index < len(self.segments):
            return self.segments[index]
        if self.error is not None:
            raise self.error
        return None

    async def whole(self) -> list[Segment]:
        """Every segment, planned now (for a reader that wants the whole plan before any audio)."""
        while await self.get(len(self.segments)) is not None:
            pass
        return self.segments

    def want(self, count: int) -> None:
        """Plan up to ``count`` segments, and ``ahead`` more, in the background."""
        self._wanted = max(self._wanted, count + self.ahead)
        if len(self.segments) < self._wanted:
            self._start()

    def listen(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (event loop) after every step: a segment planned, the end, an error."""
        self._listeners.append(callback)

    def remaining_phonemes(self, after: int) -> int:
        """The phonemes of the segments after ``after`` — those not planned yet estimated at one a
        character of text (English and espeak-ng languages read about one phoneme a character)."""
        planned = self.segments[after + 1:]
        known = sum(len(s.phonemes) for s in planned)
        if self.complete:
            return known
        read = sum(len(s.text) + 1 for s in self.segments)
        return known + max(0, self._text_chars - read)

    def close(self) -> None:
        """Plan nothing more (the step in flight finishes and is dropped)."""
        if not self.complete:
            self.complete = True
            self.error = self.error or NotReady("request closed")
        self._listeners.clear()

    # -- the steps ------------------------------------------------------------------------------
    def _start(self) -> asyncio.Future[tuple[Segment, bool] | None] | None:
        if self.complete:
            return None
        if self._step is None:
            try:
                self._step = asyncio.get_running_loop().run_in_executor(self._executor, self._next)
            except RuntimeError as e:  # the pool is shut down: the server is closing
                self._end(NotReady(f"server is shutting down ({e})"))
                return None
            self._step.add_done_callback(self._stepped)
        return self._step

    def _next(self) -> tuple[Segment, bool] | None:
        """One step of the planner (a planning thread)."""
        return next(self._source, None)

    def _stepped(self, step: asyncio.Future[tuple[Segment, bool] | None]) -> None:
        self._step = None
        if self.complete:  # closed meanwhile: the step's work is dropped
            return
        if step.cancelled():
            self._end(NotReady("server is shutting down"))
        elif (exc := step.exception()) is not None:
            self._end(exc)
        elif (planned := step.result()) is None:
            self._end(None)
        else:
            self.segments.append(planned[0])
            if planned[1]:
                self._end(None)
            elif len(self.segments) < self._wanted:
                self._start()
        for callback in list(self._listeners):
            callback()

    def _end(self, error: BaseException | None) -> None:
        self.complete = True
        self.error = error
