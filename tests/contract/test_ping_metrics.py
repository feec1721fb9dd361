"""GET /ping and GET /metrics with the real ONNX runtime (docs/wire-contract.md, docs/operating.md)."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

from backends.engine.sequential import SequentialBackend
from server.app import create_app
from server.metrics import Metrics


@pytest.fixture
def observed_client(onnx_synth, pipeline, voices, server_settings, wait):
    """The app and its backend sharing one :class:`Metrics` (the backend's observer), as
    ``kokoro-serve`` builds them: the backend's own series land in the app's registry."""
    metrics = Metrics()
    backend = SequentialBackend(onnx_synth, pipeline, voices, model_name=onnx_synth.model_name, observer=metrics)
    with TestClient(create_app(server_settings, backend, metrics=metrics)) as client:
        wait(lambda: client.get("/ping").status_code == 200)
        yield client


def test_ping_when_ready(contract_client):
    r = contract_client.get("/ping")
    assert r.status_code == 200
    body = r.json()
    body.pop("warnings", None)  # only while this (shared) machine synthesises slower than real time
    assert body == {"status": "ok", "backend": "onnx", "mode": "sequential", "model": "kokoro-v1.0.int8.onnx",
                    "device": "cpu", "dtype": "float32"}


def test_ping_is_503_while_the_model_loads(loading_client):
    r = loading_client.get("/ping")
    assert r.status_code == 503 and r.json()["status"] == "loading"


SERIES = [
    r'kokoro_requests_total\{route="invocations",status="200"\} [1-9]',
    r'kokoro_requests_total\{route="ws",status="200"\} [1-9]',
    r'kokoro_time_to_first_audio_seconds_bucket\{le="[^"]+",route="invocations"\}',
    r'kokoro_time_to_first_audio_seconds_count\{route="ws"\} [1-9]',
    r"kokoro_segment_synthesis_seconds_count [1-9]",
    r"kokoro_audio_seconds_total [0-9.]*[1-9]",
    r"kokoro_realtime_factor_count [1-9]",
    r"kokoro_active_sessions 0\.0",
    r"kokoro_queue_depth 0\.0",
    r"kokoro_batch_size_count",
    r"kokoro_ready 1\.0",
]


def test_metrics_expose_the_named_series_after_requests(observed_client):
    assert observed_client.post("/invocations", json={"text": "Hi.", "speed": 2.0}).status_code == 200
    with observed_client.websocket_connect("/invocations-bidirectional-stream") as ws:
        ws.send_text('{"text": "Hi.", "speed": 2.0}')
        while "synthesis_complete" not in (ws.receive().get("text") or ""):
            pass
    r = observed_client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    for pattern in SERIES:
        assert re.search(pattern, r.text, re.M), pattern
