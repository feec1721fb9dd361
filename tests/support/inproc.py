"""The real app in process behind a Starlette ``TestClient`` (built by :mod:`tests.support.app`,
over :class:`~backends.runtimes.fake.FakeSynthesizer` unless a test brings its own synthesizer), and what
tests read from it: one WebSocket request's frames (:func:`answer`), the audio in them, one
metric's value.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from starlette.testclient import TestClient

from server.settings import Settings

from .app import build_app, fake_synth, wait_for
from .live import WS

__all__ = ["ERROR_CODES", "WS", "answer", "audio_bytes", "client", "metric", "wait_for"]

#: Every error code the wire contract (and this server) may send.
ERROR_CODES = frozenset({
    "invalid_json", "invalid_request", "empty_text", "invalid_voice", "invalid_language", "language_mismatch",
    "unreadable_text",
    "unknown_voice",
    "text_too_long", "not_ready", "overloaded", "timeout", "backend_error", "cancelled", "internal_error",
})
TERMINAL = ("synthesis_complete", "error")


@contextmanager
def client(synth: Any = None, *, mode: str = "sequential", backend_kw: dict | None = None,
           wait_ready: bool = True, **settings: Any) -> Iterator[TestClient]:
    """``with client(synth, **settings) as c:`` — the real app, ready (loaded and warmed up) unless
    ``wait_ready`` is false. A fake synthesizer's held calls are released on the way out."""
    synth = synth if synth is not None else fake_synth()
    app = build_app(synth, mode, settings=Settings(**settings), **(backend_kw or {}))
    with TestClient(app) as c:
        try:
            if wait_ready:
                wait_for(lambda: c.get("/ping").status_code == 200)
            yield c
        finally:
            release = getattr(synth, "release", None)
            if release is not None:
                release()


def answer(ws: Any) -> list[dict]:
    """One request's frames up to its terminal event: text frames parsed (``kind='text'``),
    binary frames as ``{'kind': 'audio', 'bytes': n}``, a close as ``{'kind': 'close', 'code'}``."""
    out: list[dict] = []
    while True:
        message = ws.receive()
        if message["type"] == "websocket.close":
            out.append({"kind": "close", "code": message.get("code")})
            return out
        if message.get("bytes") is not None:
            out.append({"kind": "audio", "bytes": len(message["bytes"])})
            continue
        event = json.loads(message["text"])
        event["kind"] = "text"
        out.append(event)
        if event.get("type") in TERMINAL:
            return out


def audio_bytes(frames: list[dict]) -> int:
    return sum(f["bytes"] for f in frames if f["kind"] == "audio")


def metric(text: str, series: str) -> float:
    """The value of one exposition line, e.g. ``kokoro_active_sessions`` (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
