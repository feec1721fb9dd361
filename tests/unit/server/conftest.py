"""Fixtures for the server's fast tests: the real app, the real sequential backend and text pipeline
(espeak-ng G2P, offline), over a *fake synthesizer* — the one part replaced, because these tests
need knobs the model lacks: a gate to hold a segment mid-synthesis, a chosen failure, a slow load
(compare livekit's tests/fake_tts.py). The fake implements the real Synthesizer interface.
The real runtime is exercised in tests/contract and tests/e2e.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from backends.base import SAMPLE_RATE, Segment
from backends.g2p import EspeakG2P
from backends.onnx_runtime import load_vocab
from backends.sequential import SequentialBackend
from backends.text import TextPipeline
from backends.voices import VoiceStore
from server.app import create_app
from server.settings import Settings

VOICES = ("af_test", "am_other")


class FakeSynth:
    """Synthesizer protocol: ``load()``, ``synthesize(segment) -> float32 audio at 24 kHz``.

    * audio: 0.1 s of a quiet tone per word (deterministic, never empty);
    * ``gate``: when set to an Event, every call waits on it (a segment "in progress");
    * ``fail_on``: a word that makes ``synthesize`` raise ``RuntimeError`` (a runtime fault);
    * ``load_gate``: ``load()`` waits on it (a model still loading).
    Thread-safe; records the text of every call in ``calls``.
    """

    name = "fake"
    sample_rate = SAMPLE_RATE
    thread_safe = False
    model_name = "fake-model"

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.gate: threading.Event | None = None
        self.load_gate: threading.Event | None = None
        self.fail_on: str | None = None
        self.started = threading.Event()  # set when a call begins
        self._lock = threading.Lock()

    def load(self) -> None:
        if self.load_gate is not None:
            self.load_gate.wait(30)

    def synthesize(self, segment: Segment) -> np.ndarray:
        with self._lock:
            self.calls.append(segment.text)
        self.started.set()
        if self.gate is not None:
            self.gate.wait(30)
        if self.fail_on and self.fail_on in segment.text:
            raise RuntimeError("fake runtime fault")
        words = max(1, len(segment.text.split()))
        t = np.arange(int(0.1 * SAMPLE_RATE * words), dtype=np.float32) / SAMPLE_RATE
        return (0.1 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


@pytest.fixture(scope="session")
def fake_pipeline() -> TextPipeline:
    import kokoro_onnx

    vocab = load_vocab(Path(kokoro_onnx.__file__).parent / "config.json")
    return TextPipeline(EspeakG2P().phonemize, vocab, segment_phonemes=40)


@pytest.fixture(scope="session")
def fake_voices() -> VoiceStore:
    rng = np.random.default_rng(0)
    return VoiceStore({v: rng.standard_normal((510, 1, 256)).astype(np.float32) for v in VOICES}, VOICES[0])


@pytest.fixture
def synth() -> FakeSynth:
    return FakeSynth()


@pytest.fixture
def make_client(fake_pipeline, fake_voices, synth) -> Iterator[Callable[..., TestClient]]:
    """``with make_client(**settings) as client:`` — the real app over the fake synthesizer."""
    opened: list[TestClient] = []

    @contextmanager
    def make(wait_ready: bool = True, backend_kw: dict | None = None, **overrides) -> Iterator[TestClient]:
        backend = SequentialBackend(
            synth, fake_pipeline, fake_voices, model_name="fake-model", **(backend_kw or {})
        )
        app = create_app(Settings(**overrides), backend)
        with TestClient(app) as client:
            opened.append(client)
            if wait_ready:
                wait_for(lambda: client.get("/ping").status_code == 200)
            yield client

    yield make
    if synth.gate is not None:
        synth.gate.set()


@pytest.fixture
def wait():
    return wait_for


@pytest.fixture
def collect():
    return receive_until_terminal


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll until ``predicate()`` holds (a condition, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


def receive_until_terminal(ws) -> list[dict]:
    """Frames of one request up to its terminal event, as dicts: text -> parsed JSON with
    ``kind='text'``; binary -> ``{'kind': 'audio', 'bytes': n}``; a close -> ``{'kind': 'close'}``."""
    import json

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
        if event["type"] in ("synthesis_complete", "error"):
            return out


@pytest.fixture
def live_server(fake_pipeline, fake_voices, synth) -> Iterator[Callable[..., str]]:
    """``url = live_server(**settings)``: the app under a real uvicorn on a loopback port, in a
    thread (for what the in-process client cannot show: chunked transfer, truncation)."""
    import asyncio
    import socket

    import uvicorn

    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(**overrides) -> str:
        backend = SequentialBackend(synth, fake_pipeline, fake_voices, model_name="fake-model")
        app = create_app(Settings(**overrides), backend)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2))
        thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
        thread.start()
        servers.append((server, thread))
        url = f"http://127.0.0.1:{port}"
        import httpx

        def ready() -> bool:
            try:
                return httpx.get(f"{url}/ping", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready)
        return url

    yield start
    if synth.gate is not None:
        synth.gate.set()
    for server, thread in servers:
        server.should_exit = True
        thread.join(10)
