"""Drive a stock Pipecat TTS service inside a real Pipecat pipeline, the way a voice agent does:
an LLM reply streamed as tokens, an interruption (barge-in) mid-reply, the next reply. Used by the
3.11 suite (``DeepgramTTSService`` straight to the server) and the 3.12 one
(``DeepgramSageMakerTTSService`` through the SageMaker stand-in); needs only ``pipecat-ai`` and
``websockets``.

:class:`Recorder` is the pipeline's last processor: it keeps every downstream frame and wakes the
script when audio arrives or a turn stops. :class:`FrameTap` is a WebSocket proxy between the
plugin and the server that records what crossed the wire (client messages in order, the audio bytes
the server sent after each of them), so a test can tell what the *server* stopped, not only what
Pipecat dropped. Nothing here sleeps to observe order: every wait is on an event the frames set.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pipecat.frames.frames import (
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

SAMPLE_RATE = 24_000


class Recorder(FrameProcessor):
    """Keeps the frames that reach the end of the pipeline; ``audio`` per turn (by context id)."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[Frame] = []
        self.audio_arrived = asyncio.Event()
        self.stopped = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            self.frames.append(frame)
            if isinstance(frame, TTSAudioRawFrame) and frame.audio:
                self.audio_arrived.set()
            elif isinstance(frame, TTSStoppedFrame):
                self.stopped.set()
        await self.push_frame(frame, direction)

    def audio(self) -> list[TTSAudioRawFrame]:
        return [f for f in self.frames if isinstance(f, TTSAudioRawFrame)]

    def pcm_of(self, context_id: str | None) -> bytes:
        return b"".join(f.audio for f in self.audio() if f.context_id == context_id)


def tokens(text: str) -> list[str]:
    """A reply as an LLM streams it: words with their leading space, punctuation attached."""
    words = text.split(" ")
    return [words[0], *(" " + w for w in words[1:])]


async def reply(task: PipelineWorker, text: str, *, rate: float | None = None) -> None:
    """One LLM turn: start, the tokens (``rate`` per second, else as fast as they queue), end."""
    await task.queue_frame(LLMFullResponseStartFrame())
    for token in tokens(text):
        await task.queue_frame(LLMTextFrame(token))
        if rate:
            await asyncio.sleep(1 / rate)  # the LLM's pace, not a wait for an outcome
    await task.queue_frame(LLMFullResponseEndFrame())


async def interrupt(task: PipelineWorker) -> None:
    await task.queue_frame(InterruptionFrame())


async def run_pipeline(tts: Any, script: Callable[[PipelineWorker, Recorder], Awaitable[None]],
                       limit_s: float = 120.0) -> Recorder:
    """Run ``tts`` in ``Pipeline([tts, recorder])`` while ``script(task, recorder)`` drives it;
    the pipeline ends (EndFrame) when the script returns."""
    recorder = Recorder()
    task = PipelineWorker(Pipeline([tts, recorder]), params=PipelineParams(audio_out_sample_rate=SAMPLE_RATE),
                          cancel_on_idle_timeout=False)
    started = asyncio.Event()

    @task.event_handler("on_pipeline_started")
    async def _on_started(_task: Any, _frame: Any) -> None:
        started.set()

    runner = WorkerRunner()
    await runner.add_workers(task)

    async def drive() -> None:
        await asyncio.wait_for(started.wait(), 30)
        try:
            await script(task, recorder)
        finally:
            await task.stop_when_done()

    await asyncio.wait_for(asyncio.gather(runner.run(), drive()), limit_s)
    return recorder


# -- the wire between the plugin and the server ----------------------------------------------
@dataclass
class Wire:
    """What crossed one connection, in order: ``log`` holds ``("sent", message)`` for each client
    message (JSON), ``("audio", n_bytes)`` for each binary frame of the server and ``("event",
    message)`` for each of its JSON messages."""

    path: str = ""
    log: list[tuple[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def note(self, kind: str, item: Any) -> None:
        self.log.append((kind, item))
        self.times.append(round(time.monotonic(), 2))
        self._changed.set()

    async def wait_until(self, condition: Callable[[Wire], bool]) -> None:
        """Until ``condition(wire)`` holds (checked whenever a frame passes)."""
        while not condition(self):
            self._changed.clear()
            await self._changed.wait()

    def sent(self) -> list[dict]:
        return [m for kind, m in self.log if kind == "sent"]

    def events(self) -> list[dict]:
        return [m for kind, m in self.log if kind == "event"]

    def audio_frames_between(self, sent_type: str, event_type: str) -> list[int]:
        """Sizes of the audio frames the server sent after the last client ``sent_type`` message
        and before its next ``event_type`` message (what a Clear let through before Cleared)."""
        start = max(i for i, (kind, m) in enumerate(self.log) if kind == "sent" and m.get("type") == sent_type)
        out = []
        for kind, m in self.log[start + 1:]:
            if kind == "event" and m.get("type") == event_type:
                return out
            if kind == "audio":
                out.append(m)
        raise AssertionError(f"no {event_type} after {sent_type}")

    def audio_after(self, index: int) -> int:
        """Audio bytes the server sent after the ``index``-th entry of the log."""
        return sum(m for kind, m in self.log[index + 1:] if kind == "audio")


class FrameTap:
    """``async with FrameTap(upstream) as tap:`` — a loopback WebSocket proxy to ``upstream``
    (``ws://host:port``) that keeps the path, query and ``Authorization`` header of each
    connection; ``tap.base`` is its address, ``tap.wires`` one :class:`Wire` per connection.
    A client message is logged before it is forwarded, so the log never shows an answer before
    the message it answers.
    Frames pass through unchanged, in order (one task per direction)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.wires: list[Wire] = []
        self.base = ""
        self._server: Any = None

    async def __aenter__(self) -> FrameTap:
        from websockets.asyncio.server import serve

        self._server = await serve(self._handle, "127.0.0.1", 0, max_size=None, compression=None)
        port = next(iter(self._server.sockets)).getsockname()[1]
        self.base = f"ws://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, client: Any) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        path = client.request.path
        wire = Wire(path)
        self.wires.append(wire)
        headers = {k: v for k, v in client.request.headers.raw_items() if k.lower() == "authorization"}
        async with connect(self.upstream + path, additional_headers=headers, max_size=None, compression=None) as srv:

            async def up() -> None:
                try:
                    async for frame in client:
                        try:
                            wire.note("sent", json.loads(frame))
                        except ValueError:
                            wire.note("sent", {})
                        await srv.send(frame)
                except ConnectionClosed:
                    pass
                finally:
                    await srv.close()

            async def down() -> None:
                try:
                    async for frame in srv:
                        if isinstance(frame, bytes):
                            wire.note("audio", len(frame))
                        else:
                            wire.note("event", json.loads(frame))
                        await client.send(frame)
                except ConnectionClosed:
                    pass
                finally:
                    await client.close()

            await asyncio.gather(up(), down(), return_exceptions=True)
