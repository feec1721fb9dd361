"""Voice-agent load for the capacity suite: the three workloads a voice agent puts on a server, run
as a closed loop of clients or an open loop of arrivals, and what one level of load adds up to.

Workloads (each call is one request as :mod:`benchmarks.clients` times it, ``first_audio_s`` from
the moment the request left):

* ``sentence`` — one sentence, ``POST /invocations`` (PCM, streamed), through a lean client of its
  own (:class:`RawHttp`);
* ``bidi`` — one agent turn of several sentences pipelined on the contract's WebSocket
  (``/invocations-bidirectional-stream``), as an agent sends each sentence its LLM finishes;
* ``deepgram`` — the same turn on Deepgram's ``/v1/speak``: each sentence a ``Speak``, then ``Flush``.

A turn's first audio is its first sentence's; its underrun is the silence a listener playing the
audio in real time hears after the first audio (:class:`~benchmarks.clients.PlaybackClock`).
Closed loop: each client keeps its own connection (a session) and sends its next request when
the last is answered. Open loop: requests arrive at a rate (Poisson), however many are still
running — so the load offered does not fall when the server slows, as a closed loop's does — each
on an idle keep-alive connection of a pool, or a new one when all are busy, as SageMaker's front
end keeps its connections to the container (:func:`run_open`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import psutil

from .clients import PlaybackClock, Timing, WsSession
from .loop import closed_loop
from .results import ms, percentile, rnd

SENTENCE = "Sure, I can help you with that right away."
TURN = ["Sure, I can help you with that.", "Your order shipped this morning and should arrive on Friday.",
        "Is there anything else I can do for you today?"]
WORKLOADS = ("sentence", "bidi", "deepgram")
Call = Callable[[Any], Awaitable[Timing]]


def _underrun(timing: Timing) -> float:
    clock = PlaybackClock()
    for at, seconds in timing.chunks:
        clock.heard(at, seconds)
    return clock.underrun_s


# -- one request of each workload, on a session (or None: a connection of its own) ---------------
class RawHttp:
    """One HTTP/1.1 keep-alive connection, written by hand: a streamed ``POST`` whose chunks are
    timed as they arrive. The load generator shares the cores with the server, and a general client
    (httpx) costs it ~8 ms of CPU a request — at a hundred clients the generator, not the server,
    would set the pace (its own queueing read as the server's first audio)."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._io: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def __aenter__(self) -> RawHttp:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    @property
    def open(self) -> bool:
        """Whether the connection is open (a new one opens at the next request)."""
        return self._io is not None

    def close(self) -> None:
        if self._io is not None:
            self._io[1].close()
            self._io = None

    async def post(self, path: str, body: dict[str, Any], *, hang_up_at_first_audio: bool = False) -> Timing:
        """``body`` posted on the connection; with ``hang_up_at_first_audio`` the connection is closed
        at the first audio (the server drops the rest of the request)."""
        timing = Timing("http")
        t0 = time.perf_counter()
        try:
            if self._io is None:
                self._io = await asyncio.open_connection(self.host, self.port)
            reader, writer = self._io
            data = json.dumps(body).encode()
            writer.write(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                         % (path.encode(), self.host.encode(), len(data)) + data)
            await writer.drain()
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
            status = int(head.split(" ", 2)[1])
            if "transfer-encoding: chunked" in head:
                while size := int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16):
                    chunk = (await reader.readexactly(size + 2))[:-2]
                    if status == 200:
                        timing.heard(time.perf_counter() - t0, chunk)
                        if hang_up_at_first_audio and timing.first_audio_s is not None:
                            self.close()
                            return timing
                await reader.readuntil(b"\r\n")
                text = b""
            else:
                length = int(head.split("content-length:", 1)[1].split("\r\n", 1)[0]) if "content-length:" in head else 0
                text = await reader.readexactly(length)
            if status != 200:
                retry = head.split("retry-after:", 1)[1].split("\r\n", 1)[0].strip() if "retry-after:" in head else ""
                timing.error = (f"HTTP {status}" + (f" (Retry-After: {retry})" if retry else "")
                                + f": {text[:200].decode(errors='replace')}")
                timing.code = "overloaded" if status == 503 else str(status)
                return timing
            if "connection: close" in head:
                self.close()
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            self.close()
            timing.error = f"{type(exc).__name__}: {exc}"
            return timing
        timing.complete_s = time.perf_counter() - t0
        return timing


async def _sentence(http: RawHttp) -> Timing:
    return await http.post("/invocations", {"text": SENTENCE, "format": "pcm"})


async def _bidi(session: WsSession) -> Timing:
    timings = await session.request(TURN)
    turn = Timing("turn")
    turn.sent_s = 0.0
    for t in timings:
        turn.chunks += t.chunks
        turn.audio_bytes += t.audio_bytes
        if t.error and not turn.error:
            turn.error, turn.code = t.error, t.code
    turn.first_audio_s = timings[0].first_audio_s if timings else None
    turn.complete_s = max((t.complete_s for t in timings if t.complete_s is not None), default=None)
    return turn


class _Speak:
    """One ``/v1/speak`` socket; :meth:`turn` speaks the turn and reads to its ``Flushed``."""

    def __init__(self, ws: Any):
        self.ws = ws

    async def turn(self) -> Timing:
        timing = Timing("speak")
        t0 = time.perf_counter()
        for text in TURN:
            await self.ws.send(json.dumps({"type": "Speak", "text": text}))
        await self.ws.send(json.dumps({"type": "Flush"}))
        async for frame in self.ws:
            now = time.perf_counter() - t0
            if isinstance(frame, bytes):
                timing.heard(now, frame)
                continue
            message = json.loads(frame)
            if message.get("type") == "Warning" and not timing.error:
                timing.error, timing.code = message.get("description", "warning"), message.get("code")
            elif message.get("type") == "Flushed":
                timing.complete_s = now
                break
        return timing


@contextlib.asynccontextmanager
async def _speak_socket(ws_url: str) -> AsyncIterator[_Speak]:
    from websockets.asyncio.client import connect

    base = ws_url.split("/invocations")[0]
    async with connect(f"{base}/v1/speak?encoding=linear16&sample_rate=24000", compression=None, max_size=None,
                       open_timeout=60) as ws:
        await ws.recv()  # Metadata
        yield _Speak(ws)
        with contextlib.suppress(Exception):
            await ws.send(json.dumps({"type": "Close"}))


def workload(name: str, url: str, ws_url: str) -> tuple[
        Callable[[int], contextlib.AbstractAsyncContextManager[Any]], Call]:
    """``(session, call)``: ``session(client)`` opens a client's connection, ``call(session)`` sends one
    request on it (``call(None)``: on a connection of its own)."""
    if name == "sentence":
        async def sentence_call(s: RawHttp | None) -> Timing:
            if s is not None:
                return await _sentence(s)
            async with RawHttp(url) as own:
                return await _sentence(own)
        return (lambda _c: RawHttp(url)), sentence_call
    if name == "bidi":
        def bidi_session(_c: int) -> contextlib.AbstractAsyncContextManager[Any]:
            session = WsSession(ws_url, frames="binary", open_timeout=60)
            session.timeout_s = 120.0
            return session

        async def bidi_call(s: WsSession | None) -> Timing:
            if s is not None:
                return await _bidi(s)
            t0 = time.perf_counter()
            async with bidi_session(0) as own:
                opened = time.perf_counter() - t0
                return _shifted(await _bidi(own), opened)
        return bidi_session, bidi_call
    if name == "deepgram":
        async def speak_call(s: _Speak | None) -> Timing:
            if s is not None:
                return await s.turn()
            t0 = time.perf_counter()
            async with _speak_socket(ws_url) as own:
                opened = time.perf_counter() - t0
                return _shifted(await own.turn(), opened)
        return (lambda _c: _speak_socket(ws_url)), speak_call
    raise ValueError(f"unknown workload {name!r}")


def _shifted(timing: Timing, opened_s: float) -> Timing:
    """A timing measured from its request, with the connection's opening added (a new call's wait)."""
    if timing.first_audio_s is not None:
        timing.first_audio_s += opened_s
    timing.chunks = [(at + opened_s, seconds) for at, seconds in timing.chunks]
    return timing


# -- a long text ahead of a short one -----------------------------------------------------------
async def head_of_line(url: str, long_text: str, runs: int) -> dict[str, Any]:
    """First audio of a one-sentence request alone, sent 50 ms after another one-sentence request
    and 50 ms after ``long_text``; and ``long_text``'s own, alone and with that sentence 50 ms behind
    it (which shares the cores in concurrent mode) (medians of ``runs``, ms). Each client hangs up at
    its first audio, so no run waits for the long text's whole reading."""

    async def first_ms(text: str, delay_s: float = 0.0) -> float | None:
        await asyncio.sleep(delay_s)
        async with RawHttp(url) as http:
            timing = await http.post("/invocations", {"text": text, "format": "pcm"}, hang_up_at_first_audio=True)
        return ms(timing.first_audio_s) if not timing.error else None

    figures: dict[str, list[float | None]] = {"alone": [], "behind_sentence": [], "behind_long": [], "long_own": [],
                                              "long_alone": []}
    await first_ms(SENTENCE)  # warm: the first request of a server pays for what it builds once
    for _ in range(runs):
        figures["alone"].append(await first_ms(SENTENCE))
        figures["behind_sentence"].append((await asyncio.gather(first_ms(SENTENCE), first_ms(SENTENCE, 0.05)))[1])
        own, behind = await asyncio.gather(first_ms(long_text), first_ms(SENTENCE, 0.05))
        figures["behind_long"].append(behind)
        figures["long_own"].append(own)
        figures["long_alone"].append(await first_ms(long_text))
    out: dict[str, Any] = {f"{k}_ms": rnd(percentile(v, 50), 1) for k, v in figures.items()}
    out["runs"] = runs
    return out


# -- the loops ------------------------------------------------------------------------------------
async def run_closed(call: Call, session: Callable[[int], Any], clients: int, duration_s: float) -> tuple[list[Timing], float]:
    loop = await closed_loop(lambda s, _c, _r: _timed(call, s), clients, duration_s=duration_s, session=session)
    return [*loop.records, *(_failed(e) for e in loop.failures)], loop.wall_s


async def run_open(call: Call, rate: float, duration_s: float, *, pool: Callable[[], RawHttp] | None = None,
                   seed: int = 7, max_in_flight: int = 2000) -> tuple[list[Timing], float]:
    """Poisson arrivals at ``rate`` a second for ``duration_s``, however many are still running.
    Each arrival goes on a connection of its own, or with ``pool`` (a new keep-alive connection) on
    an idle connection of a pool, a new one when every pooled connection is busy — as a front end
    (SageMaker's, a load balancer) keeps its connections to the container open. Arrivals beyond
    ``max_in_flight`` still running count as failed (the generator's own limit)."""
    rng, records, tasks = random.Random(seed), [], set()
    idle: list[RawHttp] = []

    async def pooled() -> Timing:
        assert pool is not None
        conn = idle.pop() if idle else pool()
        try:
            return await _timed(call, conn)
        finally:
            if conn.open:
                idle.append(conn)

    t0 = time.perf_counter()
    at = rng.expovariate(rate)
    while at < duration_s:
        await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
        if len(tasks) >= max_in_flight:
            records.append(_failed(RuntimeError("load generator: too many requests in flight")))
        else:
            task = asyncio.create_task(pooled() if pool is not None else _timed(call, None))
            tasks.add(task)
            task.add_done_callback(lambda t: (tasks.discard(t), records.append(t.result())))
        at += rng.expovariate(rate)
    while tasks:
        await asyncio.gather(*list(tasks), return_exceptions=True)
    for conn in idle:
        conn.close()
    return records, time.perf_counter() - t0


async def _timed(call: Call, session: Any) -> Timing:
    try:
        return await call(session)
    except Exception as exc:  # a socket that broke: that request failed, the loop goes on
        return _failed(exc)


def _failed(exc: BaseException) -> Timing:
    timing = Timing("failed")
    timing.error = f"{type(exc).__name__}: {exc}"
    return timing


# -- what a level adds up to ----------------------------------------------------------------------
def within_target(answered: int, refused: int, failed: int, p95_ms: float | None, target_ms: float) -> bool:
    """Whether a level was held: everything answered (nothing refused, nothing failed), p95 first
    audio within the target."""
    return answered > 0 and refused == 0 and failed == 0 and p95_ms is not None and p95_ms <= target_ms

class CpuMeter:
    """The CPU seconds a process (and its children) used between :meth:`start` and :meth:`stop`."""

    def __init__(self, pid: int | None):
        self.pid = pid
        self._at = 0.0

    def _now(self) -> float:
        if self.pid is None:
            return 0.0
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(self.pid)
            times = [proc.cpu_times(), *(c.cpu_times() for c in proc.children(recursive=True))]
            return sum(t.user + t.system for t in times)
        return 0.0

    def start(self) -> None:
        self._at = self._now()

    def stop(self) -> float:
        return self._now() - self._at


def level_figures(timings: list[Timing], wall_s: float, cpu_s: float, target_ms: float) -> dict[str, Any]:
    """Requests/s answered, first audio p50/p95/p99 of the answered requests, refusals (503 /
    ``overloaded``; those that said when to retry) and failures apart, underruns, and server CPU
    per answered request."""
    answered = [t for t in timings if not t.error and t.first_audio_s is not None]
    refused = [t for t in timings if t.error and ("503" in t.error or (t.code or "") == "overloaded")]
    failed = len(timings) - len(answered) - len(refused)
    firsts = [t.first_audio_s for t in answered]
    p95 = percentile(firsts, 95)
    return {
        "requests": len(timings), "answered": len(answered), "refused": len(refused), "failed": failed,
        "refused_with_retry_after": sum("Retry-After" in (t.error or "") for t in refused),
        "requests_per_s": rnd(len(answered) / wall_s if wall_s > 0 else 0.0, 2),
        "first_audio_ms_p50": ms(percentile(firsts, 50)), "first_audio_ms_p95": ms(p95),
        "first_audio_ms_p99": ms(percentile(firsts, 99)),
        "underrun_s_per_request": rnd(sum(_underrun(t) for t in answered) / len(answered), 4) if answered else None,
        "underrun_requests": sum(_underrun(t) > 0.02 for t in answered),
        "cpu_ms_per_request": ms(cpu_s / len(answered)) if answered else None,
        "wall_s": rnd(wall_s, 2),
        "within_target": within_target(len(answered), len(refused), failed, ms(p95), target_ms),
    }
