"""The end-to-end benchmark against an agent it did not start: ``python -m benchmarks e2e --agent-url
URL`` (a running agent app) or ``--agent-runtime-arn ARN`` (Bedrock AgentCore, through boto3's
``invoke_agent_runtime``): :mod:`benchmarks.e2e`'s turns, figures and Markdown, bidi vs batch, the means
beside the medians; an agent that does not answer gives a ``not_run`` result. See docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from . import e2e, ttfa
from .results import Result, mean, ratio, rnd

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
        t0 = time.perf_counter()
        resp = self.client.invoke_agent_runtime(
            agentRuntimeArn=self.arn, runtimeSessionId=f"kokoro-bench-{uuid.uuid4()}",
            payload=json.dumps(e2e.request(mode)).encode(), contentType="application/json", accept="text/event-stream")
        events = [(time.perf_counter(), e) for raw in resp["response"].iter_lines()
                  if (e := e2e.sse_event(raw.decode("utf-8", errors="replace"))) is not None]
        return e2e._turn_stats(events, t0)


def run(*, quick: bool = False, model_dir=None, log=print, agent_url: str | None = None,
        agent_runtime_arn: str | None = None, region: str | None = None, agentcore_client: Any = None) -> Result:
    extra = ["--agent-url", agent_url] if agent_url else ["--agent-runtime-arn", agent_runtime_arn or ""]
    result = e2e.new_result(quick, MODES, extra, model="the deployed agent's", reply="the deployed agent's",
                            tokens_per_second=None)
    try:  # unreachable, refused, no credentials: a not_run result that says so
        if agent_url:
            url = agent_url.rstrip("/").removesuffix("/invocations")
            result.config["path"] = f"running agent app at {url}, POST /invocations, SSE"
            result.samples = ttfa.rounds_over_http(result, lambda http, mode: e2e.sse_turn(http, url, mode), log)
        else:
            result.config["path"] = f"Bedrock AgentCore runtime {agent_runtime_arn}, invoke_agent_runtime, SSE"
            turns = AgentCoreTurns(agent_runtime_arn or "", region=region, client=agentcore_client)
            result.samples = ttfa.rounds_over_http(result, lambda _h, mode: asyncio.to_thread(turns.turn, mode), log)
    except Exception as e:
        return e2e.not_run(result, f"the agent did not answer: {type(e).__name__}: {str(e)[:600]}")
    e2e.summarize(result)
    for mode in MODES:  # the means beside the medians (AWS reports means)
        result.medians[mode]["first_audio_ms_mean"] = rnd(mean(s["first_audio_ms"] for s in result.samples
                                                              if s["mode"] == mode), 1)
    bidi, batch = (result.medians[m]["first_audio_ms_mean"] for m in MODES)
    result.summary.update(bidi_first_audio_ms_mean=bidi, batch_first_audio_ms_mean=batch,
                          speedup_of_means=ratio(batch, bidi))
    return result


#: the local benchmark's Markdown (a deployed result has the means beside the medians) and picture
body, plot = e2e.body, e2e.plot
