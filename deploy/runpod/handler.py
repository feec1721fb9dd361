"""RunPod serverless worker: streams Kokoro speech, one base64 audio chunk per synthesised segment.

The worker runs the same server as every other deployment — ``kokoro-serve serve`` on loopback,
started once per worker as a child process — and talks to it over its bidirectional WebSocket, so
RunPod, SageMaker and local use share one code path (text splitting, batching across concurrent
jobs, limits, metrics), through the contract client that every client here shares
(``agent.ws_client``). Set ``KOKORO_SERVER_URL`` (and ``KOKORO_SERVER_API_KEY``) to use a server that is
already running instead (:class:`deploy.runpod.settings.RunPodSettings`).

Job input (``job["input"]``)::

    {"text": "One or more sentences."}            # or "texts": ["first", "second", ...]
    optional: "voice", "speed" (0.5-2.0), "sample_rate"

Each streamed output (an async generator: RunPod's ``/stream`` returns them as they come)::

    {"request": 0, "index": 0, "audio": "<base64 PCM s16le mono>", "sample_rate": 24000,
     "encoding": "pcm_s16le"}

one per segment — a sentence, or a piece of a long one (the first may be a clause cut early so the
first audio comes sooner) — followed, per request, by ``{"request": i, "complete": {...}}`` with the
server's ``audio_duration_s``/``elapsed_s``/``ttfa_ms``. A refused text gets
``{"request": i, "failed": {"code", "message"}}`` in its place and the job goes on with the next
text (the session stays open, as the contract says); when every text of the job was refused, the
job ends with ``{"error": "<code>: <message>"}`` (RunPod then reports it FAILED). Per-text failures
do not use the ``error`` key: RunPod's worker stops reading a job's stream at the first item with one.

Run it locally with RunPod's own worker API (this is what the tests do)::

    python deploy/runpod/handler.py --rp_serve_api --rp_api_port 8000
    curl -s localhost:8000/runsync -d '{"input": {"text": "Hello there."}}'

Concurrency: jobs run as concurrent coroutines on the worker's event loop, each with its own
WebSocket session; the server batches their segments together in concurrent mode. Cancelling a job
(RunPod cancels the generator) closes its session, and the server drops its queued work.
"""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from server.process import ServerProcess

_FIELDS = ("voice", "speed", "sample_rate")


def start_local_server(mode: str = "concurrent", start_timeout_s: float = 900.0) -> ServerProcess:
    """``kokoro-serve serve`` as a child process on 127.0.0.1, ready (``/ping`` answered). Blocking;
    call before the loop. Its output is the worker's own (RunPod shows it in the worker's log)."""
    from server.process import ServerProcess

    return ServerProcess(env={"KOKORO_MODE": mode}, drop_env=("KOKORO_API_KEY",)).wait_ready(
        timeout=start_timeout_s)  # loopback only: nothing else can reach it, so no key


def parse_input(job_input: Any) -> tuple[list[str], dict[str, Any]]:
    """``(texts, options)`` from a job's input; raises ValueError with a message for the caller."""
    if not isinstance(job_input, dict):
        raise ValueError("input must be an object with `text` or `texts`")
    texts = job_input.get("texts", [job_input["text"]] if "text" in job_input else None)
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
        raise ValueError("`text` must be a non-empty string (or `texts` a non-empty list of them)")
    return texts, {k: job_input[k] for k in _FIELDS if job_input.get(k) is not None}


async def stream_speech(server_url: str, texts: list[str], options: dict[str, Any],
                        *, api_key: str | None = None) -> AsyncIterator[dict[str, Any]]:
    """Yield the job's outputs (see the module docstring) from one session of the contract client.

    A refused text yields its ``failed`` output and the session goes on with the next text; only
    when every text failed does the job end with ``{"error": ...}`` (the first failure's)."""
    from agent.messages import AudioChunk, SynthesisComplete, SynthesisFailed, SynthesisStart
    from agent.ws_client import ContractSession

    async with await ContractSession.connect(server_url, api_key=api_key, max_size=None) as session:
        for i, text in enumerate(texts):  # pipelined: the server answers strictly in order
            await session.synthesize(text, str(i), **options)
        await session.close()
        index, rate, failures = 0, 24_000, []
        async for event in session.events():
            if isinstance(event, AudioChunk):
                yield {"request": _request_index(event.request_id), "index": index, "sample_rate": rate,
                       "audio": base64.b64encode(event.pcm).decode("ascii"), "encoding": "pcm_s16le"}
                index += 1
            elif isinstance(event, SynthesisStart):
                index, rate = 0, event.sample_rate
            elif isinstance(event, SynthesisComplete):
                done = {"audio_duration_s": event.audio_duration_s, "elapsed_s": event.elapsed_s,
                        "ttfa_ms": event.ttfa_ms}
                yield {"request": _request_index(event.request_id), "complete": done}
            elif isinstance(event, SynthesisFailed):
                failures.append(f"{event.code}: {event.message}")
                yield {"request": _request_index(event.request_id), "failed": {"code": event.code,
                                                                               "message": event.message}}
        if len(failures) == len(texts):
            yield {"error": failures[0]}


def _request_index(request_id: str | None) -> int | None:
    return int(request_id) if request_id is not None and request_id.isdigit() else None


def make_handler(server_url: str, *, api_key: str | None = None):
    """The RunPod handler (an async generator function) bound to a running server."""

    async def handler(job: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        try:
            texts, options = parse_input(job.get("input"))
        except ValueError as exc:
            yield {"error": f"invalid_request: {exc}"}
            return
        async for output in stream_speech(server_url, texts, options, api_key=api_key):
            yield output

    return handler


def main() -> None:
    import runpod

    from deploy.runpod.settings import RunPodSettings

    settings = RunPodSettings.from_env(os.environ)
    server = None
    url = settings.server_url
    if not url:
        server = start_local_server(settings.mode)
        url = server.url
    try:
        runpod.serverless.start({"handler": make_handler(url, api_key=settings.server_api_key),
                                 "return_aggregate_stream": True})
    finally:
        if server:
            server.stop()


if __name__ == "__main__":
    # Run as a script, this file's folder comes first on sys.path, and its deploy.py would shadow the
    # deploy package: the repository root takes its place.
    sys.path[0] = str(Path(__file__).resolve().parents[2])
    main()
