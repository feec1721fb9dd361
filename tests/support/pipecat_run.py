"""A stock Pipecat TTS service driven the way a voice agent drives it: a pipeline ``[tts, sink]``
fed an LLM reply as a token stream (``LLMFullResponseStartFrame``, ``LLMTextFrame`` per token,
``LLMFullResponseEndFrame``), with an interruption (``InterruptionFrame``) when a test asks for one.

:class:`PipecatRun` records what reaches the end of the pipeline for each reply, as the rest of an
agent would see it — the audio (``TTSAudioRawFrame``), the words with their presentation times
(``TTSTextFrame.pts``), errors — and the pipeline clock when each reply's first audio arrived, so a
test can place the words on the reply's audio.

The service is used as its users use it: built by the test with a URL, a key and a voice only.
Used by the 3.11 suite (the Deepgram, Cartesia and ElevenLabs services straight to the server) and
the Pipecat 3.12 one (``DeepgramSageMakerTTSService`` through the SageMaker stand-in); needs only
``pipecat-ai``. Nothing here sleeps to observe order: every wait is on an event a frame sets.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.observers.base_observer import BaseObserver, FrameProcessed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner


def tokens(text: str) -> list[str]:
    """``text`` as an LLM streams it: a word (with its leading space) or a punctuation mark at a time."""
    return re.findall(r"\s*[\w'’]+|\s*[^\w\s]", text)


@dataclass
class Reply:
    """What the agent got for one reply."""

    audio: bytearray = field(default_factory=bytearray)
    sample_rate: int = 0
    #: (word, pts in ns on the pipeline clock), in arrival order.
    words: list[tuple[str, int]] = field(default_factory=list)
    first_audio_ns: int | None = None
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set whenever audio of this reply arrives.
    grew: asyncio.Event = field(default_factory=asyncio.Event)
    #: Audio bytes that reached the end of the pipeline after the interruption did.
    after_interruption: int = 0
    interrupted: bool = False
    context_id: str | None = None

    @property
    def seconds(self) -> float:
        return len(self.audio) / 2 / self.sample_rate if self.sample_rate else 0.0


class _Seen(BaseObserver):
    """Notes each frame the service has started to process (in order, as it takes them)."""

    def __init__(self, tts: Any):
        super().__init__()
        self.tts = tts
        self.last_id: int | None = None
        self.changed = asyncio.Event()

    async def on_process_frame(self, data: FrameProcessed) -> None:
        if data.processor is self.tts and isinstance(data.frame, LLMTextFrame):
            self.last_id = data.frame.id
            self.changed.set()


class _Sink(FrameProcessor):
    def __init__(self, run: PipecatRun):
        super().__init__(enable_direct_mode=True)
        self.run = run

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            self.run._seen(frame, self.get_clock().get_time())
        await self.push_frame(frame, direction)


class PipecatRun:
    """``async with PipecatRun(tts) as run: reply = await run.say("Hello there.")``."""

    def __init__(self, tts: Any, *, sample_rate: int = 24000):
        self.tts = tts
        self.errors: list[str] = []
        self.replies: list[Reply] = []
        self._seen_by_tts = _Seen(tts)
        self._last_token: LLMTextFrame | None = None
        self._worker = PipelineWorker(
            Pipeline([tts, _Sink(self)]), cancel_on_idle_timeout=False, observers=[self._seen_by_tts],
            params=PipelineParams(audio_out_sample_rate=sample_rate),
        )
        self._runner = WorkerRunner()
        self._task: asyncio.Task | None = None
        self._started = asyncio.Event()

        @self._worker.event_handler("on_pipeline_started")
        async def _started(worker: Any, frame: Frame) -> None:
            self._started.set()

    async def __aenter__(self) -> PipecatRun:
        await self._runner.add_workers(self._worker)
        self._task = asyncio.create_task(self._runner.run())
        await asyncio.wait_for(self._started.wait(), 30)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._worker.queue_frame(EndFrame())
        assert self._task is not None
        try:
            await asyncio.wait_for(self._task, 30)
        except TimeoutError:
            await self._worker.cancel()

    @property
    def current(self) -> Reply | None:
        return self.replies[-1] if self.replies else None

    def _reply_of(self, frame: Frame) -> Reply | None:
        """The reply a frame belongs to, by its TTS context (the first new context is the newest reply's)."""
        cid = getattr(frame, "context_id", None)
        if cid is None:
            return None
        for reply in self.replies:
            if reply.context_id == cid:
                return reply
        current = self.current
        if current is not None and current.context_id is None:
            current.context_id = cid
            return current
        return None

    def _seen(self, frame: Frame, now_ns: int) -> None:
        if isinstance(frame, ErrorFrame):
            self.errors.append(str(frame.error))
        if isinstance(frame, InterruptionFrame) and self.current is not None:
            self.current.interrupted = True  # from here on, none of its audio should reach the agent
        reply = self._reply_of(frame) if isinstance(frame, (TTSAudioRawFrame, TTSTextFrame, TTSStoppedFrame)) else None
        if reply is None:
            return
        if isinstance(frame, TTSAudioRawFrame):
            if reply.interrupted:
                reply.after_interruption += len(frame.audio)
            reply.audio.extend(frame.audio)
            reply.sample_rate = frame.sample_rate
            reply.grew.set()
            if reply.first_audio_ns is None:
                reply.first_audio_ns = now_ns
        elif isinstance(frame, TTSTextFrame) and frame.pts is not None:
            reply.words.append((frame.text, frame.pts))
        elif isinstance(frame, TTSStoppedFrame):
            reply.stopped.set()

    async def start_reply(self, text: str, *, tokens_per_s: float = 60.0) -> Reply:
        """Stream ``text`` as a reply, token by token; returns at once with the reply's record
        (the last tokens may still be on their way)."""
        reply = Reply()
        self.replies.append(reply)
        self._feeder = asyncio.create_task(self._feed(text, tokens_per_s))
        return reply

    async def _feed(self, text: str, tokens_per_s: float) -> None:
        await self._worker.queue_frame(LLMFullResponseStartFrame())
        for token in tokens(text):
            self._last_token = LLMTextFrame(token)
            await self._worker.queue_frame(self._last_token)
            await asyncio.sleep(1 / tokens_per_s)
        await self._worker.queue_frame(LLMFullResponseEndFrame())

    async def say(self, text: str, *, within: float = 90.0, tokens_per_s: float = 60.0) -> Reply:
        """A whole reply, until the service reports its audio done."""
        reply = await self.start_reply(text, tokens_per_s=tokens_per_s)
        await asyncio.wait_for(reply.stopped.wait(), within)
        await self._feeder
        return reply

    async def wait_audio(self, reply: Reply, seconds: float, within: float = 90.0) -> None:
        """Until ``reply`` has at least ``seconds`` of audio (woken by each arrival of its audio)."""
        try:
            async with asyncio.timeout(within):
                while reply.seconds < seconds:
                    reply.grew.clear()
                    await reply.grew.wait()
        except TimeoutError:
            raise TimeoutError(f"only {reply.seconds:.2f} s of audio after {within:.0f} s") from None

    async def interrupt(self) -> None:
        """The user barges in: the model stops writing, and once the tokens it had written reached
        the service, the current reply is interrupted (an interruption is a system frame: sent at
        once, it would overtake them)."""
        self._feeder.cancel()
        last = self._last_token
        async with asyncio.timeout(30):
            while last is not None and self._seen_by_tts.last_id != last.id:
                self._seen_by_tts.changed.clear()
                await self._seen_by_tts.changed.wait()
        await self._worker.queue_frame(InterruptionFrame())
