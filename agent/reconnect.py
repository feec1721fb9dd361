"""How the TTS client gets a session back when the endpoint goes away (a SageMaker stream cut, a
RunPod pod replaced, a server restarted).

* :class:`Reconnect` — the policy: after a session is lost (or cannot be opened), open a new one up
  to ``tries`` times, waiting between attempts with capped exponential backoff (``websockets``'
  :func:`~websockets.client.backoff`: a random first wait up to ``delay_s``, then ``delay_s``
  growing by 1.6x up to ``max_delay_s``). When the tries are spent, :class:`TTSError`
  ``tts_unavailable`` (not retryable) says so. ``tries=0`` never reconnects: the first failure is
  raised as it is.
* :func:`websocket_sessions` — WebSocket sessions from ``websockets``' reconnecting ``connect()``
  iterator (it retries what it classifies as transient: refused or reset connections, timeouts,
  HTTP 5xx at the upgrade; a 401 or 404 is raised at once).
* :func:`reopening` — the same policy over any ``connect()`` coroutine (the SageMaker stream).

Both yield one open :class:`~agent.messages.Transport` at a time; asking for the next one means the
previous one was lost. They run on the caller's event loop; ``websockets`` is imported on first use.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .messages import Transport, TTSError


@dataclass(frozen=True)
class Reconnect:
    """Reconnection policy (see the module docstring)."""

    tries: int = 0
    delay_s: float = 0.2
    max_delay_s: float = 2.0

    def delays(self) -> Iterator[float]:
        """The waits before attempts 2..``tries``; then :class:`TTSError` ``tts_unavailable``."""
        from websockets.client import backoff

        waits = backoff(initial_delay=self.delay_s, min_delay=self.delay_s, max_delay=self.max_delay_s)
        for _ in range(max(self.tries - 1, 0)):
            yield next(waits)
        raise self.gave_up()

    def gave_up(self, cause: BaseException | None = None) -> TTSError:
        last = f" (last: {cause})" if cause is not None else ""
        return TTSError("tts_unavailable",
                        f"the TTS server could not be reached in {self.tries} attempts; giving up{last}")


async def websocket_sessions(url: str, retry: Reconnect, *, api_key: str | None = None,
                             open_timeout: float = 10.0) -> AsyncIterator[Transport]:
    """Open sessions to ``url`` with ``websockets``' reconnecting iterator, one at a time."""
    from websockets.asyncio.client import connect
    from websockets.client import process_exception as transient

    from .ws_client import ContractSession

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None

    def classify(exc: Exception) -> Exception | None:
        return exc if retry.tries == 0 else transient(exc)

    try:
        async for ws in connect(url, additional_headers=headers, open_timeout=open_timeout, max_size=2**24,
                                compression=None, reconnect_delays=retry.delays, process_exception=classify):
            yield ContractSession(ws)
    except TTSError as exc:
        if exc.code == "tts_unavailable" and exc.__context__ is not None:
            raise retry.gave_up(exc.__context__) from exc.__context__
        raise
    except (OSError, TimeoutError) as exc:
        raise TTSError("connect_failed", f"cannot reach {url}: {exc}", retryable=True) from exc
    except Exception as exc:  # InvalidStatus (401, 404), InvalidHandshake, ...
        raise TTSError("connect_failed", f"handshake with {url} failed: {exc}", retryable=True) from exc


async def reopening(connect: Callable[[], Awaitable[Transport]], retry: Reconnect) -> AsyncIterator[Any]:
    """Sessions from ``connect()`` (which raises :class:`TTSError`), one at a time, under ``retry``."""
    while True:
        delays = retry.delays()
        while True:
            try:
                transport = await connect()
                break
            except TTSError as exc:
                if not exc.retryable or retry.tries == 0:
                    raise
                try:
                    delay = next(delays)
                except TTSError:
                    raise retry.gave_up(exc) from exc
                await asyncio.sleep(delay)
        yield transport
