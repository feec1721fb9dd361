"""The server's contract tests run the real app over the real sequential backend and the real ONNX
runtime. The model is loaded once per test session (``onnx_synth`` in tests/conftest.py) and one
app/backend serves every test here through one in-process client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from starlette.testclient import TestClient

from backends.sequential import SequentialBackend
from server.app import create_app
from server.settings import Settings


class LoadedSynth:
    """The session's already-loaded ONNX synthesizer; ``load()`` only waits on an optional gate
    (a model "still loading") instead of loading the model a second time."""

    def __init__(self, inner, gate: threading.Event | None = None):
        self.inner = inner
        self.name, self.sample_rate, self.thread_safe = inner.name, inner.sample_rate, inner.thread_safe
        self.model_name = inner.model_name
        self.gate = gate

    def load(self) -> None:
        if self.gate is not None:
            self.gate.wait(60)

    def synthesize(self, segment):
        return self.inner.synthesize(segment)


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.02)


@pytest.fixture(scope="session")
def server_settings() -> Settings:
    return Settings(max_text_chars=400, max_message_bytes=4096)


@pytest.fixture(scope="session")
def contract_client(onnx_synth, pipeline, voices, server_settings) -> Iterator[TestClient]:
    """One app over one real backend for the whole session (ready: loaded and warmed up)."""
    backend = SequentialBackend(LoadedSynth(onnx_synth), pipeline, voices, model_name=onnx_synth.model_name)
    app = create_app(server_settings, backend)
    with TestClient(app) as client:
        wait_for(lambda: client.get("/ping").status_code == 200)
        yield client


@pytest.fixture
def loading_client(onnx_synth, pipeline, voices, server_settings) -> Iterator[TestClient]:
    """An app whose backend is still loading (released at teardown)."""
    gate = threading.Event()
    backend = SequentialBackend(LoadedSynth(onnx_synth, gate), pipeline, voices, model_name=onnx_synth.model_name)
    try:
        with TestClient(create_app(server_settings, backend)) as client:
            yield client
            gate.set()
    finally:
        gate.set()


@pytest.fixture
def wait():
    return wait_for
