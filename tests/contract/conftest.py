"""The server's contract tests run the real app over the real sequential backend and the real ONNX
runtime. The model is loaded once per test session (``onnx_synth`` in tests/conftest.py) and one
app/backend serves every test here through one in-process client."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from server.settings import Settings
from tests.support.app import LoadedRuntime, build_app, wait_for


def contract_settings() -> Settings:
    """The contract tests' settings: built in code, so no variable of the shell reaches them."""
    return Settings(max_text_chars=400, max_message_bytes=4096)


@pytest.fixture(scope="session")
def server_settings() -> Settings:
    return contract_settings()


@pytest.fixture(scope="session")
def contract_client(onnx_synth, pipeline, voices, server_settings) -> Iterator[TestClient]:
    """One app over one real backend for the whole session (ready: loaded and warmed up)."""
    app = build_app(LoadedRuntime(onnx_synth), settings=server_settings, pipeline=pipeline, voices=voices)
    with TestClient(app) as client:
        wait_for(lambda: client.get("/ping").status_code == 200)
        yield client


@pytest.fixture
def loading_client(onnx_synth, pipeline, voices, server_settings) -> Iterator[TestClient]:
    """An app whose backend is still loading (released at teardown)."""
    gate = threading.Event()
    app = build_app(LoadedRuntime(onnx_synth, gate), settings=server_settings, pipeline=pipeline, voices=voices)
    try:
        with TestClient(app) as client:
            yield client
            gate.set()
    finally:
        gate.set()


@pytest.fixture
def wait():
    return wait_for
