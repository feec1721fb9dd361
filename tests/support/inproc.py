"""The real app, the real SequentialBackend/BatchedBackend and TextPipeline (espeak-ng, offline),
over :class:`~backends.fake.FakeSynthesizer` — in process, no model needed.

Frames from a Starlette ``TestClient`` WebSocket are read with :func:`answer` (one request's
frames up to its terminal event)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from starlette.testclient import TestClient

from backends.fake import FakeSynthesizer
from backends.g2p import EspeakG2P
from backends.onnx_runtime import load_vocab
from backends.text import TextPipeline
from backends.voices import VoiceStore
from server.app import create_app
from server.settings import Settings

WS = "/invocations-bidirectional-stream"
VOICES = ("af_test", "am_other", "jf_third")
#: Every error code the wire contract (and this server) may send.
ERROR_CODES = frozenset({
    "invalid_json", "invalid_request", "empty_text", "invalid_voice", "invalid_language", "language_mismatch",
    "unknown_voice",
    "text_too_long", "not_ready", "overloaded", "timeout", "backend_error", "cancelled", "internal_error",
})
TERMINAL = ("synthesis_complete", "error")


@cache
def pipeline() -> TextPipeline:
    import kokoro_onnx

    vocab = load_vocab(Path(kokoro_onnx.__file__).parent / "config.json")
    return TextPipeline(EspeakG2P().phonemize, vocab, segment_phonemes=60)


@cache
def voices() -> VoiceStore:
    rng = np.random.default_rng(0)
    return VoiceStore({v: rng.standard_normal((510, 1, 256)).astype(np.float32) for v in VOICES}, VOICES[0])


def make_backend(synth: FakeSynthesizer, mode: str = "sequential", **kw: Any) -> Any:
    if mode == "concurrent":
        from backends.concurrent import BatchedBackend

        return BatchedBackend(synth, pipeline(), voices(), model_name="fake", **kw)
    from backends.sequential import SequentialBackend

    return SequentialBackend(synth, pipeline(), voices(), model_name="fake", **kw)


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll until ``predicate()`` holds (a condition to reach, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


@contextmanager
def client(
    synth: FakeSynthesizer | None = None, *, mode: str = "sequential", backend_kw: dict | None = None, **settings: Any
) -> Iterator[TestClient]:
    """``with client(synth, **settings) as c:`` — the real app, ready (warmed up)."""
    synth = synth if synth is not None else FakeSynthesizer(environ={}, segment_s=0.0)
    backend = make_backend(synth, mode, **(backend_kw or {}))
    app = create_app(Settings(**settings), backend)
    with TestClient(app) as c:
        wait_for(lambda: c.get("/ping").status_code == 200)
        try:
            yield c
        finally:
            synth.release()


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
