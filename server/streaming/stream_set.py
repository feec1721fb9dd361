"""The contexts of one streaming-input socket (Cartesia and ElevenLabs multiplex several turns on
one WebSocket): at most ``max_contexts`` :class:`~server.streaming.text_stream.TextStream` objects, each with
its own order, each read by its own task into the mapper's one ``send``. Loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from backends.api import InvalidRequest, Overloaded
from server.streaming.text_stream import Event, StreamOptions, TextStream

if TYPE_CHECKING:
    from server.state import ServerState

log = logging.getLogger("kokoro.text_stream")


@dataclass(eq=False)
class _Context:
    stream: TextStream
    pump: asyncio.Task[None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class StreamSet:
    """The contexts of one socket, at most ``max_contexts``, each a :class:`TextStream` with its own
    order; ``send(context_id, event)`` receives every event of every context (from one task per
    context: keep it to one bounded send). A context is forgotten once its stream ended (after
    :class:`Done`) or was removed."""

    def __init__(
        self,
        state: ServerState,
        route: str,
        send: Callable[[str, Event], Awaitable[None]],
        *,
        session: str = "",
        max_contexts: int = 5,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.state = state
        self.route = route
        self.session = session
        self.max_contexts = max_contexts
        self._send = send
        self._on_error = on_error
        self._contexts: dict[str, _Context] = {}
        self._turns = 0

    def __contains__(self, context_id: object) -> bool:
        return context_id in self._contexts

    def __len__(self) -> int:
        return len(self._contexts)

    def ids(self) -> list[str]:
        return list(self._contexts)

    def get(self, context_id: str) -> TextStream | None:
        ctx = self._contexts.get(context_id)
        return ctx.stream if ctx is not None else None

    def extra(self, context_id: str) -> dict[str, Any]:
        """A place for the mapper's own per-context state (ids, counters)."""
        return self._contexts[context_id].extra

    @property
    def busy(self) -> bool:
        return any(ctx.stream.busy for ctx in self._contexts.values())

    def unfinished(self) -> list[str]:
        """The contexts whose turn is not over: input not ended yet, or audio still owed (a drain
        lets them finish)."""
        return [cid for cid, ctx in self._contexts.items() if not ctx.stream.ended or ctx.stream.busy]

    def open(self, context_id: str, options: StreamOptions, **stream_kw: Any) -> TextStream:
        """A new context. Raises :class:`~backends.api.Overloaded` past ``max_contexts`` and
        :class:`InvalidRequest` for an id already open."""
        if context_id in self._contexts:
            raise InvalidRequest(f"context {context_id[:64]!r} is already open")
        if len(self._contexts) >= self.max_contexts:
            raise Overloaded(f"at most {self.max_contexts} contexts may be open on one socket")
        self._turns += 1  # the newest context is the turn being heard (the scheduling policy's rule 9)
        options = dataclasses.replace(options, turn=self._turns)
        stream = TextStream(self.state, self.route, options, session=self.session, **stream_kw)
        ctx = _Context(stream)
        self._contexts[context_id] = ctx
        ctx.pump = asyncio.create_task(self._pump(context_id, ctx), name=f"{self.route}-{context_id[:32]}")
        return stream

    async def remove(self, context_id: str) -> None:
        """Stop a context now: no event of it is sent after this returns, and its id is free for a
        new context."""
        ctx = self._contexts.pop(context_id, None)
        if ctx is None:
            return
        # The pump stops before the stream: a mapper's send for a context it no longer knows must
        # find nothing to send (``context_id in streams`` is false from here on).
        if ctx.pump is not None and ctx.pump is not asyncio.current_task():
            ctx.pump.cancel()
            await asyncio.wait({ctx.pump})
        await ctx.stream.aclose()

    async def cut(self, tell: Callable[[str], Awaitable[None]]) -> None:
        """The session is being cut: stop every unfinished context, then ``tell(context_id)`` the
        client (the protocol's error)."""
        for context_id in self.unfinished():
            await self.remove(context_id)
            await tell(context_id)

    async def aclose(self) -> None:
        for context_id in list(self._contexts):
            await self.remove(context_id)

    async def _pump(self, context_id: str, ctx: _Context) -> None:
        try:
            async for event in ctx.stream:
                await self._send(context_id, event)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # a send that failed (client gone, not reading): the mapper decides
            if self._on_error is not None:
                self._on_error(e)
            else:
                log.debug("context %s: send failed", context_id, exc_info=True)
        finally:
            if self._contexts.get(context_id) is ctx:
                del self._contexts[context_id]
                with contextlib.suppress(Exception):
                    await ctx.stream.aclose()
