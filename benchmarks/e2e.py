"""End to end: first audio through the agent, ``bidi`` vs ``batch``, with the scripted model
streaming a fixed reply at a fixed token rate (so runs compare), against a live TTS server.

The AgentCore app runs as a subprocess (``kokoro-agent serve`` / ``python -m agent serve`` ``--model scripted
--tokens-per-second R --tts-url URL``); each turn is a ``POST /invocations`` with ``{"prompt", "mode", "voice"}``,
reading its SSE events; first audio is when the first ``audio_chunk`` event reaches this client.
When the app does not start, the benchmark writes a ``not_run`` result with the reason and exits
non-zero.

It reaches a deployed agent too, with whatever model and TTS server that agent runs:
``--agent-url URL`` (any running agent app, local or remote: the same ``POST /invocations`` and SSE)
and ``--agent-runtime-arn ARN`` (a Bedrock AgentCore runtime, through boto3's ``invoke_agent_runtime``,
credentials from boto3's usual chain, the region from the ARN unless ``--region`` says otherwise).
Nothing is started then. Means beside medians.

Modes alternate run by run, so load drift hits both alike.
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
from .results import Result, command_line, load_average, markdown_table, mean, median, rnd, shown_command
from .texts import PARAGRAPH

TOKENS_PER_SECOND = 30.0
PROMPT = "Why does streaming speech feel faster?"
#: The scripted reply: the TTFA paragraph (267 characters, 4 sentences), so the two benchmarks compare.
REPLY = PARAGRAPH
MODES = ("bidi", "batch")
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
        return next((round((t - t0) * 1000, 1) for t, e in events if e.get("type") == kind), None)

    texts = [t for t, e in events if e.get("type") == "text_delta"]
    audio_bytes = 0
    for _, e in events:
        if e.get("type") == "audio_chunk":
            audio_bytes += len(e.get("audio", "")) * 3 // 4
    errors = [e for _, e in events if e.get("type") == "error"]
    end = next((e for _, e in events if e.get("type") == "agent_end"), {})
    return {
        "first_text_ms": first("text_delta"),
        "last_text_ms": round((texts[-1] - t0) * 1000, 1) if texts else None,
        "first_audio_ms": first("audio_chunk"),
        "end_ms": round((events[-1][0] - t0) * 1000, 1) if events else None,
        "audio_s": round(audio_bytes / 48_000, 3),
        "agent_reported_first_audio_ms": end.get("first_audio_ms"),
        "errors": [f"{e.get('code')}: {e.get('message')}" for e in errors],
    }


async def _sse_turn(client: httpx.AsyncClient, url: str, mode: str) -> dict:
    events: list[tuple[float, dict]] = []
    t0 = time.perf_counter()
    async with client.stream("POST", f"{url}/invocations", json={"prompt": PROMPT, "mode": mode, "voice": VOICE}) as r:
        if r.status_code != 200:
            raise RuntimeError(f"agent answered HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                payload = line[5:].strip()
                if payload:
                    events.append((time.perf_counter(), json.loads(payload)))
    return _turn_stats(events, t0)


async def _measure(turn, runs: int, log) -> list[dict]:
    samples = []
    for run in range(1, runs + 1):
        for mode in MODES:
            s = await turn(mode)
            s.update({"mode": mode, "run": run, "load_1m": (load_average() or [None])[0]})
            samples.append(s)
            log(
                f"  run {run}/{runs} {mode:<5} first text {s['first_text_ms']} ms  last text {s['last_text_ms']} ms  "
                f"first audio {s['first_audio_ms']} ms  audio {s['audio_s']} s" + (f"  errors {s['errors']}" if s["errors"] else "")
            )
            await asyncio.sleep(0.3)
    return samples


class AgentCoreTurns:
    """Turns through a Bedrock AgentCore runtime: ``invoke_agent_runtime`` with the prompt and mode,
    the SSE response read line by line as it streams. Blocking (boto3): call :meth:`turn` in a worker
    thread. ``client`` may be any ``bedrock-agentcore`` boto3 client (another endpoint, say)."""

    def __init__(self, arn: str, *, region: str | None = None, client: object | None = None):
        self.arn = arn
        if client is None:
            import boto3

            client = boto3.client("bedrock-agentcore", region_name=region or arn.split(":")[3])
        self.client = client

    def turn(self, mode: str) -> dict:
        payload = json.dumps({"prompt": PROMPT, "mode": mode, "voice": VOICE}).encode()
        events: list[tuple[float, dict]] = []
        t0 = time.perf_counter()
        resp = self.client.invoke_agent_runtime(  # type: ignore[attr-defined]
            agentRuntimeArn=self.arn, runtimeSessionId=f"kokoro-bench-{uuid.uuid4()}", payload=payload,
            contentType="application/json", accept="text/event-stream")
        for raw in resp["response"].iter_lines():
            line = raw.decode("utf-8", errors="replace")
            if line.startswith("data:") and line[5:].strip():
                events.append((time.perf_counter(), json.loads(line[5:].strip())))
        return _turn_stats(events, t0)


def run(*, quick: bool = False, model_dir=None, log=print, agent_url: str | None = None,
        agent_runtime_arn: str | None = None, region: str | None = None, agentcore_client: object | None = None) -> Result:
    runs = 2 if quick else 5
    extra = ["--agent-url", agent_url] if agent_url else ["--agent-runtime-arn", agent_runtime_arn] if agent_runtime_arn else []
    result = Result(
        "e2e", quick, command_line("e2e", quick, [a for a in extra if a]),
        config={"prompt": PROMPT, "reply": REPLY, "tokens_per_second": TOKENS_PER_SECOND, "model": "scripted", "voice": VOICE,
                "modes": list(MODES), "runs_per_mode": runs, "aws_reference_speedup": AWS_REFERENCE_SPEEDUP},
    )
    if agent_url or agent_runtime_arn:
        return _run_deployed(result, runs, log, agent_url=agent_url, arn=agent_runtime_arn, region=region,
                             client=agentcore_client)
    with LiveServer(model_dir=model_dir, log=log) as tts:
        before = tts.scrape()
        result.config["path"] = "AgentCore app subprocess, POST /invocations, SSE"
        argv = [*_agent_command(), "serve", "--model", "scripted", "--tokens-per-second", str(TOKENS_PER_SECOND),
                "--reply", REPLY, "--tts-url", tts.url, "--voice", VOICE]
        result.config["agent_command"] = shown_command(argv)
        try:
            with LiveServer(argv=argv, name="kokoro-agent (scripted)", log=log, startup_timeout_s=120) as agent:

                async def main() -> list[dict]:
                    async with httpx.AsyncClient(timeout=600) as client:
                        return await _measure(lambda m: _sse_turn(client, agent.url, m), runs, log)

                result.samples = asyncio.run(main())
        except ServerFailed as e:
            return _not_run(result, f"the agent app did not start: {str(e)[:600]}")
        result.server_view = {"tts": prom.server_view(before, tts.scrape())}
    summarize(result)
    return result


def _run_deployed(result: Result, runs: int, log, *, agent_url: str | None, arn: str | None, region: str | None,
                  client: object | None) -> Result:
    """Turns against an agent this benchmark did not start (its own model and TTS server)."""
    result.config.update(model="the deployed agent's", reply="the deployed agent's", tokens_per_second=None)
    if agent_url:
        url = agent_url.rstrip("/").removesuffix("/invocations")
        result.config["path"] = f"running agent app at {url}, POST /invocations, SSE"

        async def main() -> list[dict]:
            async with httpx.AsyncClient(timeout=600) as http:
                return await _measure(lambda m: _sse_turn(http, url, m), runs, log)
    else:
        result.config["path"] = f"Bedrock AgentCore runtime {arn}, invoke_agent_runtime, SSE"

        async def main() -> list[dict]:
            turns = AgentCoreTurns(arn or "", region=region, client=client)
            return await _measure(lambda m: asyncio.to_thread(turns.turn, m), runs, log)

    try:
        result.samples = asyncio.run(main())
    except Exception as e:  # unreachable, refused, no credentials: a not_run result that says so
        return _not_run(result, f"the agent did not answer: {type(e).__name__}: {str(e)[:600]}")
    summarize(result)
    return result


def _not_run(result: Result, why: str) -> Result:
    result.status = "not_run"
    result.notes.append(why)
    result.target("bidi first audio before batch", f"batch/bidi first audio (AWS: {AWS_REFERENCE_SPEEDUP}x)", None, None)
    print(f"  e2e not run: {why}", flush=True)
    return result


def summarize(result: Result) -> None:
    for mode in MODES:
        xs = [s for s in result.samples if s["mode"] == mode]
        result.medians[mode] = {
            key: rnd(median(s[key] for s in xs), 1)
            for key in ("first_text_ms", "last_text_ms", "first_audio_ms", "end_ms")
        } | {"audio_s": rnd(median(s["audio_s"] for s in xs), 3), "runs": len(xs),
             "first_audio_ms_mean": rnd(mean(s["first_audio_ms"] for s in xs), 1)}
    bidi = result.medians["bidi"]["first_audio_ms"]
    batch = result.medians["batch"]["first_audio_ms"]
    speedup = round(batch / bidi, 3) if bidi and batch else None
    before_last_text = all(
        s["first_audio_ms"] is not None and s["last_text_ms"] is not None and s["first_audio_ms"] < s["last_text_ms"]
        for s in result.samples if s["mode"] == "bidi"
    )
    bidi_mean, batch_mean = result.medians["bidi"]["first_audio_ms_mean"], result.medians["batch"]["first_audio_ms_mean"]
    result.summary = {"bidi_first_audio_ms": bidi, "batch_first_audio_ms": batch, "speedup": speedup,
                      "bidi_first_audio_ms_mean": bidi_mean, "batch_first_audio_ms_mean": batch_mean,
                      "speedup_of_means": round(batch_mean / bidi_mean, 3) if bidi_mean and batch_mean else None,
                      "bidi_audio_before_last_text": before_last_text}
    result.target("bidi speedup in first audio", f"> 1x (AWS measured {AWS_REFERENCE_SPEEDUP}x locally)", speedup,
                  None if speedup is None else speedup > 1.0)


def body(data: dict[str, Any]) -> str:
    if data.get("status") == "not_run":
        return "**Not run.** " + " ".join(data["notes"])
    m, s = data["medians"], data["summary"]
    rows = [[mode, v["first_text_ms"], v["last_text_ms"], v["first_audio_ms"], v.get("first_audio_ms_mean"), v["end_ms"],
             v["audio_s"], v["runs"]] for mode, v in m.items()]
    table = markdown_table(["mode", "first text ms", "last text ms", "first audio ms", "first audio ms (mean)",
                            "turn ends ms", "audio s", "runs"], rows)
    tps = data["config"]["tokens_per_second"]
    model = f"scripted model at {tps:.0f} tokens/s" if tps else "the deployed agent's own model"
    return (
        f"First audio through the agent ({data['config']['path']}; {model}): bidi **{s['bidi_first_audio_ms']} ms** vs "
        f"batch **{s['batch_first_audio_ms']} ms** ({s['speedup']}x; AWS reports {data['config']['aws_reference_speedup']}x). "
        f"Medians; means {s.get('bidi_first_audio_ms_mean')} vs {s.get('batch_first_audio_ms_mean')} ms "
        f"({s.get('speedup_of_means')}x).\n\n{table}"
    )


def plot(data: dict[str, Any], path) -> None:
    if data.get("status") == "not_run":
        return
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 2.8))
    for i, mode in enumerate(data["medians"]):
        v = data["medians"][mode]
        ax.barh(i, v["last_text_ms"] or 0, color="#d9d9d9", label="text generation" if i == 0 else None)
        ax.scatter([v["first_audio_ms"]], [i], color="#3b7dd8", s=60, zorder=3, label="first audio" if i == 0 else None)
    ax.set_yticks(range(len(data["medians"])), list(data["medians"]))
    ax.set_xlabel("ms since the prompt was sent")
    ax.set_title(f"Agent first audio ({data['command']})", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
