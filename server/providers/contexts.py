"""The session side of a protocol whose turns are contexts multiplexed on one socket (Cartesia,
ElevenLabs): :class:`ContextSession`, a :class:`~server.websocket.session.WebSocketSession` whose
turns are the contexts of a :class:`~server.streaming.stream_set.StreamSet`. Audio is owed while
any context has some; a turn is unfinished while its context's input has not ended (a drain waits
for it); a cut session stops each unfinished context and tells the client with ``context_error``.
"""

from __future__ import annotations

from starlette.websockets import WebSocket

from backends.api import KokoroError
from server.state import ServerState
from server.streaming.stream_set import StreamSet
from server.streaming.text_stream import Event
from server.websocket.session import WebSocketSession


class ContextSession(WebSocketSession):
    """A socket of contexts, at most ``max_contexts`` open (see the module docstring). Subclasses
    implement ``send_event(context_id, event)`` and ``context_error(context_id, error)``."""

    def __init__(self, websocket: WebSocket, state: ServerState, *, max_contexts: int) -> None:
        super().__init__(websocket, state)
        self.streams = StreamSet(state, self.ROUTE, self.send_event, session=self.id, max_contexts=max_contexts,
                                 on_error=self.send_failed)

    async def send_event(self, context_id: str, event: Event) -> None:
        raise NotImplementedError

    async def context_error(self, context_id: str | None, error: KokoroError) -> None:
        raise NotImplementedError

    @property
    def busy(self) -> bool:
        return self.streams.busy

    @property
    def mid_turn(self) -> bool:
        return bool(self.streams.unfinished())

    async def on_cut(self, error: KokoroError) -> None:
        await self.streams.cut(lambda cid: self.context_error(cid, error))

    async def on_close(self) -> None:
        await self.streams.aclose()
