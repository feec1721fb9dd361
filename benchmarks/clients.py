"""Wire clients that time what a user hears: the WebSocket contract (docs/wire-contract.md, through the one
contract client, ``agent.ws_client``) and ``POST /invocations``. Times are ``time.perf_counter()`` seconds from the moment the request
(or the first request of a pipelined burst) left the client.

Cancellation: cancelling a coroutine here closes its socket/response, which the server takes as
"client went away" and aborts the remaining work.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

import httpx

from agent.messages import (
    Answers,
    AudioChunk,
    SynthesisComplete,
    SynthesisFailed,
    Transport,
    TTSEvent,
    synthesis_request,
)
from agent.ws_client import ContractSession

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


class PlaybackClock:
    """A listener playing the audio in real time, on the client's own clock — written apart from
    the server's scheduler (``backends.schedule``) so that the two can disagree. Playback starts
    when the first audio arrives; audio that arrives after everything before it has finished
    playing leaves a gap, and the gaps are summed as underrun seconds."""

    def __init__(self) -> None:
        self.plays_until: float | None = None  # when the audio heard so far stops playing
        self.underrun_s = 0.0

    def heard(self, now: float, audio_s: float) -> float:
        """``audio_s`` seconds of audio arrived at ``now``; returns the gap before it (0: on time)."""
        starts = now if self.plays_until is None else max(now, self.plays_until)
        gap = 0.0 if self.plays_until is None else starts - self.plays_until
        self.plays_until = starts + audio_s
        self.underrun_s += gap
        return gap

    def behind(self, now: float) -> bool:
        """Whether the listener hears silence at ``now`` (its audio ran out, more is due)."""
        return self.plays_until is not None and now > self.plays_until


class WsSession:
    """One open ``/invocations-bidirectional-stream`` session, through the contract client
    (:class:`agent.ws_client.ContractSession`; messages as text frames unless ``frames="binary"``,
    which is what SageMaker delivers).

    ``await session.synthesize([t1, t2, ...])`` sends every text at once (pipelined, as a sentence
    chunker would) and returns one :class:`Timing` per text once the last one completed; times are
    measured from the first send. Not safe to share between concurrent tasks.
    """

    def __init__(self, url: str, *, voice: str | None = None, speed: float = 1.0, api_key: str | None = None,
                 frames: Literal["binary", "text"] = "text"):
        self.url, self.voice, self.speed = url, voice, speed
        self.api_key, self.frames = api_key, frames
        self.session: ContractSession | None = None
        self.burst: Burst | None = None
        self.connect_s: float | None = None

    async def __aenter__(self) -> WsSession:
        t0 = time.perf_counter()
        self.session = await ContractSession.connect(self.url, api_key=self.api_key, frames=self.frames, max_size=None)
        self.connect_s = time.perf_counter() - t0
        self.burst = Burst(self.session, voice=self.voice, speed=self.speed)
        return self

    async def __aexit__(self, *exc) -> None:
        if self.session is not None:
            await self.session.aclose()
            self.session = None

    async def synthesize(self, texts: list[str] | tuple[str, ...], *, raise_on_error: bool = True) -> list[Timing]:
        if self.burst is None:
            raise RuntimeError("use `async with WsSession(...)`")
        return await self.burst.synthesize(texts, raise_on_error=raise_on_error)


class Burst:
    """Pipelined requests over any duplex :class:`agent.messages.Transport` of the contract (the
    WebSocket session, the SageMaker HTTP/2 stream): every text sent at once, then one
    :class:`Timing` per text, times from the first send. One per session; not thread-safe."""

    def __init__(self, transport: Transport, *, voice: str | None = None, speed: float = 1.0,
                 extra: dict[str, Any] | None = None):
        self.transport, self.voice, self.speed = transport, voice, speed
        self.extra = dict(extra or {})  # fields added to every request (``lang``, ...)
        self.answers = Answers()
        self._n = 0

    async def synthesize(self, texts: list[str] | tuple[str, ...], *, raise_on_error: bool = True,
                         voice: str | None = None) -> list[Timing]:
        ids = [f"bench-{self._n + i + 1}" for i in range(len(texts))]
        self._n += len(texts)
        timings = {rid: Timing(rid) for rid in ids}
        t0 = time.perf_counter()
        for text, rid in zip(texts, ids, strict=True):
            self.answers.expect(rid, text)
            await self.transport.send({**synthesis_request(text, rid, voice=voice or self.voice, speed=self.speed),
                                       **self.extra})
        pending = set(ids)
        while pending:
            frame = await self.transport.receive()
            if frame is None:
                raise RequestFailed(f"session closed with {len(pending)} requests unanswered")
            event = self.answers.read(frame)
            if event is not None:
                _record(event, timings, pending, time.perf_counter() - t0, raise_on_error=raise_on_error)
        return [timings[rid] for rid in ids]


def _record(event: TTSEvent, timings: dict[str, Timing], pending: set[str], now: float, *,
            raise_on_error: bool) -> None:
    """One event of a pipelined burst into its request's :class:`Timing`."""
    if isinstance(event, AudioChunk):
        if event.request_id is None:
            raise RequestFailed("audio frame before synthesis_start")
        t = timings[event.request_id]
        if t.first_audio_s is None:
            t.first_audio_s = now
        t.audio_bytes += len(event.pcm)
    elif isinstance(event, SynthesisComplete) and event.request_id in timings:
        timings[event.request_id].complete_s = now
        timings[event.request_id].server_ttfa_ms = event.ttfa_ms
        pending.discard(event.request_id)
    elif isinstance(event, SynthesisFailed):
        err = f"{event.code}: {event.message}"
        if raise_on_error:
            raise RequestFailed(err)
        for key in [event.request_id] if event.request_id in timings else list(pending):
            timings[key].error = err
            pending.discard(key)


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


async def ws_audio(url: str, text: str, *, voice: str | None) -> bytes:
    """All PCM of one request over a fresh WebSocket session."""
    chunks: list[bytes] = []
    async with await ContractSession.connect(url, frames="text", max_size=None) as session:
        await session.synthesize(text, "clip", voice=voice)
        while True:
            event = await asyncio.wait_for(session.next_event(), timeout=300)
            if isinstance(event, AudioChunk):
                chunks.append(event.pcm)
            elif isinstance(event, SynthesisComplete):
                return b"".join(chunks)
            elif isinstance(event, SynthesisFailed):
                raise RequestFailed(f"{event.code}: {event.message}")
            elif event is None:
                raise RequestFailed("session closed before the clip completed")
