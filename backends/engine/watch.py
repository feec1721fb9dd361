"""A background task that never dies silently: :class:`WatchedTask` runs one coroutine as a task,
and when that task fails (anything but a cancel) it logs the error with its traceback, tells its
owner (``on_failure``, which fails the work that waited on the task) and starts it again — at most
``restarts`` times within ``window_s``; past that it stays down (:attr:`WatchedTask.down`), so its
owner can refuse new work and report unhealthy (``/ping`` 503) for the platform to replace the
instance. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("kokoro.backend")


class WatchedTask:
    """One restartable background task named ``name`` (see the module docstring)."""

    def __init__(self, name: str, run: Callable[[], Coroutine[Any, Any, None]], *,
                 on_failure: Callable[[BaseException], None], restarts: int = 3, window_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self.name = name
        self._run = run
        self._on_failure = on_failure
        self.restarts = restarts
        self.window_s = window_s
        self._clock = clock
        self._failures: deque[float] = deque(maxlen=restarts + 1)
        self._task: asyncio.Task[None] | None = None
        #: Why the task stays down (it failed more than ``restarts`` times within ``window_s``), else None.
        self.down: str | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def ensure(self) -> None:
        """Start the task unless it runs (or stays down)."""
        if self.down is None and not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)
            self._task.add_done_callback(self._ended)

    def cancel(self) -> None:
        """Stop it on purpose (no failure is reported)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task is not self._task:
            return
        error = task.exception() or RuntimeError(f"{self.name} returned")
        log.error("%s failed", self.name, exc_info=error)
        try:
            self._on_failure(error)
        except Exception:
            log.exception("%s: failing its work failed too", self.name)
        now = self._clock()
        self._failures.append(now)
        if len(self._failures) > self.restarts and now - self._failures[0] < self.window_s:
            self.down = (f"{self.name} failed {len(self._failures)} times within {self.window_s:g} s "
                         f"(last: {type(error).__name__}: {error})")
            log.error("%s: not restarted; the server reports unhealthy", self.down)
            return
        log.warning("restarting %s", self.name)
        self.ensure()
