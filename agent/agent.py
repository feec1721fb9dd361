"""The Strands agent: a language model whose reply is spoken while it is still being written.

* :func:`build_model` — ``bedrock`` (Strands' ``BedrockModel``, the default; ``endpoint_url`` points it
  at a VPC endpoint or a stand-in) or ``scripted`` (:class:`ScriptedModel`, offline).
* :class:`ScriptedModel` — implements Strands' ``Model`` interface: streams a canned multi-sentence
  reply token by token at ``tokens_per_second``, as Bedrock's converse-stream events
  (``messageStart``, ``contentBlockStart``, ``contentBlockDelta``…, ``messageStop``, ``metadata``).
  For demos, tests and benchmarks: the rate is fixed, so runs compare.
* :func:`converse` — one turn as a stream of event dicts (the SSE events of ``agent.app``). In
  ``bidi`` mode each text delta goes through the sentence chunker and every finished sentence goes to
  the TTS server at once, while generation continues; in ``batch`` mode (the baseline) the whole reply
  is generated first and synthesised as one request.

Concurrency: ``converse`` runs generation and speech as two tasks on the caller's loop and merges
their events; closing or cancelling the ``converse`` iterator cancels both, which makes the TTS client
send ``cancel`` to the server. One ``Agent`` is built per turn (no history is kept between turns).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from strands import Agent
from strands.models.model import Model

from backends.text.chunker import SentenceChunker

from .messages import (
    SAMPLE_RATE,
    AudioChunk,
    SynthesisComplete,
    SynthesisFailed,
    SynthesisStart,
    TTSError,
    TTSEvent,
    VoiceLost,
    VoiceRestored,
)
from .tts_client import TTSClient

SYSTEM_PROMPT = (
    "You are a helpful voice assistant. Your reply is read aloud as it is written, so answer in a few "
    "short, plain sentences: no markdown, no lists, no code, no emoji."
)

DEFAULT_REPLY = (
    "Kokoro is a small text to speech model with eighty two million parameters. "
    "It runs comfortably on a single processor core, and even faster on a graphics card. "
    "Because this answer is spoken sentence by sentence, you hear the first words while the rest "
    "is still being written. "
    "That is the whole trick: stream the text, cut it into sentences, and synthesise each one as "
    "soon as it ends."
)

_TOKEN = re.compile(r"\s*[\w']+|\s*[^\w\s]|\s+")
MAX_AUDIO_EVENT_BYTES = 48_000  # 1 s of 24 kHz s16le: keeps SSE events small for the browser


def tokenize(text: str) -> list[str]:
    """Split text into LLM-like tokens (a word with its leading space, or one punctuation mark)."""
    return _TOKEN.findall(text)


class ScriptedModel(Model):
    """Offline Strands model provider that streams a canned reply at a fixed token rate.

    ``reply`` is a string, or a callable taking the last user text and returning the reply. The
    stream is paced against a fixed schedule (token *i* at ``i / tokens_per_second``), so sleep
    jitter does not accumulate. Cancelling the consuming task stops the stream.
    """

    def __init__(
        self,
        reply: str | Callable[[str], str] = DEFAULT_REPLY,
        *,
        tokens_per_second: float = 30.0,
        model_id: str = "scripted",
    ) -> None:
        self.config: dict[str, Any] = {"model_id": model_id, "tokens_per_second": tokens_per_second}
        self._reply = reply

    def update_config(self, **model_config: Any) -> None:
        self.config.update(model_config)

    def get_config(self) -> dict[str, Any]:
        return dict(self.config)

    def reply_for(self, messages: Any) -> str:
        if not callable(self._reply):
            return self._reply
        last = ""
        for message in messages or []:
            if message.get("role") == "user":
                last = " ".join(b["text"] for b in message.get("content", []) if "text" in b)
        return self._reply(last)

    async def stream(
        self,
        messages: Any,
        tool_specs: Any = None,
        system_prompt: str | None = None,
        *,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        tokens = tokenize(self.reply_for(messages))
        rate = float(self.config["tokens_per_second"])
        start = time.monotonic()
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockStart": {"start": {}}}
        for i, token in enumerate(tokens):
            if rate > 0:
                delay = start + (i + 1) / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            yield {"contentBlockDelta": {"delta": {"text": token}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}
        prompt_tokens = sum(len(tokenize(b.get("text", ""))) for m in messages or [] for b in m.get("content", []))
        yield {
            "metadata": {
                "usage": {
                    "inputTokens": prompt_tokens,
                    "outputTokens": len(tokens),
                    "totalTokens": prompt_tokens + len(tokens),
                },
                "metrics": {"latencyMs": int((time.monotonic() - start) * 1000)},
            }
        }

    async def structured_output(
        self, output_model: Any, prompt: Any, system_prompt: str | None = None, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any]]:
        """Validates the canned reply as JSON against ``output_model`` (only useful with a JSON reply)."""
        yield {"output": output_model.model_validate_json(self.reply_for(prompt))}


def build_model(
    kind: str = "bedrock",
    *,
    tokens_per_second: float = 30.0,
    reply: str | Callable[[str], str] | None = None,
    bedrock_model_id: str | None = None,
    region: str | None = None,
    endpoint_url: str | None = None,
    boto_session: Any = None,
) -> Model:
    """The model provider by name; BedrockModel is imported only when chosen."""
    if kind == "scripted":
        return ScriptedModel(reply or DEFAULT_REPLY, tokens_per_second=tokens_per_second)
    if kind == "bedrock":
        from strands.models.bedrock import BedrockModel

        kwargs: dict[str, Any] = {"streaming": True}
        if bedrock_model_id:
            kwargs["model_id"] = bedrock_model_id
        if boto_session is not None:
            kwargs["boto_session"] = boto_session
        elif region:
            kwargs["region_name"] = region
        if endpoint_url:
            kwargs["endpoint_url"] = endpoint_url
        return BedrockModel(**kwargs)
    raise ValueError(f"unknown model provider {kind!r} (bedrock | scripted)")


def build_agent(model: Model, *, system_prompt: str = SYSTEM_PROMPT) -> Agent:
    return Agent(model=model, system_prompt=system_prompt, callback_handler=None)


async def text_deltas(agent: Agent, prompt: str) -> AsyncIterator[str]:
    """The text deltas of the agent's reply, as ``stream_async`` produces them."""
    async for event in agent.stream_async(prompt):
        text = event.get("data") if isinstance(event, dict) else None
        if text:
            yield text


_MARKUP = re.compile(r"(\*\*|__|`+|^#+\s*|^\s*[-*•]\s+)", re.MULTILINE)


def for_speech(chunk: str) -> str | None:
    """Markdown markers dropped; None when nothing speakable is left."""
    text = _MARKUP.sub("", chunk).strip()
    return text if any(c.isalnum() for c in text) else None


def _now_ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 1)


class _Turn:
    """One turn's state: the event queue, the sentence queue between generation and speech, the
    reply so far and the stats of ``agent_end``. Its steps run as tasks on the caller's loop."""

    def __init__(self, mode: str, first_clause_words: int | None) -> None:
        self.mode = mode
        self.first_clause_words = first_clause_words
        self.t0 = time.monotonic()
        self.out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.sentences: asyncio.Queue[str | None] = asyncio.Queue()
        self.reply: list[str] = []
        self.stats: dict[str, Any] = {"first_text_ms": None, "first_audio_ms": None, "sentences": 0}

    def emit(self, kind: str, **fields: Any) -> None:
        self.out.put_nowait({"type": kind, "t_ms": _now_ms(self.t0), **fields})

    def _say(self, chunks: list[str]) -> None:
        for chunk in chunks:
            if (speech := for_speech(chunk)) is not None:
                self.sentences.put_nowait(speech)

    # -- generation: text deltas -> text_delta events and finished sentences -------------------
    async def generate(self, text: AsyncIterable[str]) -> None:
        chunker = SentenceChunker(first_clause_words=self.first_clause_words)
        bidi = self.mode == "bidi"
        try:
            async for delta in text:
                if self.stats["first_text_ms"] is None:
                    self.stats["first_text_ms"] = _now_ms(self.t0)
                self.reply.append(delta)
                self.emit("text_delta", text=delta)
                if bidi:
                    self._say(chunker.push(delta))
            self._say(chunker.flush() if bidi else ["".join(self.reply)])
        finally:
            self.sentences.put_nowait(None)

    async def sentence_source(self) -> AsyncIterator[str]:
        while (sentence := await self.sentences.get()) is not None:
            self.stats["sentences"] += 1
            yield sentence

    # -- speech: TTS events -> audio events -----------------------------------------------------
    async def speak(self, events: AsyncIterable[TTSEvent]) -> None:
        audio = _AudioRelay(self)
        async for event in events:
            if isinstance(event, SynthesisStart):
                audio.start(event)
            elif isinstance(event, AudioChunk):
                audio.chunk(event)
            elif isinstance(event, SynthesisFailed):
                self.emit("error", code=event.code, message=event.message, request_id=event.request_id,
                          fatal=False)
            elif isinstance(event, SynthesisComplete):
                audio.carry = b""
            elif isinstance(event, VoiceLost):
                self.emit("voice_lost", code=event.code, message=event.message)
            elif isinstance(event, VoiceRestored):
                self.emit("voice_restored", resent=event.resent)
        audio.end()

    async def watch(self, tasks: set[asyncio.Task[None]]) -> None:
        """Report each side's failure. A failed side does not stop the other: text keeps coming when
        speech fails, and the sentences already written are still spoken when generation fails."""
        for task in asyncio.as_completed(tasks):
            try:
                await task
            except Exception as exc:
                err = exc if isinstance(exc, TTSError) else None
                self.emit("error", code=err.code if err else type(exc).__name__,
                          message=err.message if err else str(exc),
                          retryable=bool(err and err.retryable), fatal=True)
        self.out.put_nowait(None)

    def end_event(self) -> dict[str, Any]:
        return {"type": "agent_end", "t_ms": _now_ms(self.t0), "text": "".join(self.reply), "mode": self.mode,
                "total_ms": _now_ms(self.t0), **self.stats}


class _AudioRelay:
    """PCM from the TTS events as ``audio_chunk`` events of at most :data:`MAX_AUDIO_EVENT_BYTES`,
    whole samples only; a sentence's first chunk carries its text."""

    def __init__(self, turn: _Turn) -> None:
        self.turn = turn
        self.started = False
        self.chunks = self.total_bytes = 0
        self.carry = b""
        self.sentence_text: dict[str, str] = {}

    def start(self, event: SynthesisStart) -> None:
        if not self.started:
            self.started = True
            self.turn.emit("audio_stream_start", sample_rate=event.sample_rate, encoding=event.encoding,
                           channels=event.channels)
        self.sentence_text[event.request_id] = event.text

    def chunk(self, event: AudioChunk) -> None:
        pcm = self.carry + event.pcm
        pcm, self.carry = (pcm[:-1], pcm[-1:]) if len(pcm) % 2 else (pcm, b"")
        stats = self.turn.stats
        for i in range(0, len(pcm), MAX_AUDIO_EVENT_BYTES):
            piece = pcm[i : i + MAX_AUDIO_EVENT_BYTES]
            if stats["first_audio_ms"] is None:
                stats["first_audio_ms"] = _now_ms(self.turn.t0)
            self.chunks += 1
            self.total_bytes += len(piece)
            extra = {"text": t} if (t := self.sentence_text.pop(event.request_id or "", None)) else {}
            self.turn.emit("audio_chunk", audio=base64.b64encode(piece).decode("ascii"), seq=self.chunks,
                           request_id=event.request_id, **extra)

    def end(self) -> None:
        if self.started:
            self.turn.emit("audio_stream_end", chunks=self.chunks, bytes=self.total_bytes,
                           audio_duration_s=round(self.total_bytes / 2 / SAMPLE_RATE, 3))


async def converse(
    agent: Agent,
    tts: TTSClient,
    prompt: str,
    *,
    mode: str = "bidi",
    voice: str | None = None,
    speed: float | None = None,
    first_clause_words: int | None = 6,
    deltas: Callable[[Agent, str], AsyncIterable[str]] = text_deltas,
) -> AsyncIterator[dict[str, Any]]:
    """One conversational turn as events: ``agent_start``, ``text_delta``…, ``audio_stream_start``,
    ``audio_chunk``…, ``audio_stream_end``, ``agent_end`` (``error`` where something failed;
    ``voice_lost`` and ``voice_restored`` around a TTS session that dropped and was reopened).

    ``t_ms`` on every event is milliseconds since the turn started.
    """
    if mode not in ("bidi", "batch"):
        raise ValueError("mode must be bidi or batch")
    turn = _Turn(mode, first_clause_words)
    turn.emit("agent_start", mode=mode, prompt=prompt)
    speech = tts.speak(turn.sentence_source(), voice=voice, speed=speed)
    tasks = {asyncio.create_task(turn.generate(deltas(agent, prompt)), name="agent-generate"),
             asyncio.create_task(turn.speak(speech), name="agent-speak")}
    watcher = asyncio.create_task(turn.watch(tasks), name="agent-watch")
    try:
        while (event := await turn.out.get()) is not None:
            yield event
        yield turn.end_event()
    finally:
        for task in (*tasks, watcher):
            task.cancel()
        for task in (*tasks, watcher):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
