"""Overload and stalled readers: what a newcomer meets when the server is already behind, with
each ``KOKORO_OVERLOAD`` choice, sequential vs concurrent mode (``python -m benchmarks overload``).

* **Alone** — one listener sends the 267-character paragraph on an idle server: its first audio
  and the time to ``synthesis_complete`` of one sentence (the references below).
* **Overload** — three listeners stream long texts (~66 s of audio each: more than two cores make
  for three real-time listeners) and a fourth sends the paragraph 1 s later and hangs up at first
  audio. With ``admit``: the newcomer's first audio against alone, and the underrun seconds the
  three streams heard until then and ``STREAM_AFTER_S`` after; with ``refuse``: how soon it was
  told ``overloaded`` (a newcomer that arrives before any stream is behind is admitted).
* **Stalled readers** — two WebSocket clients ask for ~5,000 characters each and never read; a
  third asks for one sentence ``STALL_DELAY_S`` later (20 s; 5 s with ``--quick``). Its time to
  ``synthesis_complete`` against the sentence alone (goal: within alone plus one segment's time,
  the paragraph's time alone over its segments on the same server); with ``refuse`` it may be told
  ``overloaded`` instead.

Every configuration is a live ONNX server (mode, ``KOKORO_OVERLOAD``); all are up at once and take
turns, each sample starting on an idle server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import websockets

from agent.messages import AudioChunk, SynthesisComplete, SynthesisFailed
from agent.ws_client import ContractSession
from backends.schedule import Playout

from .clients import BYTES_PER_SECOND, RequestFailed
from .listeners import LONG_TEXT, Heard, listen
from .live import LiveServer
from .raw import VOICE
from .results import Result, command_line, markdown_table, rnd
from .texts import PARAGRAPH

CONFIGS = tuple((mode, overload) for mode in ("sequential", "concurrent") for overload in ("admit", "refuse"))
SENTENCE = "Could you tell me the time of the next train to the coast, please?"
STALLED_TEXT = ((LONG_TEXT + " ") * 8)[:4990].rsplit(".", 1)[0] + "."
STREAM_AFTER_S = 5.0
STALL_DELAY_S = 20.0


def config_name(mode: str, overload: str) -> str:
    return f"onnx/{mode} overload={overload}"


async def newcomer(url: str, text: str, *, first_only: bool = False) -> dict[str, Any]:
    """Send ``text``; first audio, completion or the error code, seconds from the send;
    ``first_only`` hangs up at first audio."""
    async with await ContractSession.connect(url, frames="text", max_size=None) as session:
        t0 = time.perf_counter()
        clock = Playout(arrived=0.0)
        out: dict[str, Any] = {"first_audio_s": None, "complete_s": None, "error": None, "underrun_s": 0.0, "chunks": 0}
        await session.synthesize(text, "newcomer", voice=VOICE)
        while True:
            event = await session.next_event()
            now = time.perf_counter() - t0
            if isinstance(event, AudioChunk):
                out["underrun_s"] += clock.delivered(now, len(event.pcm) / BYTES_PER_SECOND)
                out["first_audio_s"] = out["first_audio_s"] or now
                out["chunks"] += 1
                if first_only:
                    return out
            elif isinstance(event, SynthesisComplete):
                out["complete_s"] = now
                return out
            elif isinstance(event, SynthesisFailed):
                out["error"], out["error_s"] = event.code, now
                return out
            elif event is None:
                raise RequestFailed("session closed before the request completed")


async def overload_case(url: str, streams: int = 3) -> dict[str, Any]:
    heard = [Heard() for _ in range(streams)]
    tasks = [asyncio.create_task(listen(url, LONG_TEXT, heard=h)) for h in heard]
    try:
        await asyncio.sleep(1.0)  # the scenario: a fourth listener 1 s after the three
        late = await newcomer(url, PARAGRAPH, first_only=True)
        before = sum(h.underrun_s for h in heard)
        await asyncio.sleep(STREAM_AFTER_S)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, RequestFailed):
                await task
    return {"newcomer": late, "streams_underrun_s": rnd(sum(h.underrun_s for h in heard), 3),
            "streams_underrun_until_newcomer_s": rnd(before, 3)}


async def stalled_case(url: str, delay_s: float) -> dict[str, Any]:
    """Two clients that never read, then one sentence ``delay_s`` later."""
    async with contextlib.AsyncExitStack() as stack:
        for i in range(2):
            ws = await stack.enter_async_context(websockets.connect(url, max_size=None))
            await ws.send(json.dumps({"text": STALLED_TEXT, "request_id": f"stalled-{i}", "voice": VOICE}))
        await asyncio.sleep(delay_s)
        return await newcomer(url, SENTENCE)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else rnd(seconds * 1000.0, 1)


def run(*, quick: bool = False, model_dir=None, log=print) -> Result:
    delay = 5.0 if quick else STALL_DELAY_S
    result = Result("overload", quick, command_line("overload", quick),
                    config={"configs": [config_name(*c) for c in CONFIGS], "stall_delay_s": delay,
                            "stalled_chars": len(STALLED_TEXT), "sentence": SENTENCE})
    with contextlib.ExitStack() as stack:
        servers = {config_name(mode, overload): stack.enter_context(
            LiveServer(mode=mode, env={"KOKORO_OVERLOAD": overload}, model_dir=model_dir, log=log))
            for mode, overload in CONFIGS}
        for name, srv in servers.items():
            for srv_ in servers.values():
                srv_.wait_idle()
            alone = asyncio.run(newcomer(srv.ws_url, PARAGRAPH))
            sentence = asyncio.run(newcomer(srv.ws_url, SENTENCE))
            over = asyncio.run(overload_case(srv.ws_url))
            srv.wait_idle()
            stalled = asyncio.run(stalled_case(srv.ws_url, delay))
            srv.wait_idle()
            sample = {
                "config": name,
                "alone_first_audio_ms": _ms(alone["first_audio_s"]),
                "sentence_alone_complete_ms": _ms(sentence["complete_s"]),
                "one_segment_ms": _ms(alone["complete_s"] / alone["chunks"]) if alone["complete_s"] else None,
                "overload_first_audio_ms": _ms(over["newcomer"]["first_audio_s"]),
                "overload_error": over["newcomer"]["error"],
                "overload_error_ms": _ms(over["newcomer"].get("error_s")),
                "overload_streams_underrun_s": over["streams_underrun_s"],
                "overload_streams_underrun_until_newcomer_s": over["streams_underrun_until_newcomer_s"],
                "stalled_complete_ms": _ms(stalled["complete_s"]),
                "stalled_error": stalled["error"],
            }
            a, o = sample["alone_first_audio_ms"], sample["overload_first_audio_ms"]
            sample["overload_vs_alone"] = rnd(o / a, 3) if a and o else None
            result.samples.append(sample)
            log(f"  {name}: {sample}")
    result.summary = {"by_config": {s["config"]: s for s in result.samples}}
    for s in result.samples:
        if s["config"].endswith("=admit") or s["overload_error"] is None:
            ratio = s["overload_vs_alone"]
            result.target(f"{s['config']}: newcomer's first audio under overload vs alone", "<= 2x", ratio,
                          None if ratio is None else ratio <= 2.0)
        else:
            ms = s["overload_error_ms"]
            result.target(f"{s['config']}: newcomer refused under overload within", "<= 500 ms", ms,
                          None if ms is None else ms <= 500)
        if s["stalled_complete_ms"] is not None and s["sentence_alone_complete_ms"] and s["one_segment_ms"]:
            goal = s["sentence_alone_complete_ms"] + s["one_segment_ms"]
            result.target(f"{s['config']}: a sentence behind two stalled readers completes",
                          f"<= alone + one segment ({rnd(goal, 1)} ms)", s["stalled_complete_ms"],
                          s["stalled_complete_ms"] <= goal)
    result.notes.append("the machine may be shared: see the load average in machine")
    return result


def body(data: dict[str, Any]) -> str:
    rows = [[s["config"], s["alone_first_audio_ms"], s["overload_first_audio_ms"], s["overload_vs_alone"],
             s["overload_error"] or "", s["overload_streams_underrun_until_newcomer_s"], s["overload_streams_underrun_s"],
             s["sentence_alone_complete_ms"], s.get("one_segment_ms"), s["stalled_complete_ms"], s["stalled_error"] or ""]
            for s in data["samples"]]
    return markdown_table(
        ["config", "alone first audio ms", "overload: newcomer first audio ms", "vs alone", "overload: error",
         "streams' underrun s until then", f"streams' underrun s (+{STREAM_AFTER_S:g} s)", "sentence alone ms",
         "one segment ms", "sentence behind stalled readers ms", "stalled: error"], rows)
