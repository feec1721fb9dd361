"""The end-to-end benchmark against an agent it did not start (docs/benchmarks.md): ``python -m
benchmarks e2e --agent-url URL`` (any running agent app: ``POST /invocations``, SSE) or
``--agent-runtime-arn ARN`` (a Bedrock AgentCore runtime, through boto3's ``invoke_agent_runtime``;
boto3's usual credentials, the region from the ARN unless ``--region``). ``bidi`` and ``batch`` take
turns on the same prompt; medians and means (AWS reports means); an agent that does not answer gives
a ``not_run`` result with the reason. The figures, the result's shape and its Markdown are
:mod:`benchmarks.e2e`'s.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import httpx

from . import e2e
from .results import Result, command_line, markdown_table, mean, rnd

MODES = ("bidi", "batch")


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
        events: list[tuple[float, dict]] = []
        t0 = time.perf_counter()
        resp = self.client.invoke_agent_runtime(
            agentRuntimeArn=self.arn, runtimeSessionId=f"kokoro-bench-{uuid.uuid4()}",
            payload=json.dumps({"prompt": e2e.PROMPT, "mode": mode, "voice": e2e.VOICE}).encode(), contentType="application/json", accept="text/event-stream")
        for raw in resp["response"].iter_lines():
            if (event := e2e.sse_event(raw.decode("utf-8", errors="replace"))) is not None:
                events.append((time.perf_counter(), event))
        return e2e._turn_stats(events, t0)


def run(*, quick: bool = False, model_dir=None, log=print, agent_url: str | None = None,
        agent_runtime_arn: str | None = None, region: str | None = None, agentcore_client: Any = None) -> Result:
    runs = 2 if quick else 5
    extra = ["--agent-url", agent_url] if agent_url else ["--agent-runtime-arn", agent_runtime_arn or ""]
    result = Result("e2e", quick, command_line("e2e", quick, extra), config={
        "prompt": e2e.PROMPT, "model": "the deployed agent's", "reply": "the deployed agent's", "tokens_per_second": None,
        "voice": e2e.VOICE, "modes": list(MODES), "runs_per_mode": runs, "aws_reference_speedup": e2e.AWS_REFERENCE_SPEEDUP})
    if agent_url:
        url = agent_url.rstrip("/").removesuffix("/invocations")
        result.config["path"] = f"running agent app at {url}, POST /invocations, SSE"

        async def main() -> list[dict]:
            async with httpx.AsyncClient(timeout=600) as http:
                return await e2e.measure(lambda m: e2e.sse_turn(http, url, m), runs, log, MODES)
    else:
        result.config["path"] = f"Bedrock AgentCore runtime {agent_runtime_arn}, invoke_agent_runtime, SSE"

        async def main() -> list[dict]:
            turns = AgentCoreTurns(agent_runtime_arn or "", region=region, client=agentcore_client)
            return await e2e.measure(lambda m: asyncio.to_thread(turns.turn, m), runs, log, MODES)

    try:
        result.samples = asyncio.run(main())
    except Exception as e:  # unreachable, refused, no credentials: a not_run result that says so
        return e2e._not_run(result, f"the agent did not answer: {type(e).__name__}: {str(e)[:600]}")
    summarize(result)
    return result


def summarize(result: Result) -> None:
    """:func:`benchmarks.e2e.summarize`, then the means beside its medians."""
    e2e.summarize(result)
    for mode in MODES:
        result.medians[mode]["first_audio_ms_mean"] = rnd(mean(s["first_audio_ms"] for s in result.samples
                                                              if s["mode"] == mode), 1)
    bidi, batch = (result.medians[m]["first_audio_ms_mean"] for m in MODES)
    result.summary.update(bidi_first_audio_ms_mean=bidi, batch_first_audio_ms_mean=batch,
                          speedup_of_means=round(batch / bidi, 3) if bidi and batch else None)


def body(data: dict[str, Any]) -> str:
    if data.get("status") == "not_run":
        return e2e.body(data)
    s, m = data["summary"], data["medians"]
    rows = [[mode, m[mode]["first_text_ms"], m[mode]["first_audio_ms"], m[mode]["first_audio_ms_mean"], m[mode]["end_ms"],
             m[mode]["audio_s"], m[mode]["runs"]] for mode in MODES]
    table = markdown_table(["mode", "first text ms", "first audio ms (median)", "first audio ms (mean)",
                                "turn ends ms", "audio s", "runs"], rows)
    return (f"First audio through a deployed agent ({data['config']['path']}; its own model and TTS server): bidi "
            f"**{s['bidi_first_audio_ms']} ms** vs batch **{s['batch_first_audio_ms']} ms** median ({s['speedup']}x), "
            f"means {s['bidi_first_audio_ms_mean']} vs {s['batch_first_audio_ms_mean']} ms ({s['speedup_of_means']}x; "
            f"AWS reports {data['config']['aws_reference_speedup']}x on AgentCore).\n\n{table}")


#: the local benchmark's picture: first audio against the text's generation, by mode
plot = e2e.plot
