"""Limits: each is a documented setting read from the environment, and each holds at its
edge — the largest accepted value passes, one more is refused with the contract's answer, and the
session or server goes on. (The basic refusals are in tests/unit/server; these add the edges, the
environment and the interplay with work in progress.)"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from backends.api import SynthesisRequest, TextTooLong
from backends.factory import create_backend
from server.settings import Settings
from settings_table import table
from tests.support.app import fake_synth
from tests.support.inproc import WS, answer, client

LIMITS = {
    "KOKORO_MAX_MESSAGE_BYTES": ("max_message_bytes", "2048", 2048),
    "KOKORO_MAX_TEXT_CHARS": ("max_text_chars", "123", 123),
    "KOKORO_MAX_QUEUED_PER_SESSION": ("max_queued_per_session", "3", 3),
    "KOKORO_MAX_SESSIONS": ("max_sessions", "7", 7),
    "KOKORO_IDLE_TIMEOUT_S": ("idle_timeout_s", "12.5", 12.5),
    "KOKORO_REQUEST_TIMEOUT_S": ("request_timeout_s", "9", 9.0),
    "KOKORO_MAX_QUEUE": ("max_queue", "33", 33),
    "KOKORO_DRAIN_S": ("drain_timeout_s", "4", 4.0),
    "KOKORO_DRAIN_TIMEOUT_S": ("drain_timeout_s", "4", 4.0),
}


@pytest.mark.parametrize("env", sorted(LIMITS))
def test_each_limit_is_read_from_the_environment_and_documented(env):
    field, raw, value = LIMITS[env]
    assert getattr(Settings.from_env({env: raw}), field) == value
    assert f"`{env}`" in table()
    assert Settings.model_fields[field].description


def test_limits_reach_the_backend(model_dir):
    settings = Settings(backend="fake", model_dir=model_dir, max_text_chars=11, max_queue=5, request_timeout_s=3)
    backend = create_backend(settings.backend_config())
    assert (backend.config.max_text_chars, backend.config.max_queue, backend.config.request_timeout_s) == (11, 5, 3)
    with pytest.raises(TextTooLong):
        asyncio.run(backend.prepare(SynthesisRequest(text="twelve chars")))


def test_text_limit_at_its_edge_on_both_routes():
    with client(max_text_chars=40) as c:
        exact, over = "a " * 19 + "b.", "a " * 20 + "b."
        assert (len(exact), len(over)) == (40, 42)
        with c.websocket_connect(WS) as ws:
            ws.send_text(json.dumps({"text": over, "request_id": "over"}))
            ws.send_text(json.dumps({"text": exact, "request_id": "exact"}))
            refused, done = answer(ws), answer(ws)
        post_exact = c.post("/invocations", json={"text": exact})
        post_over = c.post("/invocations", json={"text": over})
    assert [(e["type"], e["request_id"], e["code"]) for e in refused] == [("error", "over", "text_too_long")]
    assert done[-1]["type"] == "synthesis_complete"
    assert post_exact.status_code == 200
    assert post_over.status_code == 413 and post_over.json()["error"]["code"] == "text_too_long"


def test_message_byte_limit_at_its_edge():
    limit = 2048
    with client(max_message_bytes=limit) as c:
        def message(size: int) -> str:
            base = json.dumps({"text": "Fits.", "pad": ""})
            return json.dumps({"text": "Fits.", "pad": "p" * (size - len(base))})

        with c.websocket_connect(WS) as ws:
            ws.send_text(message(limit))
            at_limit = answer(ws)
            ws.send_text(message(limit + 1))
            over = answer(ws)
        chunked = c.post("/invocations", content=iter([b'{"text": "Hi.", "pad": "', b"q" * limit, b'"}']))
        ok = c.post("/invocations", content=message(limit).encode())
    assert at_limit[-1]["type"] == "synthesis_complete"
    assert over == [{"kind": "close", "code": 1009}]
    assert chunked.status_code == 413  # no Content-Length to trust: counted while reading
    assert ok.status_code == 200


def test_idle_timeout_never_cuts_a_request_in_progress():
    synth = fake_synth(hang_on="Slow")
    with client(synth, idle_timeout_s=0.3) as c, c.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({"text": "Slow one.", "request_id": "slow"}))
        threading.Timer(1.0, synth.release).start()  # the work lasts over three idle periods
        done = answer(ws)  # a close before the answer would show up here
        closed = ws.receive()
    assert done[-1]["type"] == "synthesis_complete"
    assert closed["type"] == "websocket.close" and closed["code"] == 1000 and closed["reason"] == "idle timeout"


def test_queue_limit_per_session_frees_its_slots_as_requests_finish():
    synth = fake_synth(hang_on="Held")
    with client(synth, max_queued_per_session=2) as c, c.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({"text": "Held.", "request_id": "h"}))  # in flight (not queued)
        synth.started.wait(10)
        for rid in ("q1", "q2", "q3"):
            ws.send_text(json.dumps({"text": "Queued.", "request_id": rid}))
        refused = answer(ws)  # q3: the queue holds two
        synth.release()
        ends = [answer(ws)[-1] for _ in range(3)]
        for rid in ("r1", "r2"):  # the slots are free again
            ws.send_text(json.dumps({"text": "Again.", "request_id": rid}))
        again = [answer(ws)[-1] for _ in range(2)]
    assert [(e["request_id"], e["code"]) for e in refused] == [("q3", "overloaded")]
    assert [(e["type"], e["request_id"]) for e in ends] == [("synthesis_complete", r) for r in ("h", "q1", "q2")]
    assert [(e["type"], e["request_id"]) for e in again] == [("synthesis_complete", r) for r in ("r1", "r2")]
