"""A bidirectional smoke test that proves a deployed server really synthesises.

"InService" (SageMaker) or "RUNNING" (RunPod) only says the container answered /ping; the AWS
sample's handler crashed on every binary frame while its endpoint said InService. This check
speaks the wire contract (DESIGN.md §4) the way SageMaker does — each request JSON sent as a
**binary** message, without ``type`` — pipelines two requests, and asserts, per request:
``synthesis_start`` (text frame) -> one or more binary PCM frames with real samples ->
``synthesis_complete`` (text frame), with matching ``request_id``s and in order. It then sends
``{"type": "close"}``.

The check runs over any :class:`FrameSession` — the same shape as the agent package's TTS
``Transport``: :func:`websocket_session` is the direct WebSocket one (local, a container, a RunPod
pod); :func:`sagemaker_smoke` uses the agent's SageMaker HTTP/2 transport (imported only then).

Cancellation: the check is a plain coroutine; cancelling it (or hitting ``timeout_s``) closes
the session.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

DEFAULT_TEXTS = ("Hello from kokoro serve.", "This is the second sentence on the same stream.")


class SmokeTestFailed(RuntimeError):
    """The server answered, but not as the wire contract says (or not at all)."""


class FrameSession(Protocol):
    """One bidirectional session. Not thread-safe; use from one task."""

    async def send(self, message: dict) -> None:
        """Send one client message as JSON in a *binary* frame (what SageMaker delivers)."""

    async def receive(self) -> str | bytes | None:
        """The next server frame: ``str`` for text, ``bytes`` for binary, None once closed."""

    async def aclose(self) -> None:
        """Close the session; safe to call twice."""


@dataclass
class RequestResult:
    request_id: str
    audio_bytes: int = 0
    frames: int = 0
    peak: int = 0
    complete: dict = field(default_factory=dict)

    @property
    def audio_seconds(self) -> float:
        return self.audio_bytes / 2 / 24_000


@dataclass
class SmokeReport:
    results: list[RequestResult]
    first_audio_ms: float
    elapsed_s: float

    def summary(self) -> str:
        parts = [f"{r.request_id}: {r.frames} frames, {r.audio_seconds:.2f} s audio" for r in self.results]
        return f"bidi smoke OK ({'; '.join(parts)}; first audio {self.first_audio_ms:.0f} ms)"


def _peak_s16(pcm: bytes) -> int:
    import array

    samples = array.array("h")
    samples.frombytes(pcm[: len(pcm) - len(pcm) % 2])
    return max((abs(s) for s in samples), default=0)


async def _check(session: FrameSession, texts: tuple[str, ...], voice: str | None) -> SmokeReport:
    started = time.perf_counter()
    first_audio: float | None = None
    ids = [f"smoke-{i + 1}" for i in range(len(texts))]
    for rid, text in zip(ids, texts, strict=True):
        request = {"text": text, "request_id": rid}
        if voice:
            request["voice"] = voice
        await session.send(request)
    results: list[RequestResult] = []
    current: RequestResult | None = None
    while len(results) < len(ids):
        frame = await session.receive()
        if frame is None:
            raise SmokeTestFailed(f"session closed after {len(results)} of {len(ids)} requests completed")
        if isinstance(frame, bytes):
            if current is None:
                raise SmokeTestFailed("binary audio frame arrived before synthesis_start")
            if len(frame) % 2:
                raise SmokeTestFailed(f"odd-sized PCM s16le frame ({len(frame)} bytes)")
            first_audio = first_audio or time.perf_counter()
            current.audio_bytes += len(frame)
            current.frames += 1
            current.peak = max(current.peak, _peak_s16(frame))
            continue
        try:
            event = json.loads(frame)
        except ValueError as exc:
            raise SmokeTestFailed(f"text frame is not JSON: {frame[:120]!r}") from exc
        kind, rid = event.get("type"), event.get("request_id")
        expected = ids[len(results)]
        if kind == "error":
            raise SmokeTestFailed(f"server error for {rid}: {event.get('code')}: {event.get('message')}")
        if kind == "synthesis_start":
            if current is not None or rid != expected:
                raise SmokeTestFailed(f"synthesis_start for {rid!r} while expecting {expected!r}")
            if event.get("encoding") != "pcm_s16le":
                raise SmokeTestFailed(f"unexpected encoding {event.get('encoding')!r}")
            current = RequestResult(rid)
        elif kind == "synthesis_complete":
            if current is None or rid != current.request_id:
                raise SmokeTestFailed(f"synthesis_complete for {rid!r} out of order")
            if current.frames == 0 or current.peak == 0:
                raise SmokeTestFailed(f"{rid}: no audible audio ({current.frames} frames, peak {current.peak})")
            current.complete = event
            results.append(current)
            current = None
    await session.send({"type": "close"})
    elapsed = time.perf_counter() - started
    return SmokeReport(results, ((first_audio or started) - started) * 1000, elapsed)


async def check_bidi(
    session: FrameSession,
    *,
    texts: tuple[str, ...] = DEFAULT_TEXTS,
    voice: str | None = None,
    timeout_s: float = 120.0,
) -> SmokeReport:
    """Run the smoke check over an open session; raises :class:`SmokeTestFailed`."""
    try:
        return await asyncio.wait_for(_check(session, texts, voice), timeout_s)
    except TimeoutError as exc:
        raise SmokeTestFailed(f"no complete answer within {timeout_s:.0f} s") from exc
    finally:
        await session.aclose()


class _WebSocketSession:
    def __init__(self, ws) -> None:
        self._ws = ws

    async def send(self, message: dict) -> None:
        await self._ws.send(json.dumps(message).encode())  # bytes -> binary frame, like SageMaker

    async def receive(self) -> str | bytes | None:
        from websockets.exceptions import ConnectionClosed

        try:
            return await self._ws.recv()
        except ConnectionClosed:
            return None

    async def aclose(self) -> None:
        await self._ws.close()


@asynccontextmanager
async def websocket_session(url: str, *, api_key: str | None = None) -> AsyncIterator[FrameSession]:
    """A :class:`FrameSession` over a direct WebSocket (``ws://host:port/invocations-bidirectional-stream``)."""
    from websockets.asyncio.client import connect

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    async with connect(url, additional_headers=headers, max_size=None, open_timeout=30) as ws:
        yield _WebSocketSession(ws)


def websocket_smoke(url: str, *, api_key: str | None = None, voice: str | None = None,
                    texts: tuple[str, ...] = DEFAULT_TEXTS, timeout_s: float = 120.0) -> SmokeReport:
    """Blocking helper: connect to ``url`` and run :func:`check_bidi`. Do not call from a running loop."""

    async def run() -> SmokeReport:
        async with websocket_session(url, api_key=api_key) as session:
            return await check_bidi(session, texts=texts, voice=voice, timeout_s=timeout_s)

    return asyncio.run(run())


def sagemaker_smoke(endpoint_name: str, region: str, *, texts: tuple[str, ...] = DEFAULT_TEXTS,
                    timeout_s: float = 180.0, **connector: Any) -> SmokeReport:
    """Blocking: run :func:`check_bidi` through the SageMaker HTTP/2 bidirectional stream.

    Uses the agent package's ``SageMakerTransport`` (``aws-sdk-sagemaker-runtime-http2``, Python
    >= 3.12), imported here and nowhere else in ``deploy``. ``connector`` goes to its
    ``SageMakerConnector`` (``boto_session``, ``target_variant``, or an SDK stand-in as ``client``
    and ``models``). Do not call from a running event loop.
    """
    try:
        from agent.sagemaker_transport import SageMakerTransport
    except ImportError as exc:
        raise SmokeTestFailed(
            "the SageMaker bidirectional client is not available here (it needs Python >= 3.12 and "
            f"`pip install kokoro-serve[agent]` with aws-sdk-sagemaker-runtime-http2): {exc}") from exc

    async def run() -> SmokeReport:
        transport = await SageMakerTransport.connect(endpoint_name, region, **connector)
        return await check_bidi(transport, texts=texts, timeout_s=timeout_s)

    return asyncio.run(run())
