"""The WebSocket client of ``/invocations-bidirectional-stream`` (docs/wire-contract.md): the one client of the
contract that the agent, the deploy smoke test, the RunPod handler and the benchmarks share.

:class:`ContractSession` is one open session::

    async with await ContractSession.connect(url, api_key=key) as session:
        await session.synthesize("Hello there.", "r1", voice="jm_kumo")
        await session.close()                  # finish what is queued, then the server closes
        async for event in session.events():   # SynthesisStart, AudioChunk..., SynthesisComplete
            ...                                # or SynthesisFailed, per request, in order

Requests may be sent before earlier ones are answered (the server queues them per session and
answers strictly in order). Messages go out as **binary** frames by default — what SageMaker delivers
to the container — or as text frames (``frames="text"``). It is also the agent's
:class:`~agent.messages.Transport` (``send``/``receive``/``aclose``).

Errors: a failed connection, a lost connection and a closing code other than 1000 raise
:class:`~agent.messages.TTSError` (``connect_failed``/``connection_lost`` are retryable,
``message_too_big`` is not). Everything runs on the caller's event loop; cancelling a coroutine here
leaves the session to :meth:`ContractSession.aclose`, which the server takes as "client went away".
``websockets`` is imported on the first connect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

from .messages import CLOSE, Answers, TTSError, TTSEvent, cancel_message, encode, synthesis_request

WS_PATH = "/invocations-bidirectional-stream"


def ws_url(url: str) -> str:
    """``http(s)://`` becomes ``ws(s)://``; a bare ``host:port`` gets ``ws://``; a URL without a path
    gets the bidirectional path."""
    url = url.rstrip("/")
    if url.startswith("http"):
        url = "ws" + url[4:]
    elif not url.startswith("ws"):
        url = "ws://" + url
    if url.count("/") < 3:
        url += WS_PATH
    return url


class ContractSession:
    """One open session (see the module docstring). Not thread-safe; use from one task."""

    def __init__(self, ws: Any, *, frames: Literal["binary", "text"] = "binary") -> None:
        self._ws = ws
        self._text_frames = frames == "text"
        self.answers = Answers()

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        api_key: str | None = None,
        frames: Literal["binary", "text"] = "binary",
        open_timeout: float = 30.0,
        max_size: int | None = 2**24,
    ) -> ContractSession:
        """Open a session to ``url`` (any form :func:`ws_url` accepts)."""
        from websockets.asyncio.client import connect

        url = ws_url(url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        try:
            # PCM does not compress; deflate would only cost CPU on both ends.
            ws = await connect(url, additional_headers=headers, open_timeout=open_timeout, max_size=max_size,
                               compression=None)
        except (OSError, TimeoutError) as exc:
            raise TTSError("connect_failed", f"cannot reach {url}: {exc}", retryable=True) from exc
        except Exception as exc:  # InvalidStatus (401, 404), InvalidHandshake, ...
            raise TTSError("connect_failed", f"handshake with {url} failed: {exc}", retryable=True) from exc
        return cls(ws, frames=frames)

    async def __aenter__(self) -> ContractSession:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- client -> server ---------------------------------------------------------------------
    async def send(self, message: dict[str, Any]) -> None:
        """One JSON message, as a binary frame (or a text frame when the session was opened so)."""
        await self.send_raw(encode(message))

    async def send_raw(self, data: bytes) -> None:
        """Bytes as they are, in the session's frame type (a benchmark's malformed input, say)."""
        from websockets.exceptions import ConnectionClosed

        try:
            await self._ws.send(data.decode("utf-8", errors="replace") if self._text_frames else data)
        except ConnectionClosed as exc:
            raise TTSError("connection_lost", f"send failed: {exc}", retryable=True) from exc

    async def synthesize(self, text: str, request_id: str, **options: Any) -> None:
        """Send a synthesis request (``voice``, ``speed``, ``sample_rate``, ``timestamp``)."""
        self.answers.expect(request_id, text)
        await self.send(synthesis_request(text, request_id, **options))

    async def cancel(self, request_id: str | None = None) -> None:
        await self.send(cancel_message(request_id))

    async def close(self) -> None:
        """Ask the server to finish what is queued, then close the session (1000)."""
        await self.send(CLOSE)

    # -- server -> client ---------------------------------------------------------------------
    async def receive(self) -> str | bytes | None:
        """The next frame: ``str`` (control JSON), ``bytes`` (PCM), or None after a normal close."""
        from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK

        try:
            return await self._ws.recv()
        except ConnectionClosedOK:
            return None
        except ConnectionClosedError as exc:
            code = "message_too_big" if exc.rcvd and exc.rcvd.code == 1009 else "connection_lost"
            raise TTSError(code, f"connection closed: {exc}", retryable=code == "connection_lost") from exc

    async def next_event(self) -> TTSEvent | None:
        """The next event (frames that carry none are skipped), or None once the session closed."""
        while (frame := await self.receive()) is not None:
            event = self.answers.read(frame)
            if event is not None:
                return event
        return None

    async def events(self) -> AsyncIterator[TTSEvent]:
        """Every event until the server closes the session (send :meth:`close` first)."""
        while (event := await self.next_event()) is not None:
            yield event

    @property
    def close_code(self) -> int | None:
        """The code the session closed with (1000: normally), None while it is open."""
        return self._ws.close_code

    async def aclose(self) -> None:
        await self._ws.close()

    def abort(self) -> None:
        """Drop the connection at once, without a closing handshake (a client that vanishes)."""
        self._ws.transport.abort()
