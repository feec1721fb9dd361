"""``compare``'s clients of the bidirectional contract: :class:`WsClient` (``ws://``/``wss://``, the
contract client :class:`agent.ws_client.ContractSession`, binary frames as SageMaker sends them) and
:class:`SageMakerBidiClient` (``sagemaker://``, :class:`agent.sagemaker_transport.SageMakerConnector`).
A session is a :class:`benchmarks.clients.Burst`: requests pipelined on it, answered in order.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from agent.messages import (
    AudioChunk,
    SynthesisComplete,
    SynthesisFailed,
    TTSError,
    cancel_message,
    synthesis_request,
)
from agent.ws_client import ContractSession, ws_url

from ..clients import Burst, Unsupported
from .http import INVALID_JSON, Client
from .targets import UNKNOWN_VOICE, Target

PROBE = "probe"


class _BidiClient(Client):
    pipelines = True

    async def _open(self) -> Any:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Burst]:
        """One open session, whose ``request(texts)`` pipelines them (one :class:`Timing` each)."""
        transport = await self._open()
        try:
            yield Burst(transport, voice=self.target.voice, extra=self.target.extra, timeout_s=self.timeout_s)
        finally:
            with contextlib.suppress(Exception):
                await transport.aclose()

    async def probe(self, s: Any, case: str, text: str) -> str:
        if case == "invalid_json":
            send_raw = getattr(s.transport, "send_raw", None)
            if send_raw is None:
                raise Unsupported("this transport only sends JSON objects")
            await send_raw(INVALID_JSON)
        else:
            voice = UNKNOWN_VOICE if case == "unknown_voice" else s.voice
            s.answers.expect(PROBE, text)
            await s.transport.send({**synthesis_request(text, PROBE, voice=voice), **s.extra})
        try:
            return await _answer(s)
        except TTSError as exc:
            return f"session closed: {exc.code} ({exc.message[:120]})"


async def _answer(s: Burst) -> str:
    """The first thing the server says about the probe; audio is cancelled and drained."""
    audio = 0
    while True:
        frame = await s.transport.receive()
        if frame is None:
            return "session closed by the server"
        event = s.answers.read(frame)
        if isinstance(event, SynthesisFailed):
            if audio:
                return f"accepted: audio streamed ({audio} bytes), then cancelled by the client"
            return f"error {event.code}: {event.message[:160]}"
        if isinstance(event, SynthesisComplete):
            return f"accepted: completed with {event.audio_duration_s} s of audio"
        if isinstance(event, AudioChunk) and not audio:
            audio += len(event.pcm)
            await s.transport.send(cancel_message(PROBE))


class WsClient(_BidiClient):
    """``ws://``/``wss://``: the contract over WebSocket; ``health()`` is ``GET /ping``."""

    async def _open(self) -> ContractSession:
        return await ContractSession.connect(ws_url(self.target.url), api_key=self.api_key, frames="binary", max_size=None,
                                             open_timeout=min(self.timeout_s, 30.0))


class SageMakerBidiClient(_BidiClient):
    """``sagemaker://ENDPOINT?region=R``: one SDK client (one HTTP/2 connection pool), one stream
    per session. Without the SDK (Python < 3.12, or not installed) every row is unsupported."""

    def __init__(self, target: Target, **kwargs: Any):
        super().__init__(target, **kwargs)
        self._connector: Any = None

    async def _open(self) -> Any:
        from agent.sagemaker_transport import SageMakerConnector

        if not self.target.region:
            raise Unsupported("sagemaker:// needs ?region=R")
        if self._connector is None:
            self._connector = SageMakerConnector(self.target.host, self.target.region)
        try:
            return await self._connector.open()
        except TTSError as exc:
            if exc.code == "sdk_unavailable":
                raise Unsupported(exc.message) from exc
            raise

    async def aclose(self) -> None:
        if self._connector is not None:
            await self._connector.aclose()
        await super().aclose()
