"""What one app instance knows about itself: readiness, in-flight work, sessions, draining.

Everything here lives on the event loop (no locks): handlers and sessions call it from the loop
only. :meth:`ServerState.drain` is the graceful-shutdown path (SIGTERM): /ping turns 503 at once,
new requests, sessions and turns are refused, every turn already started finishes — in-flight
requests, the requests a session queued, a voice-agent turn whose text is still arriving — and
each session closes 1001 as soon as it has nothing unfinished. After ``drain_timeout_s`` whatever
is left is cut: each WebSocket session sends its protocol's error for the unfinished turns, then
closes 1001.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any, Protocol

from backends.api import Backend, NotReady
from server.metrics import Metrics
from server.settings import Settings

log = logging.getLogger("kokoro.server")


class Drainable(Protocol):
    """A WebSocket session as the state sees it."""

    def begin_drain(self) -> None: ...

    async def abort(self, code: int, reason: str) -> None:
        """Cut the session: unfinished turns get the protocol's error, then the socket closes ``code``."""


class ServerState:
    def __init__(self, settings: Settings, backend: Backend, metrics: Metrics):
        self.settings = settings
        self.backend = backend
        self.metrics = metrics
        self.load_error: BaseException | None = None
        self.draining = False
        self.sessions: set[Drainable] = set()
        self.inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    # -- readiness ----------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.backend.ready and not self.draining and self.load_error is None

    def status(self) -> str:
        if self.draining:
            return "draining"
        if self.load_error is not None:
            return "failed"
        return "ok" if self.backend.ready else "loading"

    def check_accepting(self) -> None:
        """Raise :class:`NotReady` unless new work may start."""
        if self.draining:
            raise NotReady("server is shutting down")
        self.check_ready()

    def check_ready(self) -> None:
        """Raise :class:`NotReady` unless the model can synthesise (loaded, warmed up); a drain does
        not stop the work already admitted."""
        if self.load_error is not None:
            raise NotReady("the model failed to load; see the server log")
        if not self.backend.ready:
            raise NotReady("model is loading; retry when /ping answers 200")

    # -- in-flight accounting -----------------------------------------------------------------
    @contextlib.contextmanager
    def track(self, route: str) -> Iterator[None]:
        """Count one request as in flight until the block exits, on every path."""
        self.inflight += 1
        self._idle.clear()
        gauge = self.metrics.inflight_for(route)
        gauge.inc()
        try:
            yield
        finally:
            self.inflight -= 1
            gauge.dec()
            self._update_idle()

    def add_session(self, session: Drainable) -> None:
        self.sessions.add(session)
        self._idle.clear()
        self.metrics.active_sessions.set(len(self.sessions))

    def remove_session(self, session: Drainable) -> None:
        self.sessions.discard(session)
        self.metrics.active_sessions.set(len(self.sessions))
        self._update_idle()

    def _update_idle(self) -> None:
        if self.inflight == 0 and not self.sessions:
            self._idle.set()

    # -- shutdown -----------------------------------------------------------------------------
    async def drain(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Refuse new work, let started work finish, sessions close 1001 once nothing of theirs is
        unfinished. True when all finished in time; on timeout, the sessions left are cut (their
        protocol's error, then 1001) and HTTP streams are left to the server's own shutdown."""
        timeout = self.settings.drain_timeout_s if timeout is None else timeout
        if not self.draining:
            self.draining = True
            self.metrics.ready.set(0)
            log.info("draining: %d request(s) in flight, %d session(s) open", self.inflight, len(self.sessions))
        for session in list(self.sessions):
            session.begin_drain()
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
            log.info("drained")
            return True
        except TimeoutError:
            log.warning(
                "drain timeout (%.1fs): closing %d session(s), %d request(s) still in flight",
                timeout, len(self.sessions), self.inflight,
            )
            await self.close_sessions(1001, "server shutting down")
            return False

    async def close_sessions(self, code: int, reason: str) -> None:
        tasks = [asyncio.ensure_future(s.abort(code, reason)) for s in list(self.sessions)]
        if tasks:
            await asyncio.wait(tasks)

    def table_sizes(self) -> dict[str, int]:
        """Entries per table kept per session or request, the server's and the backend's (what
        ``kokoro_state_entries{table}`` shows; each is 0 at rest)."""
        return {"server_sessions": len(self.sessions), "server_inflight": self.inflight,
                **{f"backend_{name}": n for name, n in self.backend.table_sizes().items()}}

    def describe(self) -> dict[str, Any]:
        """What /ping reports: the status and the backend's runtime, mode, model, device and dtype."""
        return {"status": self.status(), **self.backend.info.describe()}
