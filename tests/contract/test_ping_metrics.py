"""GET /ping and GET /metrics with the real ONNX runtime (DESIGN.md §4)."""

from __future__ import annotations

import re


def test_ping_when_ready(contract_client):
    r = contract_client.get("/ping")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "backend": "onnx", "mode": "sequential", "model": "kokoro-v1.0.int8.onnx"}


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


def test_metrics_expose_the_named_series_after_requests(contract_client):
    assert contract_client.post("/invocations", json={"text": "Hi.", "speed": 2.0}).status_code == 200
    with contract_client.websocket_connect("/invocations-bidirectional-stream") as ws:
        ws.send_text('{"text": "Hi.", "speed": 2.0}')
        while "synthesis_complete" not in (ws.receive().get("text") or ""):
            pass
    r = contract_client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    for pattern in SERIES:
        assert re.search(pattern, r.text, re.M), pattern
