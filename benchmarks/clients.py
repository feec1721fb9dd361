"""The suite's clients, one per protocol, each returning one :class:`Timing` per request: the contract
(docs/wire-contract.md) over any of its transports (:class:`Burst`, :class:`WsSession`), a streamed
HTTP POST (:func:`post`) and a health route's GET (:class:`HealthProbe`). Times are ``time.perf_counter()``
seconds from the moment the request (or the first of a pipelined burst) left the client. Cancelling a
coroutine here closes its socket or response: the server takes the client as gone and aborts the rest.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from agent.messages import (
    Answers,
    AudioChunk,
    SynthesisComplete,
    SynthesisFailed,
    SynthesisStart,
    Transport,
    synthesis_request,
)
from agent.ws_client import ContractSession

BYTES_PER_SECOND = 24_000 * 2  # s16le mono at 24 kHz
HEALTH_TIMEOUT_S = 5.0


class RequestFailed(RuntimeError):
    """The server answered a request with an error (the message has its code)."""


class Unsupported(Exception):
    """The server's protocol cannot do what was asked (the message says why)."""


@dataclass
class Timing:
    """One request as the client saw it (seconds; ``None`` where it never happened)."""

    request_id: str = ""
    sent_s: float | None = None
    first_audio_s: float | None = None
    complete_s: float | None = None
    audio_bytes: int = 0
    #: ``(time, audio seconds)`` of every chunk of audio, in arrival order
    chunks: list[tuple[float, float]] = field(default_factory=list)
    server_ttfa_ms: float | None = None
    error: str | None = None
    code: str | None = None  # the error code of a refusal
    error_s: float | None = None

    @property
    def audio_s(self) -> float:
        return self.audio_bytes / BYTES_PER_SECOND

    def heard(self, now: float, audio: bytes) -> None:
        """``audio`` arrived at ``now``."""
        if audio and self.first_audio_s is None:
            self.first_audio_s = now
        self.audio_bytes += len(audio)
        if audio:
            self.chunks.append((now, len(audio) / BYTES_PER_SECOND))


#: ``on_audio(timing, now, pcm)`` hears each chunk as it arrives; returning True hangs up there.
OnAudio = Callable[[Timing, float, bytes], bool | None]


class PlaybackClock:
    """A listener playing the audio in real time, on the client's own clock — written apart from
    the server's scheduler (``backends.engine.schedule``) so that the two can disagree. Playback starts
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


class Burst:
    """Pipelined requests over any duplex :class:`agent.messages.Transport` of the contract (the
    WebSocket session, the SageMaker HTTP/2 stream): every text sent at once, then one
    :class:`Timing` per text, times from the first send. One per session; not thread-safe."""

    def __init__(self, transport: Transport, *, voice: str | None = None, speed: float = 1.0,
                 extra: dict[str, Any] | None = None, timeout_s: float | None = None):
        self.transport, self.voice, self.speed, self.timeout_s = transport, voice, speed, timeout_s
        self.extra = dict(extra or {})  # fields added to every request (``lang``, ...)
        self.answers = Answers()
        self._n = 0
        #: the contract as this session saw it: ids sent and answered, in order, and any breach of it
        self.sent: list[str] = []
        self.answered: list[str] = []
        self.violations: list[str] = []
        self._current: str | None = None

    async def synthesize(self, texts: list[str] | tuple[str, ...], *, raise_on_error: bool = True,
                         voice: str | None = None, on_audio: OnAudio | None = None) -> list[Timing]:
        ids = [f"bench-{self._n + i + 1}" for i in range(len(texts))]
        self._n += len(texts)
        timings = {rid: Timing(rid) for rid in ids}
        t0 = time.perf_counter()
        for text, rid in zip(texts, ids, strict=True):
            self.answers.expect(rid, text)
            await self.transport.send({**synthesis_request(text, rid, voice=voice or self.voice, speed=self.speed),
                                       **self.extra})
            timings[rid].sent_s = time.perf_counter() - t0
            self.sent.append(rid)
        pending = set(ids)
        while pending:
            frame = await self.transport.receive()
            if frame is None:
                raise RequestFailed(f"session closed with {len(pending)} requests unanswered")
            event = self.answers.read(frame)
            now = time.perf_counter() - t0
            if isinstance(event, SynthesisComplete | SynthesisFailed):
                if self._current is not None and event.request_id != self._current:
                    self.violations.append(f"the answer of {event.request_id} inside {self._current}")
                self.answered.append(str(event.request_id))
                self._current = None
            if isinstance(event, SynthesisStart):
                if self._current is not None:
                    self.violations.append(f"{event.request_id} started inside {self._current}")
                self._current = event.request_id
            elif isinstance(event, AudioChunk):
                if event.request_id is None:
                    raise RequestFailed("audio frame before synthesis_start")
                timings[event.request_id].heard(now, event.pcm)
                if on_audio is not None and on_audio(timings[event.request_id], now, event.pcm):
                    break
            elif isinstance(event, SynthesisComplete) and event.request_id in timings:
                timings[event.request_id].complete_s = now
                timings[event.request_id].server_ttfa_ms = event.ttfa_ms
                pending.discard(event.request_id)
            elif isinstance(event, SynthesisFailed):
                if raise_on_error:
                    raise RequestFailed(f"{event.code}: {event.message}")
                for key in [event.request_id] if event.request_id in timings else list(pending):
                    t = timings[key]
                    t.error, t.code, t.error_s = f"{event.code}: {event.message}", event.code, now
                    pending.discard(key)
        return [timings[rid] for rid in ids]

    async def request(self, texts: list[str] | tuple[str, ...]) -> list[Timing]:
        """:meth:`synthesize` within ``timeout_s``, a refusal kept as its timing's ``error``."""
        return await asyncio.wait_for(self.synthesize(texts, raise_on_error=False), self.timeout_s)


class WsSession(Burst):
    """One open ``/invocations-bidirectional-stream`` session, through the contract client
    (:class:`agent.ws_client.ContractSession`; messages as text frames unless ``frames="binary"``,
    which is what SageMaker delivers), within ``async with``: a :class:`Burst` over it, so
    ``await session.synthesize([t1, t2, ...])`` pipelines the texts. Not safe to share between tasks.
    """

    def __init__(self, url: str, *, voice: str | None = None, speed: float = 1.0, api_key: str | None = None,
                 frames: Literal["binary", "text"] = "text", open_timeout: float = 30.0):
        super().__init__(None, voice=voice, speed=speed)  # type: ignore[arg-type]  # the session, once open
        self.url, self.api_key, self.frames, self.open_timeout = url, api_key, frames, open_timeout
        self.session: ContractSession | None = None
        self.connect_s: float | None = None

    @property
    def burst(self) -> Burst:
        """What the session sent and was answered (``sent``, ``answered``, ``violations``)."""
        return self

    async def __aenter__(self) -> WsSession:
        t0 = time.perf_counter()
        self.session = self.transport = await ContractSession.connect(
            self.url, api_key=self.api_key, frames=self.frames, max_size=None, open_timeout=self.open_timeout)
        self.connect_s = time.perf_counter() - t0
        return self

    async def __aexit__(self, *exc) -> None:
        if self.session is not None:
            await self.session.aclose()
            self.session = None


async def post(http: httpx.AsyncClient, url: str, body: Any, *, t0: float | None = None, wav: bool = False,
               on_audio: OnAudio | None = None, **kwargs: Any) -> Timing:
    """One streamed POST of ``body`` (JSON, or bytes as they are); ``wav`` reads past a WAV header
    (:class:`WavReader`), so audio counts audio only; a refusal or a broken connection is the
    timing's ``error``. ``first_audio_s`` is the first byte of audio, ``complete_s`` the last;
    ``on_audio`` hears every chunk of the body (True hangs up there)."""
    timing = Timing("http")
    t0 = time.perf_counter() if t0 is None else t0
    reader = WavReader() if wav else None
    content = {"content": body} if isinstance(body, bytes) else {"json": body}
    try:
        async with http.stream("POST", url, **content, **kwargs) as r:
            if r.status_code != 200:
                timing.error = f"HTTP {r.status_code}: {(await r.aread())[:200].decode(errors='replace')}"
                return timing
            async for chunk in r.aiter_raw():
                now, audio = time.perf_counter() - t0, reader.feed(chunk) if reader else chunk
                timing.heard(now, audio)
                if on_audio is not None and on_audio(timing, now, audio):
                    return timing
    except httpx.HTTPError as exc:
        timing.error = f"{type(exc).__name__}: {exc}"
        return timing
    timing.complete_s = time.perf_counter() - t0
    return timing


class WavReader:
    """Splits a streamed WAV body into its header and the audio after it, chunk by chunk:
    ``feed(chunk)`` returns the audio bytes in ``chunk`` (empty until the ``data`` chunk has begun).
    Streamed headers carry unknown sizes, so the reader walks the chunks up to ``data`` and takes
    everything after it as audio."""

    def __init__(self) -> None:
        self._head = b""
        self._in_data = False

    def feed(self, chunk: bytes) -> bytes:
        if self._in_data:
            return chunk
        self._head += chunk
        pos = 12  # "RIFF" size "WAVE"
        while len(self._head) >= pos + 8:
            cid, size = self._head[pos:pos + 4], int.from_bytes(self._head[pos + 4:pos + 8], "little")
            if cid == b"data":
                self._in_data = True
                audio, self._head = self._head[pos + 8:], b""
                return audio
            pos += 8 + size + (size & 1)
        return b""


async def ws_audio(url: str, text: str, *, voice: str | None) -> bytes:
    """All PCM of one request over a fresh WebSocket session."""
    chunks: list[bytes] = []
    async with WsSession(url, voice=voice) as ws:
        await asyncio.wait_for(ws.synthesize([text], on_audio=lambda _t, _now, pcm: chunks.append(pcm)), timeout=300)
    return b"".join(chunks)


def bearer(api_key: str | None) -> dict[str, str]:
    """The ``Authorization`` header for ``api_key`` (none without one)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def http_base(url: str) -> str:
    """``scheme://host:port`` of ``url``, with ``ws``/``wss``/``openai+http`` turned into HTTP."""
    parts = urlsplit(url)
    scheme = parts.scheme.removeprefix("openai+")
    scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    return f"{scheme}://{parts.netloc}"


class HealthProbe:
    """``GET`` the first of ``paths`` the server has (404 or 405 means it has not); ``await probe()``
    returns ``(path, status, milliseconds)`` and remembers the route it found. A poll that gets no
    answer within ``timeout_s`` counts as ``(path, None, timeout_s in ms)`` — the wait a caller of that
    route had — so a stalled route weighs in the figures instead of dropping out of them."""

    def __init__(self, base: str, paths: tuple[str, ...], *, api_key: str | None = None,
                 timeout_s: float = HEALTH_TIMEOUT_S):
        self.base, self.paths, self.timeout_s = base, paths, timeout_s
        self._http = httpx.AsyncClient(timeout=timeout_s, headers=bearer(api_key))
        self._found: str | None = None

    async def __call__(self) -> tuple[str, int | None, float]:
        for path in (self._found,) if self._found else self.paths:
            t0 = time.perf_counter()
            try:
                r = await self._http.get(self.base + path)
            except httpx.TimeoutException:
                return path, None, self.timeout_s * 1000
            if r.status_code not in (404, 405):
                self._found = path
                return path, r.status_code, (time.perf_counter() - t0) * 1000
        raise Unsupported(f"no health route: {' and '.join(self.paths)} answer 404")

    async def aclose(self) -> None:
        await self._http.aclose()
