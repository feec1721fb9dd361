"""The WebSocket session contract over the real app and sequential backend (fake synthesizer):
order, errors that keep the session open, cancel, limits, idle timeout, drain."""

from __future__ import annotations

import json
import threading

import pytest
from starlette.testclient import WebSocketDenialResponse

WS = "/invocations-bidirectional-stream"


def req(text: str, rid: str | int | None = None, **kw) -> str:
    body = {"text": text, **kw}
    if rid is not None:
        body["request_id"] = rid
    return json.dumps(body)


def test_pipelined_requests_are_answered_in_order_and_never_interleave(make_client, collect):
    with make_client() as client, client.websocket_connect(WS) as ws:
        ws.send_bytes(req("First one here. And more words follow it now.", "a").encode())  # binary, no type
        ws.send_text(req("Second.", "b", type="synthesize"))
        ws.send_bytes(req("Third request. With two sentences.", "c").encode())
        ws.send_text(json.dumps({"type": "close"}))
        frames = collect(ws) + collect(ws) + collect(ws) + collect(ws)

    kinds = [(f.get("type") or f["kind"], f.get("request_id")) for f in frames]
    position = 0
    for rid in ("a", "b", "c"):
        assert kinds[position] == ("synthesis_start", rid)
        position += 1
        audio = 0
        while kinds[position][0] == "audio":
            audio += 1
            position += 1
        assert audio >= 1
        assert kinds[position] == ("synthesis_complete", rid)
        position += 1
    assert frames[position] == {"kind": "close", "code": 1000}
    start = frames[0]
    assert start == {"kind": "text", "type": "synthesis_start", "request_id": "a", "sample_rate": 24000,
                     "encoding": "pcm_s16le", "channels": 1}


def test_audio_duration_matches_the_pcm_sent(make_client, collect):
    with make_client() as client, client.websocket_connect(WS) as ws:
        ws.send_text(req("Count these four words.", 7))
        frames = collect(ws)
    pcm = sum(f["bytes"] for f in frames if f["kind"] == "audio")
    done = frames[-1]
    assert done["type"] == "synthesis_complete" and done["request_id"] == 7
    assert done["audio_duration_s"] == pytest.approx(pcm / 2 / 24000, abs=1e-3)
    assert done["elapsed_s"] > 0 and 0 < done["ttfa_ms"] <= done["elapsed_s"] * 1000 + 0.1


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (b"{not json", "invalid_json"),
        (b"\xff\xfe\x00garbage", "invalid_json"),
        (b"[1, 2, 3]", "invalid_json"),
        (b"{}", "invalid_request"),
        (b'{"text": 42}', "invalid_request"),
        (b'{"text": "hi", "speed": "fast"}', "invalid_request"),
        (b'{"text": "hi", "speed": 9}', "invalid_request"),
        (b'{"text": "hi", "speed": true}', "invalid_request"),
        (b'{"text": "hi", "speed": NaN}', "invalid_json"),
        (b'{"text": "hi", "voice": "../../etc/passwd"}', "invalid_voice"),
        (b'{"text": "hi", "voice": "zz_missing"}', "unknown_voice"),
        (b'{"text": "hi", "voice": 3}', "invalid_request"),
        (b'{"text": "hi", "sample_rate": 12345}', "invalid_request"),
        (b'{"text": "   "}', "empty_text"),
        (b'{"text": "hi", "type": "sing"}', "invalid_request"),
        (b'{"text": "hi", "request_id": {"a": 1}}', "invalid_request"),
        (b'{"text": "' + b"x" * 300 + b'"}', "text_too_long"),
        (b'{"text": "hi", "speed": 1' + b"0" * 5000 + b"}", "invalid_json"),
    ],
)
def test_each_bad_message_gets_a_typed_error_and_the_session_still_synthesises(make_client, collect, message, code):
    with make_client(max_text_chars=200) as client, client.websocket_connect(WS) as ws:
        ws.send_bytes(message)
        error = collect(ws)
        ws.send_text(req("Still here.", "after"))
        after = collect(ws)
    assert [(e["type"], e["code"]) for e in error] == [("error", code)]
    assert error[0]["message"]
    assert after[0]["type"] == "synthesis_start" and after[-1]["type"] == "synthesis_complete"


def test_error_event_carries_the_request_id_and_keeps_its_place_in_the_queue(make_client, collect):
    with make_client() as client, client.websocket_connect(WS) as ws:
        ws.send_text(req("One here.", "ok-1"))
        ws.send_text(req("x", "bad", voice="nobody"))
        ws.send_text(req("Two here.", "ok-2"))
        frames = collect(ws) + collect(ws) + collect(ws)
    terminal = [(f["type"], f["request_id"]) for f in frames if f.get("type") in ("synthesis_complete", "error")]
    assert terminal == [("synthesis_complete", "ok-1"), ("error", "bad"), ("synthesis_complete", "ok-2")]


def test_backend_fault_is_an_error_event_and_the_next_request_succeeds(make_client, collect, synth):
    synth.fail_on = "boom"
    with make_client() as client, client.websocket_connect(WS) as ws:
        ws.send_text(req("This will boom.", "f"))
        failed = collect(ws)
        ws.send_text(req("This will not.", "g"))
        ok = collect(ws)
    assert failed[-1]["type"] == "error" and failed[-1]["code"] == "backend_error"
    assert failed[-1]["request_id"] == "f"
    assert ok[-1]["type"] == "synthesis_complete"


def test_cancel_all_drops_in_flight_and_queued_requests(make_client, collect, synth, wait):
    with make_client() as client, client.websocket_connect(WS) as ws:
        synth.gate = threading.Event()
        synth.started.clear()
        ws.send_text(req("In flight now.", 1))
        ws.send_text(req("Queued second.", 2))
        ws.send_text(req("Queued third.", 3))
        wait(synth.started.is_set)
        ws.send_text(json.dumps({"type": "cancel"}))
        cancelled = collect(ws) + collect(ws) + collect(ws)
        synth.gate.set()
        ws.send_text(req("After cancel.", 4))
        after = collect(ws)
    assert [(f["type"], f["request_id"], f["code"]) for f in cancelled] == [
        ("error", 1, "cancelled"), ("error", 2, "cancelled"), ("error", 3, "cancelled")
    ]
    assert after[-1]["type"] == "synthesis_complete"
    assert not any("Queued" in text for text in synth.calls)  # queued work never reached the runtime


def test_cancel_by_id_drops_only_that_request(make_client, collect, synth, wait):
    with make_client() as client, client.websocket_connect(WS) as ws:
        synth.gate = threading.Event()
        synth.started.clear()
        ws.send_text(req("Keep one.", "k1"))
        ws.send_text(req("Drop me.", "drop"))
        ws.send_text(req("Keep two.", "k2"))
        wait(synth.started.is_set)
        ws.send_text(json.dumps({"type": "cancel", "request_id": "drop"}))
        synth.gate.set()
        frames = collect(ws) + collect(ws) + collect(ws)
    terminal = [(f["type"], f["request_id"]) for f in frames if f.get("type") in ("synthesis_complete", "error")]
    assert terminal == [("synthesis_complete", "k1"), ("error", "drop"), ("synthesis_complete", "k2")]


def test_a_full_session_queue_answers_overloaded_at_once(make_client, collect, synth, wait):
    with make_client(max_queued_per_session=1) as client, client.websocket_connect(WS) as ws:
        synth.gate = threading.Event()
        synth.started.clear()
        ws.send_text(req("Running.", "r"))
        wait(synth.started.is_set)
        ws.send_text(req("Waiting.", "w"))
        ws.send_text(req("One too many.", "x"))
        rejected = collect(ws)  # arrives while "r" is still synthesising
        synth.gate.set()
        rest = collect(ws) + collect(ws)
    assert [(f["type"], f["request_id"], f["code"]) for f in rejected] == [("error", "x", "overloaded")]
    assert [f["request_id"] for f in rest if f.get("type") == "synthesis_complete"] == ["r", "w"]


def test_message_over_the_size_limit_closes_1009(make_client, collect):
    with make_client(max_message_bytes=1024) as client, client.websocket_connect(WS) as ws:
        ws.send_text(req("y" * 2000))
        assert collect(ws) == [{"kind": "close", "code": 1009}]


def test_idle_session_closes_normally(make_client):
    with make_client(idle_timeout_s=0.2) as client, client.websocket_connect(WS) as ws:
        message = ws.receive()
    assert message["type"] == "websocket.close" and message["code"] == 1000
    assert message.get("reason") == "idle timeout"


def test_session_limit_refuses_the_upgrade_with_503(make_client):
    with make_client(max_sessions=1) as client, client.websocket_connect(WS):
        with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect(WS):
            pass
        assert denied.value.status_code == 503
        assert denied.value.json()["error"]["code"] == "overloaded"


def test_upgrade_before_the_model_is_loaded_gets_503(make_client, synth):
    synth.load_gate = threading.Event()
    try:
        with make_client(wait_ready=False) as client:
            with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect(WS):
                pass
            assert denied.value.status_code == 503
            assert denied.value.json()["error"]["code"] == "not_ready"
    finally:
        synth.load_gate.set()


def test_disconnect_mid_synthesis_frees_the_session_and_drops_queued_work(make_client, synth, wait):
    with make_client() as client:
        synth.gate = threading.Event()
        state = client.app.state.kokoro
        with client.websocket_connect(WS) as ws:
            synth.started.clear()
            ws.send_text(req("In flight.", 1))
            ws.send_text(req("Never run.", 2))
            wait(synth.started.is_set)
        wait(lambda: not state.sessions)
        synth.gate.set()
        wait(lambda: client.get("/metrics").text.count("kokoro_active_sessions 0.0") == 1)
        assert client.post("/invocations", json={"text": "Still serving."}).status_code == 200
    assert "Never run." not in synth.calls


def test_sample_rate_is_resampled_and_announced(make_client, collect):
    with make_client() as client, client.websocket_connect(WS) as ws:
        ws.send_text(req("Same words here.", "24"))
        native = collect(ws)
        ws.send_text(req("Same words here.", "16", sample_rate=16000))
        low = collect(ws)
    assert low[0]["sample_rate"] == 16000
    native_bytes = sum(f["bytes"] for f in native if f["kind"] == "audio")
    low_bytes = sum(f["bytes"] for f in low if f["kind"] == "audio")
    assert low_bytes == pytest.approx(native_bytes * 2 / 3, rel=0.01)


def test_drain_finishes_queued_requests_then_closes_1001(make_client, collect, synth, wait):
    with make_client() as client:
        synth.gate = threading.Event()
        state = client.app.state.kokoro
        with client.websocket_connect(WS) as ws:
            synth.started.clear()
            ws.send_text(req("Accepted one.", "a1"))
            ws.send_text(req("Accepted two.", "a2"))
            wait(synth.started.is_set)
            drained = client.portal.start_task_soon(state.drain, 10.0)
            wait(lambda: client.get("/ping").status_code == 503)
            assert client.get("/ping").json()["status"] == "draining"
            refused = client.post("/invocations", json={"text": "Too late."})
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "not_ready"
            ws.send_text(req("Sent during the drain.", "late"))
            late = collect(ws)
            synth.gate.set()
            frames = collect(ws) + collect(ws) + collect(ws)
        assert drained.result(timeout=10) is True
    assert [(f["type"], f["request_id"], f["code"]) for f in late] == [("error", "late", "not_ready")]
    done = [f["request_id"] for f in frames if f.get("type") == "synthesis_complete"]
    assert done == ["a1", "a2"]
    assert frames[-1] == {"kind": "close", "code": 1001}
