"""ElevenLabs' input-streaming WebSockets (``stream-input``, ``multi-stream-input``) over the real
app and backend (fake runtime): the opening message, text in pieces, flush, close_context (to the
end after a flush, at once on barge-in), close_socket, base64 audio with character alignment,
``output_format``, the five-context limit, errors that leave the session open, and the key."""

from __future__ import annotations

import base64
import json
import threading

import pytest
from starlette.testclient import WebSocketDenialResponse

from tests.support.app import fake_synth
from tests.support.inproc import client

SINGLE = "/v1/text-to-speech/af_test/stream-input?model_id=eleven_flash_v2_5&output_format=pcm_24000"
MULTI = "/v1/text-to-speech/af_test/multi-stream-input?model_id=eleven_flash_v2_5&output_format=pcm_16000"


def send(ws, **message) -> None:
    ws.send_text(json.dumps(message))


def receive(ws) -> dict:
    m = ws.receive()
    if m["type"] == "websocket.close":
        return {"close": m.get("code")}
    return json.loads(m["text"])


def until_final(ws, cid: str | None = None) -> list[dict]:
    out = []
    while True:
        m = receive(ws)
        out.append(m)
        if "close" in m or (m.get("isFinal") is True and m.get("contextId") == cid):
            return out


def check_alignment(m: dict, rate: int) -> str:
    """The message's alignment is whole and inside its audio; returns the characters."""
    audio = base64.b64decode(m["audio"])
    ms = round(len(audio) / 2 / rate * 1000)
    a = m["alignment"]
    assert m["normalizedAlignment"] == a
    assert len(a["chars"]) == len(a["charStartTimesMs"]) == len(a["charDurationsMs"])
    assert a["charStartTimesMs"] == sorted(a["charStartTimesMs"]) and min(a["charDurationsMs"]) >= 0
    assert a["charStartTimesMs"][-1] + a["charDurationsMs"][-1] == ms  # clients advance their clock by it
    assert a["chars"][-1] == " "  # so a client completes the last word
    return "".join(a["chars"])


def test_stream_input_opening_text_flush_and_end_of_input(make_client):
    with make_client() as c, c.websocket_connect(SINGLE) as ws:
        send(ws, text=" ", voice_settings={"stability": 0.5, "speed": 1.0}, generation_config={
            "chunk_length_schedule": [120, 160, 250, 290]}, xi_api_key="anything")
        for word in "Hello there, this is one sentence. And".split():
            send(ws, text=word + " ")
        first = receive(ws)  # a complete sentence speaks before any flush
        send(ws, text="a second one. ", flush=True)
        send(ws, text="")  # end of input
        rest = until_final(ws)
        closed = receive(ws)
    messages = [first, *rest]
    audio = [m for m in messages if "audio" in m]
    assert all(m["isFinal"] is False and "contextId" not in m for m in audio)
    assert " ".join(check_alignment(m, 24000) for m in audio).split() == \
        "Hello there, this is one sentence. And a second one.".split()
    assert messages[-1] == {"isFinal": True} and closed == {"close": 1000}


def test_multi_stream_contexts_close_after_a_flush_speaks_to_the_end(make_client):
    with make_client() as c, c.websocket_connect(MULTI) as ws:
        send(ws, text=" ", context_id="a", voice_settings={"speed": 1.1})
        send(ws, text="The first reply. It has two sentences.", context_id="a")
        send(ws, context_id="a", flush=True)
        send(ws, context_id="a", close_context=True)  # as Pipecat ends a turn: flush, then close
        messages = until_final(ws, "a")
        send(ws, text="")  # a keep-alive opens nothing
        send(ws, text="Second context.", context_id="b", flush=True)
        send(ws, context_id="b", close_context=True)
        second = until_final(ws, "b")
    audio = [m for m in messages if "audio" in m]
    assert {m["contextId"] for m in messages} == {"a"}
    assert " ".join(check_alignment(m, 16000) for m in audio).split() == "The first reply. It has two sentences.".split()
    assert messages[-1] == {"isFinal": True, "contextId": "a", "context_id": "a"}
    assert [m for m in second if "audio" in m] and second[-1] == {"isFinal": True, "contextId": "b", "context_id": "b"}


def test_every_multi_context_message_names_its_context_under_both_keys(make_client):
    """``contextId`` is the key of the API reference, the SDK's types and Pipecat (which reads no
    other); ``context_id`` the one LiveKit's plugins say the service sends now. Audio, ``isFinal``
    and a context's error carry both, so every client routes each message to its context."""
    with make_client() as c, c.websocket_connect(MULTI) as ws:
        send(ws, text="A reply. ", context_id="turn-1", flush=True)
        send(ws, context_id="turn-1", close_context=True)
        frames = until_final(ws, "turn-1")
        send(ws, text="Too late.", context_id="turn-1")  # text to a closed context: its error
        error = receive(ws)
    audio = [m for m in frames if "audio" in m]
    assert audio and all(m["contextId"] == m["context_id"] == "turn-1" for m in frames)
    assert frames[-1]["isFinal"] is True
    from elevenlabs.types import AudioOutputMulti, FinalOutputMulti  # the SDK's own reading

    assert AudioOutputMulti.model_validate(audio[0]).context_id == "turn-1"
    assert FinalOutputMulti.model_validate(frames[-1]).context_id == "turn-1"
    assert error["error"] == "invalid_request" and error["contextId"] == error["context_id"] == "turn-1"


def test_close_context_of_an_unflushed_reply_stops_it_at_once_and_the_next_context_plays():
    gate = threading.Event()
    synth = fake_synth()
    with client(synth) as c, c.websocket_connect(MULTI) as ws:
        synth.gate, _ = gate, synth.started.clear()  # after the warm-up: hold the next segment
        calls_before = len(synth.calls)
        send(ws, text=" ", context_id="a")
        send(ws, text="One sentence here. " * 6, context_id="a")  # no flush: the reply is still coming
        assert synth.started.wait(10)
        send(ws, context_id="a", close_context=True)  # barge-in
        gate.set()
        first = until_final(ws, "a")
        send(ws, text="Next turn.", context_id="b", flush=True)
        send(ws, context_id="b", close_context=True)
        second = until_final(ws, "b")
    assert len([m for m in first if "audio" in m]) <= 1  # at most the segment that was running
    assert len(synth.calls) - calls_before <= 3
    assert [m for m in second if "audio" in m and m["contextId"] == "b"]


def test_a_second_close_context_stops_a_flushed_reply_at_once():
    gate = threading.Event()
    synth = fake_synth()
    with client(synth) as c, c.websocket_connect(MULTI) as ws:
        synth.gate, _ = gate, synth.started.clear()
        send(ws, text="One sentence here. " * 6, context_id="a", flush=True)
        send(ws, context_id="a", close_context=True)
        assert synth.started.wait(10)
        send(ws, context_id="a", close_context=True)  # the user barged in while it was playing
        gate.set()
        messages = until_final(ws, "a")
    assert len([m for m in messages if "audio" in m]) <= 1


def test_a_sixth_context_is_refused_as_elevenlabs_does(make_client):
    with make_client() as c, c.websocket_connect(MULTI) as ws:
        for k in range(5):
            send(ws, text=" ", context_id=f"c{k}")
        send(ws, text=" ", context_id="c5")
        error, closed = receive(ws), receive(ws)
    assert error["error"] == "max_active_conversations" and error["code"] == 1008
    assert closed == {"close": 1008}


def test_close_socket_closes_normally(make_client):
    with make_client() as c, c.websocket_connect(MULTI) as ws:
        send(ws, text="Hello.", context_id="a")
        send(ws, close_socket=True)
        frames = until_final(ws, "never")
    assert frames[-1] == {"close": 1000}


@pytest.mark.parametrize(("url", "status", "code"), [
    ("/v1/text-to-speech/af_test/stream-input?output_format=opus_48000_64", 400, "invalid_request"),
    ("/v1/text-to-speech/nobody/multi-stream-input?output_format=pcm_24000", 404, "voice_not_found"),
])
def test_a_voice_or_format_this_server_cannot_speak_is_refused_at_the_upgrade(make_client, url, status, code):
    """An HTTP status at the handshake: stock clients show it as an error not worth retrying (an
    error message and a close after the upgrade read as a dropped connection, retried)."""
    with make_client() as c, pytest.raises(WebSocketDenialResponse) as refused:
        with c.websocket_connect(url):
            pass
    detail = refused.value.json()["detail"]
    assert refused.value.status_code == status and detail["status"] == code and detail["message"]


def test_the_default_format_is_the_services_mp3_44100_128(make_client):
    with make_client() as c, c.websocket_connect("/v1/text-to-speech/af_test/stream-input") as ws:
        send(ws, text="Hello there. ", flush=True)
        send(ws, text="")
        frames = until_final(ws, "never")
    data = b"".join(base64.b64decode(m["audio"]) for m in frames if m.get("audio"))
    assert data[:2] in (b"\xff\xfb", b"\xff\xfa") or data[:3] == b"ID3"  # MPEG-1 layer III frames


def test_bad_messages_get_an_error_and_the_session_goes_on(make_client):
    with make_client() as c, c.websocket_connect(MULTI) as ws:
        ws.send_text("{broken")
        send(ws, context_id="a", dance=True)
        send(ws, text=" ", context_id="a", voice_settings={"speed": 7})
        errors = [receive(ws) for _ in range(3)]
        for k in range(6):  # flushing or closing a context never opened opens nothing
            send(ws, context_id=f"ghost{k}", flush=True)
            send(ws, context_id=f"ghost{k}", close_context=True)
        send(ws, text="Still here.", context_id="b", flush=True)
        send(ws, context_id="b", close_context=True)
        frames = until_final(ws, "b")
    assert [e["error"] for e in errors] == ["invalid_json", "invalid_request", "invalid_request"]
    assert [m for m in frames if "audio" in m]


def test_the_key_goes_in_the_xi_api_key_header_or_the_first_message(make_client):
    with make_client(api_key="sekret") as c:
        with pytest.raises(WebSocketDenialResponse) as refused:
            with c.websocket_connect(SINGLE, headers={"xi-api-key": "wrong"}):
                pass
        assert refused.value.status_code == 401
        with c.websocket_connect(SINGLE, headers={"xi-api-key": "sekret"}) as ws:
            send(ws, text="Hi. ", flush=True)
            assert "audio" in receive(ws)
        with c.websocket_connect(SINGLE) as ws:
            send(ws, text=" ", xi_api_key="sekret")
            send(ws, text="Hi. ", flush=True)
            assert "audio" in receive(ws)
        with c.websocket_connect(SINGLE) as ws:
            send(ws, text=" ", xi_api_key="wrong")
            error, closed = receive(ws), receive(ws)
    assert error["error"] == "invalid_api_key" and closed == {"close": 1008}


def test_livekit_barge_in_the_new_context_is_heard_within_one_segment(make_client):
    """LiveKit's ElevenLabs plugin (Python 1.8.9), its exact messages on one multi-stream socket: a
    context opened with a space, each sentence sent with ``flush``, the end of the reply flushed and
    the context closed at once — then, on barge-in, nothing for the old context (already closed) and
    a new context. The old reply still runs out, but the new turn's audio comes before all but the
    segment that was running."""
    from tests.support.app import fake_synth
    from tests.support.inproc import client

    old = [f"Sentence number {n} of the abandoned reply." for n in range(1, 7)]
    with client(fake_synth(segment_s=0.15)) as c, c.websocket_connect(MULTI) as ws:
        send(ws, text=" ", voice_settings={}, context_id="c1")
        for sentence in old:
            send(ws, text=sentence + " ", context_id="c1", flush=True)
        send(ws, text="", context_id="c1", flush=True)
        send(ws, context_id="c1", close_context=True)
        assert receive(ws).get("contextId") == "c1"  # the old reply plays; then the user barges in
        send(ws, text=" ", voice_settings={}, context_id="c2")
        send(ws, text="The new turn. ", context_id="c2", flush=True)
        send(ws, text="", context_id="c2", flush=True)
        send(ws, context_id="c2", close_context=True)
        order = []
        while not (order.count(("c1", True)) and order.count(("c2", True))):
            m = receive(ws)
            order.append((m.get("contextId"), m.get("isFinal") is True))
    before_new = order[:order.index(("c2", False))]
    assert before_new.count(("c1", False)) <= 1, order  # at most the segment that was running
