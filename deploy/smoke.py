"""A bidirectional smoke test that proves a deployed server really synthesises.

"InService" (SageMaker) or "RUNNING" (RunPod) only says the container answered /ping; the AWS
sample's handler crashed on every binary frame while its endpoint said InService. This check
speaks the wire contract (docs/wire-contract.md) the way SageMaker does — each request JSON sent as a
**binary** message, without ``type`` — pipelines two requests, and asserts, per request:
``synthesis_start`` (text frame) -> one or more binary PCM frames with real samples ->
``synthesis_complete`` (text frame), with matching ``request_id``s and in order. It then sends
``{"type": "close"}``.

The check runs over any :class:`FrameSession` — the agent package's ``Transport``, whose messages
(``agent.messages``) it reads: :func:`websocket_session` is the contract's WebSocket client
(``agent.ws_client``; local, a container, a RunPod pod); :func:`sagemaker_smoke` uses the agent's
SageMaker HTTP/2 transport. Both are imported only when a check runs, so importing this module loads
nothing beyond the standard library.

Cancellation: the check is a plain coroutine; cancelling it (or hitting ``timeout_s``) closes
the session.
"""

from __future__ import annotations

import asyncio
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


class _Checker:
    """Holds the answers of the pipelined requests to the contract, event by event."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        self.results: list[RequestResult] = []
        self.current: RequestResult | None = None
        self.first_audio: float | None = None

    @property
    def done(self) -> bool:
        return len(self.results) == len(self.ids)

    def frame(self, frame: str | bytes, answers: Any) -> None:
        from agent.messages import (
            AudioChunk,
            SynthesisComplete,
            SynthesisFailed,
            SynthesisStart,
            decode_control,
        )

        if isinstance(frame, str) and decode_control(frame) is None:
            raise SmokeTestFailed(f"text frame is not a JSON object: {frame[:120]!r}")
        event = answers.read(frame)
        if isinstance(event, AudioChunk):
            self.audio(event.pcm)
        elif isinstance(event, SynthesisFailed):
            raise SmokeTestFailed(f"server error for {event.request_id}: {event.code}: {event.message}")
        elif isinstance(event, SynthesisStart):
            self.start(event.request_id, event.encoding)
        elif isinstance(event, SynthesisComplete):
            self.complete(event)

    def audio(self, pcm: bytes) -> None:
        if self.current is None:
            raise SmokeTestFailed("binary audio frame arrived before synthesis_start")
        if len(pcm) % 2:
            raise SmokeTestFailed(f"odd-sized PCM s16le frame ({len(pcm)} bytes)")
        self.first_audio = self.first_audio or time.perf_counter()
        self.current.audio_bytes += len(pcm)
        self.current.frames += 1
        self.current.peak = max(self.current.peak, _peak_s16(pcm))

    def start(self, rid: str, encoding: str) -> None:
        expected = self.ids[len(self.results)]
        if self.current is not None or rid != expected:
            raise SmokeTestFailed(f"synthesis_start for {rid!r} while expecting {expected!r}")
        if encoding != "pcm_s16le":
            raise SmokeTestFailed(f"unexpected encoding {encoding!r}")
        self.current = RequestResult(rid)

    def complete(self, event: Any) -> None:
        current, rid = self.current, event.request_id
        if current is None or rid != current.request_id:
            raise SmokeTestFailed(f"synthesis_complete for {rid!r} out of order")
        if current.frames == 0 or current.peak == 0:
            raise SmokeTestFailed(f"{rid}: no audible audio ({current.frames} frames, peak {current.peak})")
        current.complete = {"audio_duration_s": event.audio_duration_s, "elapsed_s": event.elapsed_s,
                            "ttfa_ms": event.ttfa_ms}
        self.results.append(current)
        self.current = None


async def _check(session: FrameSession, texts: tuple[str, ...], voice: str | None) -> SmokeReport:
    from agent.messages import CLOSE, Answers, TTSError, synthesis_request

    started = time.perf_counter()
    answers = Answers()
    checker = _Checker([f"smoke-{i + 1}" for i in range(len(texts))])
    try:
        for rid, text in zip(checker.ids, texts, strict=True):
            answers.expect(rid, text)
            await session.send(synthesis_request(text, rid, voice=voice, typed=False))
        while not checker.done:
            frame = await session.receive()
            if frame is None:
                raise SmokeTestFailed(
                    f"session closed after {len(checker.results)} of {len(texts)} requests completed")
            checker.frame(frame, answers)
        await session.send(CLOSE)
    except TTSError as exc:
        raise SmokeTestFailed(f"session failed after {len(checker.results)} of {len(texts)} requests: {exc}") from exc
    elapsed = time.perf_counter() - started
    return SmokeReport(checker.results, ((checker.first_audio or started) - started) * 1000, elapsed)


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


@asynccontextmanager
async def websocket_session(url: str, *, api_key: str | None = None) -> AsyncIterator[FrameSession]:
    """A :class:`FrameSession` over a direct WebSocket (``ws://host:port/invocations-bidirectional-stream``):
    the agent package's contract client, which sends every message as a binary frame."""
    from agent.ws_client import ContractSession

    async with await ContractSession.connect(url, api_key=api_key, max_size=None) as session:
        yield session


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
