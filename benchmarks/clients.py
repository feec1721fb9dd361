"""Wire clients that time what a user hears: the WebSocket contract (DESIGN.md §4) and
``POST /invocations``. Times are ``time.perf_counter()`` seconds from the moment the request
(or the first request of a pipelined burst) left the client.

Cancellation: cancelling a coroutine here closes its socket/response, which the server takes as
"client went away" and aborts the remaining work.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass

import httpx
from websockets.asyncio.client import ClientConnection, connect

BYTES_PER_SECOND = 24_000 * 2  # s16le mono at 24 kHz


class RequestFailed(RuntimeError):
    """The server answered a request with an error (the message has its code)."""


@dataclass
class Timing:
    """One request as the client saw it (seconds; ``None`` where it never happened)."""

    request_id: str
    first_audio_s: float | None = None
    complete_s: float | None = None
    audio_bytes: int = 0
    server_ttfa_ms: float | None = None
    error: str | None = None

    @property
    def audio_s(self) -> float:
        return self.audio_bytes / BYTES_PER_SECOND

    def to_dict(self) -> dict:
        out = asdict(self)
        out["audio_s"] = round(self.audio_s, 4)
        for key in ("first_audio_s", "complete_s"):
            if out[key] is not None:
                out[key] = round(out[key], 5)
        return out


class WsSession:
    """One open ``/invocations-bidirectional-stream`` session.

    ``await session.synthesize([t1, t2, ...])`` sends every text at once (pipelined, as a sentence
    chunker would) and returns one :class:`Timing` per text once the last one completed; times are
    measured from the first send. Not safe to share between concurrent tasks.
    """

    def __init__(self, url: str, *, voice: str | None = None, speed: float = 1.0):
        self.url, self.voice, self.speed = url, voice, speed
        self._ws: ClientConnection | None = None
        self._n = 0
        self.connect_s: float | None = None

    async def __aenter__(self) -> WsSession:
        t0 = time.perf_counter()
        self._ws = await connect(self.url, max_size=None, open_timeout=30)
        self.connect_s = time.perf_counter() - t0
        return self

    async def __aexit__(self, *exc) -> None:
        if self._ws is not None:
            await self._ws.close()
            self._ws = None

    def _message(self, text: str, rid: str) -> str:
        msg: dict = {"text": text, "request_id": rid, "speed": self.speed}
        if self.voice:
            msg["voice"] = self.voice
        return json.dumps(msg)

    async def synthesize(self, texts: list[str] | tuple[str, ...], *, raise_on_error: bool = True) -> list[Timing]:
        ws = self._ws
        if ws is None:
            raise RuntimeError("use `async with WsSession(...)`")
        ids = [f"bench-{self._n + i + 1}" for i in range(len(texts))]
        self._n += len(texts)
        timings = {rid: Timing(rid) for rid in ids}
        t0 = time.perf_counter()
        for text, rid in zip(texts, ids, strict=True):
            await ws.send(self._message(text, rid))
        pending, current = set(ids), None
        while pending:
            frame = await ws.recv()
            now = time.perf_counter() - t0
            if isinstance(frame, bytes):
                if current is None:
                    raise RequestFailed("audio frame before synthesis_start")
                t = timings[current]
                if t.first_audio_s is None:
                    t.first_audio_s = now
                t.audio_bytes += len(frame)
                continue
            msg = json.loads(frame)
            rid = str(msg.get("request_id")) if msg.get("request_id") is not None else None
            kind = msg.get("type")
            if kind == "synthesis_start":
                current = rid
            elif kind == "synthesis_complete" and rid in timings:
                timings[rid].complete_s = now
                timings[rid].server_ttfa_ms = msg.get("ttfa_ms")
                pending.discard(rid)
                current = None
            elif kind == "error":
                err = f"{msg.get('code')}: {msg.get('message')}"
                if raise_on_error:
                    raise RequestFailed(err)
                for key in [rid] if rid in timings else list(pending):
                    timings[key].error = err
                    pending.discard(key)
        return [timings[rid] for rid in ids]


async def http_synthesize(
    client: httpx.AsyncClient,
    base_url: str,
    text: str,
    *,
    stream: bool = True,
    fmt: str = "pcm",
    voice: str | None = None,
    speed: float = 1.0,
) -> Timing:
    """``POST /invocations``; ``first_audio_s`` is the first body byte, ``complete_s`` the last.
    With ``fmt="pcm"`` the body is audio only, so byte counts are audio."""
    body: dict = {"text": text, "format": fmt, "stream": stream, "speed": speed}
    if voice:
        body["voice"] = voice
    timing = Timing(f"http-{id(body)}")
    t0 = time.perf_counter()
    async with client.stream("POST", f"{base_url}/invocations", json=body) as r:
        if r.status_code != 200:
            detail = (await r.aread())[:300].decode(errors="replace")
            raise RequestFailed(f"HTTP {r.status_code}: {detail}")
        async for chunk in r.aiter_raw():
            if chunk and timing.first_audio_s is None:
                timing.first_audio_s = time.perf_counter() - t0
            timing.audio_bytes += len(chunk)
    timing.complete_s = time.perf_counter() - t0
    return timing


async def http_body(client: httpx.AsyncClient, base_url: str, text: str, *, fmt: str, voice: str | None) -> bytes:
    """The complete body of a non-streamed ``POST /invocations`` in ``fmt``."""
    body: dict = {"text": text, "format": fmt, "stream": False}
    if voice:
        body["voice"] = voice
    r = await client.post(f"{base_url}/invocations", json=body)
    if r.status_code != 200:
        raise RequestFailed(f"HTTP {r.status_code}: {r.text[:300]}")
    return r.content


async def ws_audio(url: str, text: str, *, voice: str | None) -> bytes:
    """All PCM of one request over a fresh WebSocket session."""
    chunks: list[bytes] = []
    async with connect(url, max_size=None, open_timeout=30) as ws:
        await ws.send(json.dumps({"text": text, **({"voice": voice} if voice else {})}))
        while True:
            frame = await asyncio.wait_for(ws.recv(), timeout=300)
            if isinstance(frame, bytes):
                chunks.append(frame)
                continue
            msg = json.loads(frame)
            if msg.get("type") == "synthesis_complete":
                return b"".join(chunks)
            if msg.get("type") == "error":
                raise RequestFailed(f"{msg.get('code')}: {msg.get('message')}")
