"""WS /invocations-bidirectional-stream with the real ONNX runtime (docs/wire-contract.md)."""

from __future__ import annotations

import json

import numpy as np
import pytest

WS = "/invocations-bidirectional-stream"


def frames_until_terminal(ws) -> list[tuple[str, object]]:
    """[('text', event) | ('audio', bytes) | ('close', code)] up to a terminal event or a close."""
    out: list[tuple[str, object]] = []
    while True:
        m = ws.receive()
        if m["type"] == "websocket.close":
            out.append(("close", m.get("code")))
            return out
        if m.get("bytes") is not None:
            out.append(("audio", m["bytes"]))
            continue
        event = json.loads(m["text"])
        out.append(("text", event))
        if event["type"] in ("synthesis_complete", "error"):
            return out


def check_one_request(frames, request_id) -> bytes:
    """start, >= 1 binary PCM frame, complete — in that order, all for ``request_id``."""
    assert frames[0][0] == "text" and frames[0][1]["type"] == "synthesis_start"
    assert frames[0][1] == {"type": "synthesis_start", "request_id": request_id, "sample_rate": 24000,
                            "encoding": "pcm_s16le", "channels": 1}
    assert all(kind == "audio" for kind, _ in frames[1:-1]) and len(frames) >= 3
    done = frames[-1][1]
    assert done["type"] == "synthesis_complete" and done["request_id"] == request_id
    pcm = b"".join(data for _, data in frames[1:-1])
    assert done["audio_duration_s"] == pytest.approx(len(pcm) / 2 / 24000, abs=1e-3)
    assert 0 < done["ttfa_ms"] <= done["elapsed_s"] * 1000 + 0.1  # both rounded
    return pcm


def rms(pcm: bytes) -> float:
    return float(np.sqrt(np.mean((np.frombuffer(pcm, "<i2") / 32768.0) ** 2)))


def test_binary_frame_without_type_then_a_second_sentence_on_the_same_connection(contract_client):
    with contract_client.websocket_connect(WS) as ws:
        ws.send_bytes(json.dumps({"text": "Hello.", "speed": 2.0, "request_id": "r1"}).encode())  # as SageMaker sends
        first = check_one_request(frames_until_terminal(ws), "r1")
        ws.send_text(json.dumps({"text": "Goodbye.", "speed": 2.0, "request_id": "r2"}))
        second = check_one_request(frames_until_terminal(ws), "r2")
    assert rms(first) > 0.01 and rms(second) > 0.01  # speech, not silence


def test_pipelined_requests_in_order_never_interleaved_and_close_after_the_queue(contract_client):
    with contract_client.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({"text": "One.", "speed": 2.0, "request_id": "p1"}))
        ws.send_bytes(b"{broken")
        ws.send_text(json.dumps({"text": "Two.", "speed": 2.0, "request_id": "p2"}))
        ws.send_text(json.dumps({"type": "close"}))
        one = frames_until_terminal(ws)
        error = frames_until_terminal(ws)
        two = frames_until_terminal(ws)
        closed = frames_until_terminal(ws)
    check_one_request(one, "p1")
    assert error == [("text", {"type": "error", "request_id": None, "code": "invalid_json",
                               "message": error[0][1]["message"]})]
    check_one_request(two, "p2")
    assert closed == [("close", 1000)]


BAD = [
    ("not json at all", "invalid_json"),
    ({"voice": "jm_kumo"}, "invalid_request"),  # missing text
    ({"text": 12}, "invalid_request"),  # wrong type
    ({"text": "Hi.", "speed": "quick"}, "invalid_request"),
    ({"text": "Hi.", "speed": 2.5}, "invalid_request"),  # out of range
    ({"text": "Hi.", "voice": "af_nobody"}, "unknown_voice"),
    ({"text": "x" * 401}, "text_too_long"),
    ({"text": "  "}, "empty_text"),
]


def test_each_bad_message_gets_an_error_event_and_the_session_still_synthesises(contract_client):
    with contract_client.websocket_connect(WS) as ws:
        for i, (body, _) in enumerate(BAD):
            if isinstance(body, dict):
                body = json.dumps({**body, "request_id": f"bad-{i}"})
            ws.send_text(body)
        errors = [frames_until_terminal(ws) for _ in BAD]
        ws.send_text(json.dumps({"text": "Fine.", "speed": 2.0, "request_id": "good"}))
        check_one_request(frames_until_terminal(ws), "good")
    for i, ((body, code), frames) in enumerate(zip(BAD, errors, strict=True)):
        assert len(frames) == 1 and frames[0][0] == "text"
        event = frames[0][1]
        assert (event["type"], event["code"]) == ("error", code)
        assert event["request_id"] == (None if isinstance(body, str) else f"bad-{i}")
        assert event["message"]


def test_sample_rate_is_honoured(contract_client):
    with contract_client.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({"text": "Hi.", "speed": 2.0, "sample_rate": 16000, "request_id": "sr"}))
        frames = frames_until_terminal(ws)
    assert frames[0][1]["sample_rate"] == 16000
    pcm = b"".join(d for k, d in frames if k == "audio")
    assert frames[-1][1]["audio_duration_s"] == pytest.approx(len(pcm) / 2 / 16000, abs=1e-3)


def test_message_over_the_limit_closes_1009(contract_client):
    with contract_client.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({"text": "a" * 5000}))
        assert frames_until_terminal(ws) == [("close", 1009)]
