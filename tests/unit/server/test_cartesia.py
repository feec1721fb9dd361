"""Cartesia's TTS WebSocket (``/tts/websocket``) over the real app and backend (fake runtime): the
messages Cartesia's clients rely on — contexts on one socket, continue, flush ids, cancel, word
timestamps, output formats — errors that leave the session open, and the key."""

from __future__ import annotations

import base64
import json
import threading

import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse

from tests.support.app import build_app, fake_synth, fake_voices, wait_for
from tests.support.inproc import client

URL = "/tts/websocket?cartesia_version=2026-03-01"
FMT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}


def request(cid: str, transcript: str, *, more: bool = False, **fields) -> str:
    return json.dumps({
        "context_id": cid, "transcript": transcript, "continue": more, "model_id": "sonic-3",
        "voice": {"mode": "id", "id": "af_test"}, "output_format": FMT, **fields,
    })


def until_done(ws, cids: set[str]) -> list[dict]:
    """Every message until each context in ``cids`` is done (or errored for good)."""
    out, open_ = [], set(cids)
    while open_:
        m = json.loads(ws.receive_text())
        out.append(m)
        if m["type"] == "done" or (m["type"] == "error" and m["done"]):
            open_.discard(m["context_id"])
    return out


def audio_of(messages: list[dict], cid: str) -> bytes:
    return b"".join(base64.b64decode(m["data"]) for m in messages if m["type"] == "chunk" and m["context_id"] == cid)


def test_two_contexts_on_one_socket_each_get_their_audio_timestamps_and_done(make_client):
    with make_client() as c, c.websocket_connect(URL, headers={"X-API-Key": "anything"}) as ws:
        ws.send_text(request("a", "Hello there. This is the first context.", add_timestamps=True))
        f32 = {"container": "raw", "encoding": "pcm_f32le", "sample_rate": 16000}
        ws.send_text(request("b", "And a second one.", output_format=f32, add_timestamps=True))
        messages = until_done(ws, {"a", "b"})
    for cid, rate, width in (("a", 24000, 2), ("b", 16000, 4)):
        own = [m for m in messages if m["context_id"] == cid]
        assert own[-1] == {"type": "done", "context_id": cid, "status_code": 200, "done": True}
        audio = audio_of(own, cid)
        assert audio and len(audio) % width == 0
        seconds = len(audio) / width / rate
        stamps = [m["word_timestamps"] for m in own if m["type"] == "timestamps"]
        words = [w for s in stamps for w in s["words"]]
        starts = [t for s in stamps for t in s["start"]]
        ends = [t for s in stamps for t in s["end"]]
        text = "Hello there. This is the first context." if cid == "a" else "And a second one."
        assert words == text.split()
        assert starts == sorted(starts) and all(a <= b for a, b in zip(starts, ends, strict=True))
        assert ends[-1] <= seconds + 1e-3, "a word ends after the context's audio"
        # every chunk is at most half a second: clients cap a message's size
        assert all(len(base64.b64decode(m["data"])) <= 0.5 * rate * width for m in own if m["type"] == "chunk")


def test_continue_streams_text_in_pieces_and_a_complete_sentence_speaks_before_the_end(make_client):
    with make_client() as c, c.websocket_connect(URL) as ws:
        for word in "The first sentence is complete. And the".split():
            ws.send_text(request("a", word + " ", more=True))
        first = json.loads(ws.receive_text())
        assert first["type"] == "chunk"  # no continue=false yet: the server cut the sentence itself
        ws.send_text(request("a", "rest.", more=False))
        rest = until_done(ws, {"a"})
    assert rest[-1]["type"] == "done"


def test_max_buffer_delay_zero_speaks_each_transcript_as_sent(make_client, synth):
    with make_client() as c, c.websocket_connect(URL) as ws:
        ws.send_text(request("a", "Hello there", more=True, max_buffer_delay_ms=0))
        assert json.loads(ws.receive_text())["type"] == "chunk"  # no sentence end, spoken anyway
        ws.send_text(request("a", "", more=False, max_buffer_delay_ms=0))
        until_done(ws, {"a"})
    assert "Hello there" in synth.calls and "" not in synth.calls


def test_manual_flush_gets_flush_done_after_its_audio_and_chunks_carry_flush_ids(make_client):
    with make_client() as c, c.websocket_connect(URL) as ws:
        ws.send_text(request("a", "Stay hungry,", more=True))
        ws.send_text(request("a", "", more=True, flush=True))
        ws.send_text(request("a", " stay foolish.", more=False))
        messages = until_done(ws, {"a"})
    kinds = [m["type"] for m in messages]
    flush_at = kinds.index("flush_done")
    assert messages[flush_at]["flush_id"] == 1
    assert "chunk" in kinds[:flush_at] and "chunk" in kinds[flush_at:]
    assert {m.get("flush_id") for m in messages[flush_at:] if m["type"] == "chunk"} == {2}


def test_cancel_stops_the_context_at_once_and_the_next_context_plays():
    gate = threading.Event()
    synth = fake_synth()
    with client(synth) as c, c.websocket_connect(URL) as ws:
        synth.gate, _ = gate, synth.started.clear()  # after the warm-up: hold the next segment
        calls_before = len(synth.calls)
        ws.send_text(request("a", "One sentence here. " * 6, more=True))
        assert synth.started.wait(10)  # its first segment is being synthesised, and held
        ws.send_text(json.dumps({"context_id": "a", "cancel": True}))
        ws.send_text(request("b", "Next turn."))
        gate.set()
        messages = until_done(ws, {"b"})
    assert {m["context_id"] for m in messages} == {"b"}, "audio of a cancelled context was sent"
    assert synth.calls.count("Next turn.") == 1
    assert len(synth.calls) - calls_before <= 3, "the cancelled context's queued sentences were synthesised"


@pytest.mark.parametrize(("fields", "status", "title"), [
    ({"voice": {"mode": "id", "id": "nobody"}}, 404, "unknown_voice"),
    ({"output_format": {"container": "mp3", "encoding": "pcm_s16le", "sample_rate": 24000}}, 400, "invalid_request"),
    ({"output_format": {"container": "raw", "encoding": "pcm_u8", "sample_rate": 8000}}, 400, "invalid_request"),
    ({"generation_config": {"speed": 9}}, 400, "invalid_request"),
    ({"voice": {"mode": "embedding", "embedding": [0.1]}}, 400, "invalid_request"),
])
def test_a_request_that_cannot_be_served_gets_an_error_and_the_session_goes_on(make_client, fields, status, title):
    with make_client() as c, c.websocket_connect(URL) as ws:
        ws.send_text(request("bad", "Hello.", **fields))
        error = json.loads(ws.receive_text())
        ws.send_text(request("good", "Hello."))
        assert until_done(ws, {"good"})[-1]["type"] == "done"
    assert error["type"] == "error" and error["context_id"] == "bad" and error["done"] is True
    assert error["status_code"] == status and error["title"] == title


def test_bad_json_unknown_messages_and_reusing_an_ended_context_are_errors_not_closes(make_client):
    with make_client() as c, c.websocket_connect(URL) as ws:
        ws.send_text("{not json")
        ws.send_text(json.dumps({"context_id": "x", "hello": 1}))
        errors = [json.loads(ws.receive_text()) for _ in range(2)]
        ws.send_text(request("a", "Hello there.", more=True))
        ws.send_text(json.dumps({"context_id": "a", "continue": False}))
        ws.send_text(request("a", "More.", more=False))  # after the end of its input
        messages: list[dict] = []
        while not {"done", "error"} <= {m["type"] for m in messages}:  # in either order
            messages.append(json.loads(ws.receive_text()))
    assert [e["type"] for e in errors] == ["error", "error"] and errors[1]["context_id"] == "x"
    assert any(m["type"] == "error" and m["context_id"] == "a" and "ended" in m["error"] for m in messages)
    assert any(m["type"] == "done" for m in messages)


def test_voice_aliases_and_blends_are_voice_ids():
    voices = fake_voices().with_aliases({"sonic-voice": "am_other"})  # KOKORO_VOICE_ALIASES
    with TestClient(build_app(fake_synth(), voices=voices)) as c:
        wait_for(lambda: c.get("/ping").status_code == 200)
        with c.websocket_connect(URL) as ws:
            ws.send_text(request("a", "Hi.", voice={"mode": "id", "id": "sonic-voice"}))
            ws.send_text(request("b", "Hi.", voice={"mode": "id", "id": "af_test(2)+am_other(1)"}))
            messages = until_done(ws, {"a", "b"})
    assert [m["type"] for m in messages].count("done") == 2 and not [m for m in messages if m["type"] == "error"]


def test_the_key_goes_in_the_x_api_key_header_or_the_api_key_query(make_client):
    with make_client(api_key="sekret") as c:
        with pytest.raises(WebSocketDenialResponse) as refused:
            with c.websocket_connect(URL, headers={"X-API-Key": "wrong"}):
                pass
        assert refused.value.status_code == 401
        with c.websocket_connect(URL, headers={"X-API-Key": "sekret"}) as ws:
            ws.send_text(request("a", "Hi."))
            assert until_done(ws, {"a"})[-1]["type"] == "done"
        with c.websocket_connect(URL + "&api_key=sekret") as ws:
            ws.send_text(request("a", "Hi."))
            assert until_done(ws, {"a"})[-1]["type"] == "done"
