"""One session core under the four WebSocket protocols (the bidirectional stream, Deepgram, Cartesia,
ElevenLabs): the same behaviour for the same event on every one, or the protocol's documented
difference (docs/wire-contract.md, "Every WebSocket protocol"). The real app and backend over the
fake runtime, whose ``held`` knob keeps a reply mid-way for as long as a test needs."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from starlette.testclient import WebSocketDenialResponse

from tests.support.app import fake_synth, wait_for
from tests.support.inproc import client

REPLY = ("First sentence of the reply is here.", "A second sentence follows it now.", "And a third one ends it.")


class Proto:
    """How one protocol says each thing, and what its answers mean (``kind`` of a frame)."""

    name = ""
    path = ""
    close_path = ""  # where the protocol's end-of-input closes the socket (ElevenLabs: stream-input)
    greets = False

    def speak(self, ws: Any, rid: str, text: str) -> None:
        """A whole reply, ended (its end event follows its audio)."""
        self.open_turn(ws, rid, text)
        self.end_turn(ws, rid)

    def open_turn(self, ws: Any, rid: str, text: str) -> None: ...
    def more(self, ws: Any, rid: str, text: str) -> None: ...
    def end_turn(self, ws: Any, rid: str) -> None: ...
    def cancel(self, ws: Any, rid: str) -> None: ...
    def close(self, ws: Any) -> None: ...
    def unknown(self) -> dict: ...
    def kind(self, frame: dict) -> str: ...


def send(ws: Any, **message: Any) -> None:
    ws.send_text(json.dumps(message))


class Bidi(Proto):
    name, path, close_path = "bidi", "/invocations-bidirectional-stream", "/invocations-bidirectional-stream"

    def speak(self, ws, rid, text):
        send(ws, text=text, request_id=rid)

    open_turn = speak

    def cancel(self, ws, rid):
        send(ws, type="cancel", request_id=rid)

    def close(self, ws):
        send(ws, type="close")

    def unknown(self):
        return {"type": "bogus"}

    def kind(self, f):
        if f.get("audio"):
            return "audio"
        return {"synthesis_complete": "end", "error": "error"}.get(f.get("type"), "other")


class Deepgram(Proto):
    name, path = "deepgram", "/v1/speak?model=af_test&encoding=linear16&sample_rate=24000"
    close_path, greets = path, True

    def open_turn(self, ws, rid, text):
        send(ws, type="Speak", text=text + " ")

    more = open_turn

    def end_turn(self, ws, rid):
        send(ws, type="Flush")

    def cancel(self, ws, rid):
        send(ws, type="Clear")

    def close(self, ws):
        send(ws, type="Close")

    def unknown(self):
        return {"type": "Bogus"}

    def kind(self, f):
        if f.get("audio"):
            return "audio"
        return {"Flushed": "end", "Warning": "error", "Cleared": "cancelled"}.get(f.get("type"), "other")


class Cartesia(Proto):
    name, path = "cartesia", "/tts/websocket"
    close_path = path

    def open_turn(self, ws, rid, text):
        send(ws, context_id=rid, transcript=text + " ", voice={"mode": "id", "id": "af_test"}, model_id="sonic-3",
             **{"continue": True})

    more = open_turn

    def end_turn(self, ws, rid):
        send(ws, context_id=rid, transcript="", **{"continue": False})

    def cancel(self, ws, rid):
        send(ws, context_id=rid, cancel=True)

    close = None  # type: ignore[assignment]  # Cartesia has no close message: a context ends, the socket stays

    def unknown(self):
        return {"context_id": "x", "bogus": True}

    def kind(self, f):
        if f.get("type") == "chunk":
            return "audio"
        return {"done": "end", "error": "error"}.get(f.get("type"), "other")


class ElevenLabs(Proto):
    name, path = "elevenlabs", "/v1/text-to-speech/af_test/multi-stream-input?output_format=pcm_24000"
    close_path = "/v1/text-to-speech/af_test/stream-input?output_format=pcm_24000"

    def open_turn(self, ws, rid, text):
        send(ws, text=text + " ", context_id=rid)

    more = open_turn

    def end_turn(self, ws, rid):
        send(ws, context_id=rid, flush=True)
        send(ws, context_id=rid, close_context=True)

    def cancel(self, ws, rid):
        send(ws, context_id=rid, close_context=True)  # a barge-in closes the reply it never flushed
        send(ws, context_id=rid, close_context=True)  # a second close stops a flushed one at once

    def close(self, ws):
        send(ws, text="")  # stream-input: the end of input; the socket closes after the rest

    def unknown(self):
        return {"bogus": True}

    def kind(self, f):
        if f.get("audio"):
            return "audio"
        if f.get("isFinal") is True:
            return "end"
        return "error" if "error" in f else "other"


PROTOCOLS = [Bidi(), Deepgram(), Cartesia(), ElevenLabs()]
ids = [p.name for p in PROTOCOLS]


def receive(ws: Any) -> dict:
    m = ws.receive()
    if m["type"] == "websocket.close":
        return {"close": m.get("code")}
    if m.get("bytes") is not None:
        return {"audio": len(m["bytes"])}
    frame = json.loads(m["text"])
    if isinstance(frame.get("data"), str):
        frame["bytes"] = len(base64.b64decode(frame["data"]))
    elif isinstance(frame.get("audio"), str):
        frame["bytes"] = len(base64.b64decode(frame["audio"]))
    return frame


def until(p: Proto, ws: Any, *kinds: str) -> list[dict]:
    """Frames up to and including the first of one of ``kinds`` or a close."""
    out = []
    while True:
        frame = receive(ws)
        out.append(frame)
        if "close" in frame or p.kind(frame) in kinds:
            return out


def audio(p: Proto, frames: list[dict]) -> int:
    return sum(f.get("bytes", f.get("audio", 0)) for f in frames if p.kind(f) == "audio")


@contextmanager
def opened(p: Proto, c: Any, path: str | None = None) -> Iterator[Any]:
    with c.websocket_connect(path or p.path) as ws:
        if p.greets:
            assert receive(ws)["type"] == "Metadata"
        yield ws


# -- limits and bad input --------------------------------------------------------------------------
@pytest.mark.parametrize("p", PROTOCOLS, ids=ids)
@pytest.mark.parametrize("frame", ["text", "binary"])
def test_a_message_over_the_size_limit_closes_1009(p, frame):
    with client(max_message_bytes=1024) as c:
        with opened(p, c) as ws:
            big = json.dumps({"text": "a" * 2000})
            ws.send_text(big) if frame == "text" else ws.send_bytes(big.encode())
            assert until(p, ws)[-1] == {"close": 1009}


@pytest.mark.parametrize("p", PROTOCOLS, ids=ids)
@pytest.mark.parametrize("bad", ["bad_json", "unknown_type"])
def test_bad_input_gets_the_protocols_error_and_the_session_goes_on(p, bad):
    with client() as c:
        with opened(p, c) as ws:
            ws.send_text("{not json") if bad == "bad_json" else send(ws, **p.unknown())
            error = until(p, ws, "error")
            assert p.kind(error[-1]) == "error", error
            p.speak(ws, "r1", "Still here.")
            frames = until(p, ws, "end")
    assert p.kind(frames[-1]) == "end" and audio(p, frames) > 0


@pytest.mark.parametrize("p", PROTOCOLS, ids=ids)
def test_an_idle_session_closes_normally(p):
    with client(idle_timeout_s=0.3) as c:
        with opened(p, c) as ws:
            assert until(p, ws) == [{"close": 1000}]


# -- cancel and close ------------------------------------------------------------------------------
def held_client(**settings: Any) -> Any:
    synth = fake_synth()
    return synth, client(synth, **settings)


def hold(synth: Any) -> None:
    synth.held = True


def let_go(synth: Any) -> None:
    synth.held = False
    for _ in range(8):
        synth.step()


@pytest.mark.parametrize("p", PROTOCOLS, ids=ids)
def test_cancel_mid_reply_stops_it_with_one_terminal_event_and_the_next_reply_plays(p):
    """bidi: ``error cancelled``; Deepgram: ``Cleared``; ElevenLabs: ``isFinal``; Cartesia
    acknowledges nothing (no ``done`` of the cancelled context). Nothing of it follows."""
    synth, made = held_client()
    with made as c:
        with opened(p, c) as ws:
            hold(synth)
            p.speak(ws, "r1", " ".join(REPLY))
            synth.step()  # the first segment only: the reply is mid-way
            first = until(p, ws, "audio")
            p.cancel(ws, "r1")
            let_go(synth)
            p.speak(ws, "r2", "The next one.")
            rest = until(p, ws, "end")
            while p.name != "cartesia" and not any(p.kind(f) == "end" and f.get("context_id", f.get(
                    "contextId", f.get("request_id", "r2"))) == "r2" for f in rest[-1:]):
                rest += until(p, ws, "end")  # ElevenLabs: the cancelled context's isFinal comes first
    frames = first + rest
    ends = [f for f in frames if p.kind(f) in ("end", "error", "cancelled")]
    r1 = [f for f in ends if f.get("request_id", f.get("context_id", f.get("contextId"))) in ("r1", None)]
    expected = {"bidi": ["error"], "deepgram": ["cancelled", "end"], "cartesia": [], "elevenlabs": ["end"]}[p.name]
    if p.name == "deepgram":  # the one socket: Cleared, then the next turn's Flushed
        assert [p.kind(f) for f in ends] == expected
    else:
        assert [p.kind(f) for f in r1] == expected, frames
    if p.name == "bidi":
        assert r1[0]["code"] == "cancelled"
    assert audio(p, first) > 0 and p.kind(frames[-1]) == "end"


@pytest.mark.parametrize("p", PROTOCOLS, ids=ids)
@pytest.mark.parametrize("times", [1, 40])
def test_close_with_work_queued_finishes_it_then_closes_normally_however_often_it_is_sent(p, times):
    """The reply queued before the close is spoken to the end, then the socket closes 1000 —
    Cartesia has no close message: the context's end gives ``done`` and the socket stays open. A
    repeated close is no error and queues nothing past the per-session limit."""
    synth, made = held_client(max_queued_per_session=2)
    with made as c:
        with opened(p, c, p.close_path) as ws:
            hold(synth)
            if p.name == "elevenlabs":
                send(ws, text=" ")
                send(ws, text=" ".join(REPLY))
            else:
                p.open_turn(ws, "r1", " ".join(REPLY))
            for _ in range(times):
                if p.close is None:
                    p.end_turn(ws, "r1")
                else:
                    p.close(ws)
            if p.name == "bidi":
                session = next(iter(c.app.state.kokoro.sessions))
                wait_for(lambda: session.queue.ended)
                assert len(session.queue) <= 2
            let_go(synth)
            frames = until(p, ws, "end") if p.name == "cartesia" else until(p, ws)
            if p.name == "cartesia":
                p.speak(ws, "r2", "The socket is still open.")
                frames += until(p, ws, "end")
    assert not [f for f in frames if p.kind(f) == "error"], frames
    if p.name == "cartesia":
        assert [p.kind(f) for f in frames].count("end") == 2
    else:
        assert frames[-1] == {"close": 1000}
        assert [p.kind(f) for f in frames].count("end") == (0 if p.name == "deepgram" else 1)
    assert audio(p, frames) > 0


# -- drain -----------------------------------------------------------------------------------------
def reference(p: Proto, c: Any) -> int:
    """The audio of the whole reply when nothing interrupts it (sent the same way, in two parts)."""
    with opened(p, c) as ws:
        if p.name == "bidi":  # two requests, as in the drain below
            p.speak(ws, "ref", REPLY[0])
            p.speak(ws, "ref2", " ".join(REPLY[1:]))
            return audio(p, until(p, ws, "end") + until(p, ws, "end"))
        p.open_turn(ws, "ref", REPLY[0])
        p.more(ws, "ref", " ".join(REPLY[1:]))
        p.end_turn(ws, "ref")
        return audio(p, until(p, ws, "end"))


@pytest.mark.parametrize("p", PROTOCOLS, ids=ids)
def test_a_drain_lets_the_turn_already_started_finish_with_all_its_audio_and_refuses_new_ones(p):
    """The turn began before the drain — its text still arriving (bidi: a request queued behind
    it) — and is spoken in full; a new session is refused 503 with Retry-After; a new turn gets the
    protocol's error (``not_ready``) where the session is still open; then the session closes 1001."""
    synth, made = held_client()
    with made as c:
        whole = reference(p, c)
        with opened(p, c) as ws:
            hold(synth)
            p.open_turn(ws, "r1", REPLY[0])
            if p.name == "bidi":
                p.speak(ws, "r2", " ".join(REPLY[1:]))
            synth.step()
            frames = until(p, ws, "audio")
            state = c.app.state.kokoro
            drained = c.portal.start_task_soon(state.drain, 30.0)
            wait_for(lambda: c.get("/ping").status_code == 503)
            with pytest.raises(WebSocketDenialResponse) as refused:
                with c.websocket_connect(p.path):
                    pass
            assert refused.value.status_code == 503 and refused.value.headers["retry-after"]
            if p.name != "bidi":
                p.more(ws, "r1", " ".join(REPLY[1:]))
                p.end_turn(ws, "r1")
            p.open_turn(ws, "new", "Too late.")  # a new turn (Deepgram: after the flush)
            frames += until(p, ws, "error")
            let_go(synth)
            frames += until(p, ws)  # to the close
        assert drained.result(timeout=30) is True
    errors = [f for f in frames if p.kind(f) == "error"]
    assert len(errors) == 1 and "not_ready" in json.dumps(errors[0]).lower(), errors
    assert frames[-1] == {"close": 1001}
    assert audio(p, frames) == whole


@pytest.mark.parametrize("p", PROTOCOLS, ids=ids)
def test_a_turn_the_drain_cannot_finish_gets_the_protocols_error_then_1001(p):
    synth, made = held_client()
    with made as c:
        with opened(p, c) as ws:
            hold(synth)
            p.speak(ws, "r1", " ".join(REPLY))
            synth.step()
            frames = until(p, ws, "audio")
            drained = c.portal.start_task_soon(c.app.state.kokoro.drain, 0.3)
            frames += until(p, ws)
            let_go(synth)
        assert drained.result(timeout=30) is False
    assert frames[-1] == {"close": 1001}
    error = [f for f in frames if p.kind(f) == "error"]
    assert len(error) == 1 and "not_ready" in json.dumps(error[0]).lower(), frames
    assert not [f for f in frames if p.kind(f) == "end"]


@pytest.mark.parametrize("p", PROTOCOLS, ids=ids)
def test_a_message_the_server_fails_on_costs_that_message_only(p, monkeypatch, caplog):
    """A bug in a protocol's handling of one message is logged with its traceback and answered with
    the protocol's ``internal_error``; the session goes on."""
    with client() as c:
        with opened(p, c) as ws:
            session = next(iter(c.app.state.kokoro.sessions))
            real = type(session).on_message

            async def buggy(self, obj):
                if obj.get("boom"):
                    raise ZeroDivisionError("a bug")
                await real(self, obj)

            monkeypatch.setattr(type(session), "on_message", buggy)
            send(ws, boom=True)
            error = until(p, ws, "error")
            p.speak(ws, "r1", "Still here.")
            frames = until(p, ws, "end")
    assert "internal_error" in json.dumps(error[-1]).lower(), error
    assert p.kind(frames[-1]) == "end" and audio(p, frames) > 0
    assert any(r.exc_info and r.exc_info[0] is ZeroDivisionError for r in caplog.records)
