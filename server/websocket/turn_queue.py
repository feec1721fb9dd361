"""The per-session queue of a protocol that answers its requests strictly in order (the bidirectional
stream): :class:`TurnQueue`.

At most ``limit`` requests wait (one more raises :class:`~backends.api.Overloaded`: the mapper
answers it at once); one worker answers them one at a time, each in a task of its own so that
``interrupt()`` (a cancel) can stop it mid-synthesis. An answer calls ``finishing()`` just before it
sends its terminal event: from then on it cannot be interrupted, so a request never gets two
terminal events (its answer and a cancellation). ``end()`` (the client's close) lets the worker
return once the queue is empty; repeating it changes nothing, and nothing is queued for it.
Loop only.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Generic, TypeVar

from backends.api import Overloaded
from server.pipeline.synthesis import retrieve

T = TypeVar("T")
#: How long a session that ends waits for an answer already sending its terminal event.
FINISH_S = 2.0


class TurnQueue(Generic[T]):
    """Requests of one session, answered one at a time, strictly in order (see the module docstring).

    ``answer(item)`` answers one request, terminal event included; ``interrupted(item)`` sends the
    terminal event of a request whose answer was interrupted before it was finishing.
    """

    def __init__(self, limit: int, answer: Callable[[T], Coroutine[Any, Any, None]],
                 interrupted: Callable[[T], Coroutine[Any, Any, None]]) -> None:
        self.limit = limit
        self._answer = answer
        self._interrupted = interrupted
        self._waiting: deque[T] = deque()
        self._wake = asyncio.Event()
        self._running: asyncio.Task[None] | None = None
        self._finishing = False
        self.current: T | None = None
        #: The request whose answer was stopped unfinished because the worker itself was cancelled
        #: (the session ended mid-answer): it got no terminal event.
        self.cut: T | None = None
        self.ended = False

    def __iter__(self) -> Iterator[T]:
        """The requests still waiting, in order."""
        return iter(self._waiting)

    def __len__(self) -> int:
        return len(self._waiting)

    @property
    def busy(self) -> bool:
        """A request is waiting or being answered."""
        return bool(self._waiting) or self.current is not None

    def put(self, item: T) -> None:
        """Queue ``item``. Raises :class:`Overloaded` when ``limit`` requests already wait."""
        if len(self._waiting) >= self.limit:
            raise Overloaded(f"{self.limit} requests are already queued on this session")
        self._waiting.append(item)
        self._wake.set()

    def end(self) -> None:
        """No more requests: the worker returns once the queue is empty. Idempotent."""
        self.ended = True
        self._wake.set()

    def finishing(self) -> None:
        """The running answer is about to send its terminal event: it can no longer be interrupted."""
        self._finishing = True

    def interrupt(self) -> bool:
        """Stop the running answer unless it is finishing; True when it was stopped."""
        if self._running is None or self._finishing or self._running.done():
            return False
        self._running.cancel()
        return True

    def drop_waiting(self) -> list[T]:
        """Take every waiting request out of the queue (the session ends; they were never answered)."""
        items = list(self._waiting)
        self._waiting.clear()
        return items

    async def run(self) -> None:
        """The worker: answer each request in order until ``end()`` and the queue is empty."""
        while True:
            while not self._waiting:
                if self.ended:
                    return
                self._wake.clear()
                await self._wake.wait()
            item = self._waiting.popleft()
            self.current = item
            try:
                await self._run_one(item)
            finally:
                self.current = None

    async def _run_one(self, item: T) -> None:
        self._finishing = False
        task = asyncio.create_task(self._answer(item))
        self._running = task
        try:
            await asyncio.wait({task})
        finally:
            self._running = None
            if not task.done() and self._finishing:  # the session is ending as the answer ends: let it
                await asyncio.wait({task}, timeout=FINISH_S)
            if not task.done():  # the worker itself was cancelled: the session is ending
                if not self._finishing:
                    self.cut = item
                task.cancel()
                task.add_done_callback(retrieve)
        if task.cancelled():
            await self._interrupted(item)
        else:
            task.result()  # a failure of the answer is the session's (its error path)
