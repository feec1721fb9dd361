"""Deepgram's speak WebSocket (``/v1/speak``) over the real app and backend (fake runtime): the
messages Pipecat's Deepgram services rely on, server-side text buffering, barge-in, limits, keys."""

from __future__ import annotations

import json
import threading

import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse

from tests.support.app import build_app, fake_synth, fake_voices, wait_for
from tests.support.inproc import client

URL = "/v1/speak?model=af_test&encoding=linear16&sample_rate=24000"


def speak(ws, text: str) -> None:
    ws.send_text(json.dumps({"type": "Speak", "text": text}))


def receive(ws) -> dict:
    """The next frame: a control message parsed, audio as ``{'type': 'audio', 'bytes': n}``."""
    m = ws.receive()
    if m["type"] == "websocket.close":
        return {"type": "close", "code": m.get("code")}
    if m.get("bytes") is not None:
        return {"type": "audio", "bytes": len(m["bytes"])}
    return json.loads(m["text"])


def until(ws, kind: str) -> list[dict]:
    """Frames up to and including the first of type ``kind`` (or a close)."""
    out = []
    while True:
        frame = receive(ws)
        out.append(frame)
        if frame["type"] in (kind, "close"):
            return out


def test_metadata_then_words_one_per_message_then_flushed_after_the_audio(make_client):
    with make_client() as c, c.websocket_connect(URL) as ws:
        meta = receive(ws)
        assert meta["type"] == "Metadata" and meta["model_name"] == "af_test"
        assert {"request_id", "model_version", "model_uuid"} <= set(meta)
        for word in "Hello there, this is one sentence. And here is a second".split():
            speak(ws, word + " ")  # as LiveKit's plugin sends: one word a message
        ws.send_text(json.dumps({"type": "Flush"}))
        frames = until(ws, "Flushed")
        speak(ws, "Another turn.")
        ws.send_bytes(json.dumps({"type": "Flush"}).encode())  # binary frames too (SageMaker)
        second = until(ws, "Flushed")
    assert frames[-1] == {"type": "Flushed", "sequence_id": 0}
    assert [f["type"] for f in frames[:-1]] == ["audio"] * (len(frames) - 1) and len(frames) >= 3
    assert second[-1] == {"type": "Flushed", "sequence_id": 1} and second[0]["type"] == "audio"


def test_a_complete_sentence_starts_speaking_before_any_flush(make_client):
    with make_client() as c, c.websocket_connect(URL) as ws:
        receive(ws)
        speak(ws, "The first sentence is complete. And the")
        assert receive(ws)["type"] == "audio"  # no Flush sent: the server cut the sentence itself


def test_clear_stops_the_turn_acknowledges_after_its_last_frame_and_the_next_turn_plays():
    gate = threading.Event()
    synth = fake_synth()
    with client(synth) as c, c.websocket_connect(URL) as ws:
        receive(ws)
        synth.gate, _ = gate, synth.started.clear()  # after the warm-up: hold the next segment
        speak(ws, "One sentence here. " * 6)
        ws.send_text(json.dumps({"type": "Flush"}))
        assert synth.started.wait(10)  # the first segment is being synthesised and held
        ws.send_text(json.dumps({"type": "Clear"}))
        gate.set()
        frames = until(ws, "Cleared")
        calls_at_clear = len(synth.calls)
        speak(ws, "Next turn.")
        ws.send_text(json.dumps({"type": "Flush"}))
        after = until(ws, "Flushed")
    assert frames[-1] == {"type": "Cleared", "sequence_id": 1}
    assert all(f["type"] == "audio" for f in frames[:-1]) and len(frames) <= 2  # at most the held segment
    assert calls_at_clear <= 2  # the rest of the turn was never synthesised
    assert after[0]["type"] == "audio" and after[-1] == {"type": "Flushed", "sequence_id": 1}
    assert all(f["type"] != "Flushed" or f["sequence_id"] == 1 for f in after)


def test_clear_interrupts_the_running_call_so_the_next_turn_does_not_wait_for_it():
    """A barge-in during a long runtime call: the call is stopped (the fake runtime can be, as ONNX
    can), so the next turn is spoken at once instead of after it. Without that, this test would wait
    the call's ten minutes."""
    synth = fake_synth()
    with client(synth) as c, c.websocket_connect(URL) as ws:
        receive(ws)
        synth.segment_s, _ = 600.0, synth.started.clear()
        speak(ws, "A sentence the listener cuts off. ")
        assert synth.started.wait(10)  # its call is running, and would run for ten minutes
        ws.send_text(json.dumps({"type": "Clear"}))
        assert until(ws, "Cleared")[-1]["type"] == "Cleared"
        synth.segment_s = 0.0
        speak(ws, "Next turn.")
        ws.send_text(json.dumps({"type": "Flush"}))
        after = until(ws, "Flushed")
    assert after[0]["type"] == "audio" and after[-1]["type"] == "Flushed"


def test_close_speaks_what_is_buffered_then_closes_normally(make_client):
    with make_client() as c, c.websocket_connect(URL) as ws:
        receive(ws)
        speak(ws, "No full stop at the end")
        ws.send_text(json.dumps({"type": "Close"}))
        frames = until(ws, "close")
    assert frames[0]["type"] == "audio" and frames[-1] == {"type": "close", "code": 1000}


@pytest.mark.parametrize(
    ("message", "code"),
    [(b"{broken", "INVALID_MESSAGE"), ('{"type": "Dance"}', "UNKNOWN_MESSAGE_TYPE"),
     ('{"type": "Speak"}', "INVALID_MESSAGE"), ('{"type": "Speak", "text": 5}', "INVALID_MESSAGE")],
)
def test_bad_messages_get_a_warning_and_the_session_goes_on(make_client, message, code):
    with make_client() as c, c.websocket_connect(URL) as ws:
        receive(ws)
        ws.send_bytes(message) if isinstance(message, bytes) else ws.send_text(message)
        warning = receive(ws)
        speak(ws, "Still here.")
        ws.send_text(json.dumps({"type": "Flush"}))
        frames = until(ws, "Flushed")
    assert warning["type"] == "Warning" and warning["code"] == code and warning["description"]
    assert frames[0]["type"] == "audio"


def test_text_past_the_buffer_limit_is_refused_with_a_warning(make_client):
    with make_client(max_text_chars=200) as c, c.websocket_connect(URL) as ws:
        receive(ws)
        speak(ws, "word " * 50)  # no sentence end: all of it waits in the buffer
        warning = receive(ws)
    assert warning["type"] == "Warning" and warning["code"] == "TEXT_TOO_LONG"


def test_an_unknown_model_is_refused_as_deepgram_refuses_it_and_an_alias_resolves():
    voices = fake_voices().with_aliases({"aura-2-thalia-en": "am_other"})  # KOKORO_VOICE_ALIASES
    with TestClient(build_app(fake_synth(), voices=voices)) as c:
        wait_for(lambda: c.get("/ping").status_code == 200)
        with pytest.raises(WebSocketDenialResponse) as refused, c.websocket_connect("/v1/speak?model=aura-2-helena-en"):
            pass
        with c.websocket_connect("/v1/speak?model=aura-2-thalia-en") as ws:
            meta2 = receive(ws)
            speak(ws, "Hello.")
            ws.send_text(json.dumps({"type": "Flush"}))
            frames = until(ws, "Flushed")
    body = refused.value.json()
    assert refused.value.status_code == 400 and body["err_code"] == "Bad Request"
    assert body["err_msg"].startswith("Bad Request: No such model/version combination found.")
    assert "aura-2-helena-en" in refused.value.headers["dg-error"]  # Pipecat shows this header
    assert meta2["model_name"] == "aura-2-thalia-en" and frames[0]["type"] == "audio"


def test_sample_rate_is_honoured(make_client):
    sizes = {}
    with make_client() as c:
        for rate in (24000, 16000):
            with c.websocket_connect(f"/v1/speak?model=af_test&encoding=linear16&sample_rate={rate}") as ws:
                receive(ws)
                speak(ws, "Exactly the same words.")
                ws.send_text(json.dumps({"type": "Flush"}))
                sizes[rate] = sum(f.get("bytes", 0) for f in until(ws, "Flushed"))
    assert sizes[16000] == pytest.approx(sizes[24000] * 2 / 3, rel=0.01)


def test_unsupported_encoding_is_refused_at_the_upgrade_with_the_reason(make_client):
    with make_client() as c, pytest.raises(WebSocketDenialResponse) as refused:
        with c.websocket_connect("/v1/speak?model=af_test&encoding=mp3"):
            pass
    assert refused.value.status_code == 400
    assert refused.value.json()["err_code"] == "INVALID_QUERY_PARAMETER"
    assert "linear16, mulaw or alaw" in refused.value.json()["err_msg"]


@pytest.mark.parametrize("encoding", ["mulaw", "alaw"])
def test_telephony_encodings_stream_one_byte_per_sample_at_8khz(make_client, encoding):
    with make_client() as c, c.websocket_connect(f"/v1/speak?model=af_test&encoding={encoding}&sample_rate=8000") as ws:
        receive(ws)
        speak(ws, "Exactly the same words.")
        ws.send_text(json.dumps({"type": "Flush"}))
        g711 = sum(f.get("bytes", 0) for f in until(ws, "Flushed"))
    with make_client() as c, c.websocket_connect("/v1/speak?model=af_test&encoding=linear16&sample_rate=8000") as ws:
        receive(ws)
        speak(ws, "Exactly the same words.")
        ws.send_text(json.dumps({"type": "Flush"}))
        pcm = sum(f.get("bytes", 0) for f in until(ws, "Flushed"))
    assert g711 * 2 == pytest.approx(pcm, abs=4)
def test_the_key_is_checked_in_deepgrams_own_header_where_one_is_set(make_client):
    with make_client(api_key="sekret") as c:
        with c.websocket_connect(URL, headers={"Authorization": "Token sekret"}) as ws:
            assert receive(ws)["type"] == "Metadata"
        with c.websocket_connect(URL + "&token=sekret") as ws:
            assert receive(ws)["type"] == "Metadata"
        for headers in ({"Authorization": "Token wrong"}, {}):
            with pytest.raises(WebSocketDenialResponse) as refused, c.websocket_connect(URL, headers=headers):
                pass
            assert refused.value.status_code == 401
    with make_client() as c, c.websocket_connect(URL, headers={"Authorization": "Token anything"}) as ws:
        assert receive(ws)["type"] == "Metadata"  # no key configured: any key is accepted


@pytest.mark.cloud
async def test_sagemaker_opens_v1_speak_at_the_model_invocation_path_and_query(live_server):
    """As Pipecat's DeepgramSageMakerTTSService invokes it: path ``v1/speak``, the query as a string."""
    from tests.agent_support import sagemaker_standin as sm

    base = live_server().replace("http://", "ws://")
    standin = sm.SageMakerStandIn(base, max_part_bytes=1000)
    stream = await standin.invoke_endpoint_with_bidirectional_stream(sm.InvokeEndpointWithBidirectionalStreamInput(
        endpoint_name="kokoro", model_invocation_path="v1/speak",
        model_query_string="model=af_test&encoding=linear16&sample_rate=16000",
    ))
    for message in ({"type": "Speak", "text": "Hello from SageMaker."}, {"type": "Flush"}):
        part = sm.RequestPayloadPart(bytes_=json.dumps(message).encode())  # no data type: binary frames
        await stream.input_stream.send(sm.RequestStreamEventPayloadPart(value=part))
    _, output = await stream.await_output()
    parts = []
    while True:
        event = await output.receive()
        parts.append(event.value)
        if event.value.data_type == "UTF8" and b"Flushed" in event.value.bytes_:
            break
    await stream.close()
    assert standin.targets == [f"{base}/v1/speak?model=af_test&encoding=linear16&sample_rate=16000"]
    assert json.loads(parts[0].bytes_)["type"] == "Metadata"
    assert sum(len(p.bytes_) for p in parts if p.data_type == "BINARY") > 0
    assert json.loads(parts[-1].bytes_) == {"type": "Flushed", "sequence_id": 0}
    assert sm.container_target(base) == f"{base}/invocations-bidirectional-stream"  # no path: the bidi route
