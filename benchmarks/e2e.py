"""End to end (``python -m benchmarks e2e``): first audio through the agent app (a subprocess, ``POST
/invocations`` with SSE) with a scripted model streaming a fixed reply at a fixed token rate, against
a live TTS server: ``bidi`` vs ``batch`` vs ``bidi_no_early_clause`` (a second agent started with
``--first-clause-words 0``), taking turns run by run. First audio is the first ``audio_chunk`` event
at this client; an app that does not start gives a ``not_run`` result. With ``--agent-url URL`` (a
running agent app) or ``--agent-runtime-arn ARN`` (Bedrock AgentCore, ``invoke_agent_runtime``) it
measures an agent it did not start instead: bidi vs batch, the means beside the medians; an agent
that does not answer gives a ``not_run`` result. Method: docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from . import prom
from .live import LiveServer, ServerFailed
from .raw import VOICE
from .results import Result, command_line, markdown_table, mean, medians_by, ms, ratio, rnd, shown_command
from .texts import PARAGRAPH
from .ttfa import first_audio_plot, rounds_over_http

TOKENS_PER_SECOND = 30.0
PROMPT = "Why does streaming speech feel faster?"
#: The scripted reply: the TTFA paragraph (267 characters, 4 sentences), so the two benchmarks compare.
REPLY = PARAGRAPH
MODES = ("bidi", "batch", "bidi_no_early_clause")
DEPLOYED_MODES = ("bidi", "batch")
#: The request mode each variant sends, and whether its agent cuts the first clause early.
VARIANTS = {"bidi": ("bidi", True), "batch": ("batch", True), "bidi_no_early_clause": ("bidi", False)}
AWS_REFERENCE_SPEEDUP = 2.4


def _agent_command() -> list[str]:
    """The ``kokoro-agent`` console script beside this interpreter or on PATH, else the module."""
    script = Path(sys.executable).with_name("kokoro-agent")
    if script.is_file():
        return [str(script)]
    found = shutil.which("kokoro-agent")
    return [found] if found else [sys.executable, "-m", "agent"]


def _turn_stats(events: list[tuple[float, dict]], t0: float) -> dict:
    """Client-side milliseconds of the first/last text delta and the first audio chunk."""
    def first(kind: str) -> float | None:
        return next((ms(t - t0) for t, e in events if e.get("type") == kind), None)

    texts = [t for t, e in events if e.get("type") == "text_delta"]
    audio_bytes = sum(len(e.get("audio", "")) * 3 // 4 for _, e in events if e.get("type") == "audio_chunk")
    errors = [e for _, e in events if e.get("type") == "error"]
    end = next((e for _, e in events if e.get("type") == "agent_end"), {})
    return {
        "first_text_ms": first("text_delta"),
        "last_text_ms": ms(texts[-1] - t0) if texts else None,
        "first_audio_ms": first("audio_chunk"),
        "end_ms": ms(events[-1][0] - t0) if events else None,
        "audio_s": round(audio_bytes / 48_000, 3),
        "agent_reported_first_audio_ms": end.get("first_audio_ms"),
        "errors": [f"{e.get('code')}: {e.get('message')}" for e in errors],
    }


def sse_event(line: str) -> dict | None:
    """The event of one line of an SSE body (``data: {...}``), None for any other line."""
    payload = line[5:].strip() if line.startswith("data:") else ""
    return json.loads(payload) if payload else None


def request(mode: str) -> dict[str, str]:
    """The body of one turn: the prompt, in ``mode``, in the benchmark's voice."""
    return {"prompt": PROMPT, "mode": mode, "voice": VOICE}


async def sse_turn(client: httpx.AsyncClient, url: str, mode: str) -> dict:
    """One turn through an agent app's ``POST /invocations`` (SSE), as :func:`_turn_stats`."""
    t0 = time.perf_counter()
    async with client.stream("POST", f"{url}/invocations", json=request(mode)) as r:
        if r.status_code != 200:
            raise RuntimeError(f"agent answered HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        events = [(time.perf_counter(), e) async for line in r.aiter_lines() if (e := sse_event(line)) is not None]
    return _turn_stats(events, t0)


def new_result(quick: bool, modes: tuple[str, ...], extra: list[str] | None = None, **config: Any) -> Result:
    """An e2e result before its turns (``extra``: the command line's options past ``--quick``)."""
    return Result("e2e", quick, command_line("e2e", quick, extra), config={
        "prompt": PROMPT, **config, "voice": VOICE, "modes": list(modes), "runs_per_mode": 2 if quick else 5,
        "aws_reference_speedup": AWS_REFERENCE_SPEEDUP})


class AgentCoreTurns:
    """Turns through a Bedrock AgentCore runtime: ``invoke_agent_runtime`` with the prompt and mode, a
    new runtime session each, the SSE response read line by line as it streams. Blocking (boto3): call
    :meth:`turn` in a worker thread. ``client`` may be any ``bedrock-agentcore`` boto3 client."""

    def __init__(self, arn: str, *, region: str | None = None, client: Any = None):
        self.arn = arn
        if client is None:
            import boto3

            client = boto3.client("bedrock-agentcore", region_name=region or arn.split(":")[3])
        self.client = client

    def turn(self, mode: str) -> dict:
        t0 = time.perf_counter()
        resp = self.client.invoke_agent_runtime(
            agentRuntimeArn=self.arn, runtimeSessionId=f"kokoro-bench-{uuid.uuid4()}",
            payload=json.dumps(request(mode)).encode(), contentType="application/json", accept="text/event-stream")
        events = [(time.perf_counter(), e) for raw in resp["response"].iter_lines()
                  if (e := sse_event(raw.decode("utf-8", errors="replace"))) is not None]
        return _turn_stats(events, t0)


def run(*, quick: bool = False, model_dir=None, log=print, backend: str = "onnx", agent_url: str | None = None,
        agent_runtime_arn: str | None = None, region: str | None = None, agentcore_client: Any = None) -> Result:
    if agent_url or agent_runtime_arn:
        return _deployed(quick, log, agent_url, agent_runtime_arn, region, agentcore_client)
    result = new_result(quick, MODES, reply=REPLY, tokens_per_second=TOKENS_PER_SECOND, model="scripted")
    with LiveServer(backend=backend, model_dir=model_dir, log=log) as tts:
        before = tts.scrape()
        result.config["path"] = "AgentCore app subprocess, POST /invocations, SSE"
        argv = [*_agent_command(), "serve", "--model", "scripted", "--tokens-per-second", str(TOKENS_PER_SECOND),
                "--reply", REPLY, "--tts-url", tts.url, "--voice", VOICE]
        result.config["agent_command"] = shown_command(argv)
        result.config["agent_command_no_early_clause"] = shown_command([*argv, "--first-clause-words", "0"])
        try:
            with LiveServer(argv=argv, name="kokoro-agent (scripted)", log=log, startup_timeout_s=120) as agent, \
                    LiveServer(argv=[*argv, "--first-clause-words", "0"], name="kokoro-agent (no early clause)",
                               log=log, startup_timeout_s=120) as plain:
                urls = {True: agent.url, False: plain.url}
                result.samples = rounds_over_http(
                    result, lambda http, m: sse_turn(http, urls[VARIANTS[m][1]], VARIANTS[m][0]), log)
        except ServerFailed as e:
            return not_run(result, f"the agent app did not start: {str(e)[:600]}")
        result.server_view = {"tts": prom.server_view(before, tts.scrape())}
    summarize(result)
    return result


def _deployed(quick: bool, log, agent_url: str | None, arn: str | None, region: str | None, client: Any) -> Result:
    """The turns through an agent this benchmark did not start, by URL or AgentCore runtime ARN."""
    extra = ["--agent-url", agent_url] if agent_url else ["--agent-runtime-arn", arn or ""]
    result = new_result(quick, DEPLOYED_MODES, extra, model="the deployed agent's", reply="the deployed agent's",
                        tokens_per_second=None)
    try:  # unreachable, refused, no credentials: a not_run result that says so
        if agent_url:
            url = agent_url.rstrip("/").removesuffix("/invocations")
            result.config["path"] = f"running agent app at {url}, POST /invocations, SSE"
            result.samples = rounds_over_http(result, lambda http, mode: sse_turn(http, url, mode), log)
        else:
            result.config["path"] = f"Bedrock AgentCore runtime {arn}, invoke_agent_runtime, SSE"
            turns = AgentCoreTurns(arn or "", region=region, client=client)
            result.samples = rounds_over_http(result, lambda _h, mode: asyncio.to_thread(turns.turn, mode), log)
    except Exception as e:
        return not_run(result, f"the agent did not answer: {type(e).__name__}: {str(e)[:600]}")
    summarize(result)
    for mode in DEPLOYED_MODES:  # the means beside the medians (AWS reports means)
        result.medians[mode]["first_audio_ms_mean"] = rnd(mean(s["first_audio_ms"] for s in result.samples
                                                              if s["mode"] == mode), 1)
    bidi, batch = (result.medians[m]["first_audio_ms_mean"] for m in DEPLOYED_MODES)
    result.summary.update(bidi_first_audio_ms_mean=bidi, batch_first_audio_ms_mean=batch,
                          speedup_of_means=ratio(batch, bidi))
    return result


def not_run(result: Result, why: str) -> Result:
    result.status = "not_run"
    result.notes.append(why)
    result.target("bidi first audio before batch", f"batch/bidi first audio (AWS: {AWS_REFERENCE_SPEEDUP}x)", None, None)
    print(f"  e2e not run: {why}", flush=True)
    return result


def summarize(result: Result) -> None:
    result.medians = medians_by(result.samples, "mode", {"first_text_ms": 1, "last_text_ms": 1, "first_audio_ms": 1,
                                                          "end_ms": 1, "audio_s": 3})
    bidi = result.medians["bidi"]["first_audio_ms"]
    batch = result.medians["batch"]["first_audio_ms"]
    speedup = ratio(batch, bidi)
    before_last_text = all(
        s["first_audio_ms"] is not None and s["last_text_ms"] is not None and s["first_audio_ms"] < s["last_text_ms"]
        for s in result.samples if s["mode"] == "bidi"
    )
    plain = result.medians.get("bidi_no_early_clause", {}).get("first_audio_ms")
    result.summary = {"bidi_first_audio_ms": bidi, "batch_first_audio_ms": batch, "speedup": speedup,
                      "bidi_no_early_clause_first_audio_ms": plain,
                      "early_clause_saves_ms": rnd(plain - bidi, 1) if bidi and plain else None,
                      "bidi_audio_before_last_text": before_last_text}
    result.target("bidi speedup in first audio", f"> 1x (AWS measured {AWS_REFERENCE_SPEEDUP}x locally)", speedup,
                  None if speedup is None else speedup > 1.0)


#: The table's columns (figure: heading) for the local agent and for a deployed one (means beside medians).
COLUMNS = {"first_text_ms": "first text ms", "last_text_ms": "last text ms", "first_audio_ms": "first audio ms",
           "end_ms": "turn ends ms", "audio_s": "audio s", "runs": "runs"}
DEPLOYED_COLUMNS = {"first_text_ms": "first text ms", "first_audio_ms": "first audio ms (median)",
                    "first_audio_ms_mean": "first audio ms (mean)", "end_ms": "turn ends ms", "audio_s": "audio s",
                    "runs": "runs"}


def body(data: dict[str, Any]) -> str:
    """The local agent's result or a deployed one's (it has the means, ``summary.speedup_of_means``)."""
    if data.get("status") == "not_run":
        return "**Not run.** " + " ".join(data["notes"])
    m, s, config = data["medians"], data["summary"], data["config"]
    deployed = "speedup_of_means" in s
    columns = DEPLOYED_COLUMNS if deployed else COLUMNS
    table = markdown_table(["mode", *columns.values()], [[mode, *(v[k] for k in columns)] for mode, v in m.items()])
    if deployed:
        return (f"First audio through a deployed agent ({config['path']}; its own model and TTS server): "
                f"bidi **{s['bidi_first_audio_ms']} ms** vs batch **{s['batch_first_audio_ms']} ms** median "
                f"({s['speedup']}x), means {s['bidi_first_audio_ms_mean']} vs {s['batch_first_audio_ms_mean']} ms "
                f"({s['speedup_of_means']}x; AWS reports {config['aws_reference_speedup']}x on AgentCore).\n\n{table}")
    return (
        f"First audio through the agent ({config['path']}; scripted model at "
        f"{config['tokens_per_second']:.0f} tokens/s): bidi **{s['bidi_first_audio_ms']} ms** vs batch "
        f"**{s['batch_first_audio_ms']} ms** ({s['speedup']}x; AWS reports {config['aws_reference_speedup']}x); "
        f"bidi without the early first clause **{s.get('bidi_no_early_clause_first_audio_ms')} ms**. "
        f"Medians.\n\n{table}"
    )


def plot(data: dict[str, Any], path) -> None:
    if data.get("status") != "not_run":
        first_audio_plot(data, path, behind="last_text_ms", behind_label="text generation (median)",
                         xlabel="ms since the prompt was sent", title=f"Agent first audio ({data['command']})")
