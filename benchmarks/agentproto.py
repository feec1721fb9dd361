"""Voice-agent protocols (``python -m benchmarks agentproto``): first audio from the first token of a
simulated token stream (the TTFA paragraph as word tokens at 30 tokens/s), the server cutting
sentences (``server_buffer``, Deepgram's ``/v1/speak``) vs the client cutting them (``client_cut``,
the bidi route), and a barge-in (``clear``: ``Clear`` to ``Cleared`` and the audio sent in between).
One live server, one client at a time, the variants taking turns; docs/benchmarks.md has the method.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from agent.messages import AudioChunk, SynthesisComplete, SynthesisFailed
from agent.ws_client import ContractSession
from backends.text.chunker import SentenceChunker

from .clients import Timing
from .live import LiveServer
from .loop import in_rounds
from .raw import VOICE
from .results import Result, command_line, markdown_table, medians_by, ms, rnd
from .texts import PARAGRAPH

TOKENS_PER_SECOND = 30.0
VARIANTS = ("server_buffer", "client_cut", "clear")


def tokens(text: str) -> list[str]:
    words = text.split(" ")
    return [words[0], *(" " + w for w in words[1:])]


async def _paced(send, items: list[str]) -> None:
    for i, item in enumerate(items):
        await send(item)
        if i + 1 < len(items):
            await asyncio.sleep(1 / TOKENS_PER_SECOND)  # the LLM's pace


@contextlib.asynccontextmanager
async def _speak(ws_url: str, query: str = "") -> AsyncIterator[Any]:
    """A ``/v1/speak`` session past its ``Metadata``; ``Close`` at the end."""
    from websockets.asyncio.client import connect

    async with connect(f"{ws_url}/v1/speak?model={VOICE}{query}", compression=None, max_size=None) as ws:
        await ws.recv()
        yield ws
        await ws.send(json.dumps({"type": "Close"}))


async def server_buffer(ws_url: str) -> dict:
    """Every token its own ``Speak`` (as a plugin in token mode sends it), ``Flush`` after the last."""
    async with _speak(ws_url, "&encoding=linear16&sample_rate=24000") as ws:
        t0 = time.perf_counter()

        async def feed() -> None:
            await _paced(lambda token: ws.send(json.dumps({"type": "Speak", "text": token})), tokens(PARAGRAPH))
            await ws.send(json.dumps({"type": "Flush"}))

        feeder = asyncio.create_task(feed())
        timing = Timing("server_buffer")
        async for frame in ws:
            if isinstance(frame, bytes):
                timing.heard(time.perf_counter() - t0, frame)
            elif json.loads(frame).get("type") == "Flushed":
                break
        await feeder
        return {"first_audio_ms": ms(timing.first_audio_s), "end_ms": ms(time.perf_counter() - t0),
                "audio_s": round(timing.audio_s, 3)}  # no audio: no first audio (None), not 0 ms


async def client_cut(ws_url: str) -> dict:
    """The contract's WebSocket route with the cutting done here (the agent's chunker), through the
    one contract client."""
    async with await ContractSession.connect(f"{ws_url}/invocations-bidirectional-stream", frames="text",
                                           max_size=None) as session:
        chunker = SentenceChunker(first_clause_words=6)
        sent = [0]
        t0 = time.perf_counter()

        async def say(chunks: list[str]) -> None:
            for chunk in chunks:
                sent[0] += 1
                await session.synthesize(chunk, str(sent[0]), voice=VOICE)

        async def feed() -> None:
            await _paced(lambda token: say(chunker.push(token)), tokens(PARAGRAPH))
            await say(chunker.flush())

        feeder = asyncio.create_task(feed())
        timing = Timing("client_cut")
        done = 0
        async for event in session.events():
            if isinstance(event, AudioChunk):
                timing.heard(time.perf_counter() - t0, event.pcm)
            elif isinstance(event, SynthesisComplete | SynthesisFailed):
                done += 1
                if feeder.done() and done == sent[0]:
                    break
        await feeder
        return {"first_audio_ms": ms(timing.first_audio_s), "end_ms": ms(time.perf_counter() - t0),
                "audio_s": round(timing.audio_s, 3), "requests": sent[0]}


async def clear(ws_url: str) -> dict:
    """The whole paragraph and ``Flush`` at once, ``Clear`` as soon as the first audio frame arrives."""
    async with _speak(ws_url) as ws:
        await ws.send(json.dumps({"type": "Speak", "text": PARAGRAPH}))
        await ws.send(json.dumps({"type": "Flush"}))
        frames_after, bytes_after, cleared_at, last_audio = 0, 0, None, None
        t_clear = None
        async for frame in ws:
            if isinstance(frame, bytes):
                if t_clear is None:
                    t_clear = time.perf_counter()
                    await ws.send(json.dumps({"type": "Clear"}))
                    continue
                frames_after += 1
                bytes_after += len(frame)
                last_audio = time.perf_counter()
            elif json.loads(frame).get("type") == "Cleared":
                cleared_at = time.perf_counter()
                break
    assert t_clear is not None and cleared_at is not None
    return {"clear_to_cleared_ms": ms(cleared_at - t_clear, 2),
            "clear_to_last_audio_ms": ms((last_audio or t_clear) - t_clear, 2),
            "frames_after_clear": frames_after, "audio_after_clear_s": round(bytes_after / 48_000, 3)}


def run(*, quick: bool = False, model_dir=None, log=print, backend: str = "onnx") -> Result:
    runs = 2 if quick else 3
    result = Result("agentproto", quick, command_line("agentproto", quick), config={
        "text": PARAGRAPH, "tokens": len(tokens(PARAGRAPH)), "tokens_per_second": TOKENS_PER_SECOND, "voice": VOICE,
        "variants": list(VARIANTS), "runs_per_variant": runs, "server": f"kokoro-serve serve ({backend}, sequential)",
    })
    variants = {"server_buffer": server_buffer, "client_cut": client_cut, "clear": clear}
    with LiveServer(backend=backend, model_dir=model_dir, log=log) as tts:
        ws_url = tts.url.replace("http://", "ws://")
        result.samples = asyncio.run(in_rounds(VARIANTS, runs, lambda v: variants[v](ws_url), key="variant", log=log))
    summarize(result)
    return result


def summarize(result: Result) -> None:
    result.medians = medians_by(result.samples, "variant", 2)
    m = result.medians
    result.summary = {
        "server_buffer_first_audio_ms": m["server_buffer"]["first_audio_ms"],
        "client_cut_first_audio_ms": m["client_cut"]["first_audio_ms"],
        "clear_to_last_audio_ms": m["clear"]["clear_to_last_audio_ms"],
        "clear_to_cleared_ms": m["clear"]["clear_to_cleared_ms"],
        "load_1m": [s["load_1m"] for s in result.samples],
    }
    a, b = m["server_buffer"]["first_audio_ms"], m["client_cut"]["first_audio_ms"]
    result.target("server-side buffering first audio", "within 100 ms of the client cutting sentences",
                  rnd(a - b, 1) if a and b else None, None if not (a and b) else a - b <= 100)
    frames = max(s["frames_after_clear"] for s in result.samples if s["variant"] == "clear")
    result.target("audio after Clear", "at most one segment (frame)", frames, frames <= 1, any_runtime=True)


def body(data: dict[str, Any]) -> str:
    m, s = data["medians"], data["summary"]
    rows = [[v, m[v].get("first_audio_ms"), m[v].get("end_ms"), m[v].get("audio_s"), m[v]["runs"]]
            for v in ("server_buffer", "client_cut")]
    table = markdown_table(["variant", "first audio ms (from first token)", "last audio ms", "audio s", "runs"], rows)
    c = m["clear"]
    clear_table = markdown_table(
        ["Clear to Cleared ms", "Clear to last audio ms", "frames after Clear", "audio after Clear s", "runs"],
        [[c["clear_to_cleared_ms"], c["clear_to_last_audio_ms"], c["frames_after_clear"], c["audio_after_clear_s"],
          c["runs"]]],
    )
    return (
        f"A token stream ({data['config']['tokens']} word tokens at {data['config']['tokens_per_second']:.0f}/s, the "
        f"267-character paragraph): first audio with the server cutting sentences (Deepgram `/v1/speak`, one "
        f"`Speak` per token) **{s['server_buffer_first_audio_ms']} ms** vs the client cutting them (bidi route) "
        f"**{s['client_cut_first_audio_ms']} ms**; barge-in: `Clear` to the last audio frame "
        f"**{s['clear_to_last_audio_ms']} ms**, to `Cleared` **{s['clear_to_cleared_ms']} ms**. Medians; the 1-minute "
        f"load average at each sample: {s['load_1m']}.\n\n{table}\n\n{clear_table}"
    )
