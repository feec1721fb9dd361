"""Reading the agent app's Server-Sent Events."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import httpx


def parse_sse(body: str) -> list[dict]:
    events = []
    for block in body.split("\n\n"):
        data = "\n".join(line[5:].strip() for line in block.splitlines() if line.startswith("data:"))
        if data:
            events.append(json.loads(data))
    return events


def iter_sse(response: httpx.Response) -> Iterator[tuple[float, dict]]:
    """(arrival time, event) as the lines arrive over a real connection."""
    data: list[str] = []
    for line in response.iter_lines():
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            yield time.monotonic(), json.loads("\n".join(data))
            data = []


def pcm_of(events: list[dict]) -> bytes:
    return b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "audio_chunk")
