"""Overload and stalled readers (``python -m benchmarks overload``): what a newcomer meets when the
server is already behind, with each ``KOKORO_OVERLOAD`` choice, sequential vs concurrent mode. Per
configuration (one live server each, all up at once, taking turns, each sample on an idle server):
the paragraph and one sentence alone; a newcomer once three long streams play and one is behind
(its first audio, or how soon it is refused, and the streams' underruns); one sentence behind two
clients that never read. The method and the goals are described in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from agent.ws_client import ContractSession

from .listeners import LONG_TEXT, Heard, late_arrival, listen, settle
from .live import LiveServer
from .raw import VOICE
from .results import Result, at_most, command_line, markdown_table, ms, ratio, rnd
from .texts import PARAGRAPH

CONFIGS = tuple((mode, overload) for mode in ("sequential", "concurrent") for overload in ("admit", "refuse"))
SENTENCE = "Could you tell me the time of the next train to the coast, please?"
STALLED_TEXT = ((LONG_TEXT + " ") * 8)[:4990].rsplit(".", 1)[0] + "."
STREAM_AFTER_S = 5.0
STALL_DELAY_S = 20.0
BEHIND_WAIT_S = 30.0


def config_name(mode: str, overload: str, backend: str = "onnx") -> str:
    return f"{backend}/{mode} overload={overload}"


async def stalled_case(url: str, delay_s: float) -> Heard:
    """Two clients that never read, then one sentence ``delay_s`` later; the two vanish at the end
    (a closing handshake would wait behind the audio they never read)."""
    stalled = [await ContractSession.connect(url, frames="text", max_size=None) for _ in range(2)]
    try:
        for i, session in enumerate(stalled):
            await session.synthesize(STALLED_TEXT, f"stalled-{i}", voice=VOICE)
        await asyncio.sleep(delay_s)
        return await listen(url, SENTENCE, raise_on_error=False)
    finally:
        for session in stalled:
            session.abort()


def sample(name: str, srv: LiveServer, delay_s: float, behind_wait_s: float, after_s: float) -> dict[str, Any]:
    alone = asyncio.run(listen(srv.ws_url, PARAGRAPH))
    sentence = asyncio.run(listen(srv.ws_url, SENTENCE))
    over = asyncio.run(late_arrival(srv.ws_url, behind_wait_s=behind_wait_s, after_s=after_s, raise_on_error=False))
    srv.wait_idle()
    stalled = asyncio.run(stalled_case(srv.ws_url, delay_s))
    srv.wait_idle()
    late: Heard = over["newcomer"]
    out = {
        "config": name,
        "alone_first_audio_ms": ms(alone.first_audio_s),
        "sentence_alone_complete_ms": ms(sentence.complete_s),
        "one_segment_ms": ms(alone.complete_s / len(alone.chunks)) if alone.complete_s and alone.chunks else None,
        "overload_streams_behind": over["streams_behind"],
        "overload_first_audio_ms": ms(late.first_audio_s),
        "overload_error": late.code,
        "overload_error_ms": ms(late.error_s),
        "overload_streams_underrun_s": over["streams_underrun_s"],
        "overload_streams_underrun_until_newcomer_s": over["streams_underrun_until_newcomer_s"],
        "stalled_complete_ms": ms(stalled.complete_s),
        "stalled_error": stalled.code,
    }
    out["overload_vs_alone"] = ratio(out["overload_first_audio_ms"], out["alone_first_audio_ms"])
    return out


def run(*, quick: bool = False, model_dir=None, log=print, backend: str = "onnx") -> Result:
    """Every configuration in turn; ``backend="fake"`` checks the harness on the model-free runtime."""
    delay, behind_wait, after = (STALL_DELAY_S, BEHIND_WAIT_S, STREAM_AFTER_S) if not quick else (
        (1.0, 0.5, 0.5) if backend == "fake" else (3.0, 2.0, 2.0))  # the fake runtime's segments take 20 ms
    result = Result("overload", quick, command_line("overload", quick),
                    config={"configs": [config_name(*c, backend) for c in CONFIGS], "stall_delay_s": delay,
                            "behind_wait_s": behind_wait, "streams_after_s": after, "stalled_chars": len(STALLED_TEXT), "sentence": SENTENCE})
    with contextlib.ExitStack() as stack:
        servers = {config_name(mode, overload, backend): stack.enter_context(
            LiveServer(backend=backend, mode=mode, env={"KOKORO_OVERLOAD": overload}, model_dir=model_dir, log=log))
            for mode, overload in CONFIGS}
        for name, srv in servers.items():
            settle(servers.values())
            result.samples.append(sample(name, srv, delay, behind_wait, after))
            log(f"  {name}: {result.samples[-1]}")
    result.summary = {"by_config": {s["config"]: s for s in result.samples}}
    for s in result.samples:
        reached = "" if s["overload_streams_behind"] else " (streams not behind: scenario not reached)"
        if s["config"].endswith("=admit") or s["overload_error"] is None:
            result.target(f"{s['config']}: newcomer's first audio under overload vs alone{reached}", "<= 2x",
                          s["overload_vs_alone"], None if reached else at_most(s["overload_vs_alone"], 2.0))
        else:
            result.target(f"{s['config']}: newcomer refused under overload within{reached}", "<= 500 ms",
                          s["overload_error_ms"], None if reached else at_most(s["overload_error_ms"], 500))
        if s["stalled_complete_ms"] is not None and s["sentence_alone_complete_ms"] and s["one_segment_ms"]:
            goal = s["sentence_alone_complete_ms"] + s["one_segment_ms"]
            result.target(f"{s['config']}: a sentence behind two stalled readers completes",
                          f"<= alone + one segment ({rnd(goal, 1)} ms)", s["stalled_complete_ms"],
                          s["stalled_complete_ms"] <= goal)
    result.notes.append("the machine may be shared: see the load average in machine")
    return result


def body(data: dict[str, Any]) -> str:
    rows = [[s["config"], s["alone_first_audio_ms"], {True: "yes", False: "no"}.get(s.get("overload_streams_behind"), "—"),
             s["overload_first_audio_ms"], s["overload_vs_alone"], s["overload_error"] or "",
             s["overload_streams_underrun_until_newcomer_s"], s["overload_streams_underrun_s"],
             s["sentence_alone_complete_ms"], s.get("one_segment_ms"), s["stalled_complete_ms"], s["stalled_error"] or ""]
            for s in data["samples"]]
    return markdown_table(
        ["config", "alone first audio ms", "streams behind", "overload: newcomer first audio ms", "vs alone",
         "overload: error", "streams' underrun s until then", f"streams' underrun s (+{data['config'].get('streams_after_s', STREAM_AFTER_S):g} s)",
         "sentence alone ms", "one segment ms", "sentence behind stalled readers ms", "stalled: error"], rows)
