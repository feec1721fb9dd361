"""Answers that must agree with what the client received: the status counted in ``/metrics``, the
request id echoed byte for byte, OpenAI's error shape on every ``/v1/`` answer, an id on every
``/invocations`` error, and the message's ``request_id`` on WebSocket error events."""

from __future__ import annotations

import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.app import fake_synth
from tests.support.inproc import client

WS = "/invocations-bidirectional-stream"
OPENAI_KEYS = {"message", "type", "param", "code"}


def requests_by_status(client, route: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "kokoro_requests_total" and sample.labels["route"] == route:
                out[sample.labels["status"]] = sample.value
    return out


def test_metrics_count_the_openai_routes_400s_as_400(make_client):
    speech = {"model": "kokoro", "input": "Hello there."}
    with make_client() as client:
        unknown = client.post("/v1/audio/speech", json={**speech, "voice": "nobody"})
        too_long = client.post("/v1/audio/speech", json={**speech, "input": "word " * 1001})
        counted = requests_by_status(client, "openai")
        posted = client.post("/invocations", json={"text": "Hi.", "voice": "nobody"})
        invocations = requests_by_status(client, "invocations")
    assert unknown.status_code == too_long.status_code == 400  # OpenAI's answers
    assert counted == {"400": 2.0}  # as sent: not 404 (unknown voice) and 413 (too long)
    assert posted.status_code == 404 and invocations == {"404": 1.0}  # /invocations keeps its own


@pytest.mark.parametrize("raw", ["café 42".encode(), "café".encode("latin-1"), "Идентификатор-7".encode()])
def test_a_non_ascii_request_id_comes_back_as_sent(live_server, raw):
    with httpx.Client(base_url=live_server(), timeout=30) as http:
        models = http.get("/v1/models", headers=[(b"x-request-id", raw)])
        posted = http.post("/invocations", json={"text": "Hi.", "format": "pcm"}, headers=[(b"x-request-id", raw)])
        refused = http.post("/invocations", content=b"{", headers=[(b"x-request-id", raw)])
    for r in (models, posted, refused):
        assert dict(r.headers.raw)[b"x-request-id"] == raw, r.request.url  # not percent-encoded, not re-encoded
    assert (models.status_code, posted.status_code, refused.status_code) == (200, 200, 400)


@pytest.mark.parametrize(("rid", "header"), [("a\nb", "a%0Ab"), ("caf\u00e9", "caf%C3%A9"), ("plain id", "plain id")])
def test_an_id_from_a_json_body_is_made_header_safe(make_client, rid, header):
    with make_client() as client:
        r = client.post("/invocations", json={"text": "Hi.", "format": "pcm", "request_id": rid})
    assert r.status_code == 200 and r.headers["x-request-id"] == header


def test_unknown_route_405_and_401_under_v1_are_in_openais_shape(make_client):
    with make_client() as client:
        missing = client.post("/v1/audio/nothing", json={})
        wrong_method = client.get("/v1/audio/speech")
        outside = client.get("/nothing")
    with make_client(api_key="k3y") as client:
        refused = client.get("/v1/models")
    for r, status in ((missing, 404), (wrong_method, 405), (refused, 401)):
        assert r.status_code == status
        error = r.json()["error"]
        assert set(error) == OPENAI_KEYS and error["type"] == "invalid_request_error", error
        assert r.headers["x-request-id"].startswith("req_")
    assert missing.json()["error"]["message"] == "Invalid URL (POST /v1/audio/nothing)"
    assert outside.status_code == 404 and set(outside.json()["error"]) == {"code", "message"}  # ours elsewhere


@pytest.mark.parametrize(
    ("kwargs", "status", "code"),
    [
        ({"content": b"{not json"}, 400, "invalid_json"),
        ({"content": b"[1, 2]"}, 400, "invalid_json"),
        ({"json": {"text": 5}}, 400, "invalid_request"),
        ({"json": {"text": "x" * 5001}}, 413, "text_too_long"),
        ({"content": b"x" * 70000}, 413, "text_too_long"),  # over the body limit: refused unread
    ],
)
def test_invocations_errors_carry_a_request_id(make_client, kwargs, status, code):
    with make_client() as client:
        fresh = client.post("/invocations", **kwargs)
        own = client.post("/invocations", headers={"x-request-id": "mine-1"}, **kwargs)
    assert (fresh.status_code, fresh.json()["error"]["code"]) == (status, code)
    assert len(fresh.headers["x-request-id"]) == 32  # a fresh id
    assert own.status_code == status and own.headers["x-request-id"] == "mine-1"


BAD_WS = [
    ({"voice": "jm_kumo"}, "invalid_request"),
    ({"text": 12}, "invalid_request"),
    ({"text": "Hi.", "speed": 9}, "invalid_request"),
    ({"text": "Hi.", "sample_rate": 12345}, "invalid_request"),
    ({"text": "Hi.", "voice": "nobody"}, "unknown_voice"),
    ({"text": "  "}, "empty_text"),
    ({"text": "Hi.", "type": "speak"}, "invalid_request"),
]


@pytest.mark.parametrize("rid", ["r-7", 7])
@pytest.mark.parametrize(("body", "code"), BAD_WS)
def test_websocket_errors_for_invalid_input_carry_the_messages_request_id(make_client, collect, body, code, rid):
    with make_client() as client, client.websocket_connect(WS) as ws:
        ws.send_text(json.dumps({**body, "request_id": rid}))
        events = collect(ws)
        ws.send_bytes(json.dumps({**body, "request_id": rid}).encode())  # as SageMaker sends it
        events += collect(ws)
    assert [(e["type"], e.get("code"), e.get("request_id")) for e in events] == [("error", code, rid)] * 2


@pytest.mark.parametrize(
    "message",
    ['{"text": "Hi.", "speed": NaN, "request_id": "r-7"}',  # what json.dumps writes for a NaN
     '{"text": "Hi.", "request_id": "r-7",}',
     '{"request_id": "r-7", "text": "Hi.'],
)
def test_websocket_errors_for_invalid_json_carry_the_request_id_it_names(make_client, collect, message):
    with make_client() as client, client.websocket_connect(WS) as ws:
        ws.send_text(message)
        events = collect(ws)
        ws.send_text("not json at all")
        events += collect(ws)
    assert [(e["code"], e["request_id"]) for e in events] == [("invalid_json", "r-7"), ("invalid_json", None)]


def test_a_bidi_request_the_drain_cuts_is_counted_as_the_not_ready_the_client_is_told():
    """The drain runs out mid-answer: the client gets ``not_ready`` for it and a 1001 close, and
    ``requests_total`` counts it 503 (shutting down), not 499 (cancelled by the client)."""
    synth = fake_synth()
    with client(synth) as c:
        with c.websocket_connect(WS) as ws:
            synth.held = True
            ws.send_text(json.dumps({"text": "First sentence of the reply is here. A second one follows it now.",
                                     "request_id": "r1"}))
            synth.step()
            while ws.receive().get("bytes") is None:  # to the first audio
                pass
            drained = c.portal.start_task_soon(c.app.state.kokoro.drain, 0.3)
            frames = []
            while (m := ws.receive())["type"] != "websocket.close":
                if m.get("text"):
                    frames.append(json.loads(m["text"]))
            synth.held = False
        assert drained.result(timeout=30) is False
        counted = requests_by_status(c, "ws")
    assert m["code"] == 1001
    assert [(f["type"], f["request_id"], f["code"]) for f in frames] == [("error", "r1", "not_ready")]
    assert counted == {"503": 1.0}
