"""Asking one running runtime call to stop early: :class:`Interrupt` (set on the event loop, read
by the call on its worker thread) and :class:`Interrupted` (what the call raises when it stopped).
The layers import both from :mod:`backends.api`."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Interrupted(Exception):
    """A runtime call stopped early because its :class:`Interrupt` was set. Never reaches a
    client: the scheduler that set it runs the segment again."""


class Interrupt:
    """Asks one running runtime call to stop early. Thread-safe: ``set()`` is called on the event
    loop while the call runs on a worker thread. An interruptible runtime registers how it stops
    (ONNX Runtime: ``RunOptions.terminate``) with :meth:`on_set`; a hook registered after
    ``set()`` runs at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._hooks: list[Callable[[], None]] = []

    @property
    def is_set(self) -> bool:
        return self._set

    def on_set(self, hook: Callable[[], None]) -> None:
        with self._lock:
            if not self._set:
                self._hooks.append(hook)
                return
        hook()

    def set(self) -> None:
        with self._lock:
            self._set, hooks, self._hooks = True, self._hooks, []
        for hook in hooks:
            hook()
