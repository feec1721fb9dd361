"""KOKORO_API_KEY: every route but /ping needs the bearer token; the WebSocket at the upgrade."""

from __future__ import annotations

import pytest
from starlette.testclient import WebSocketDenialResponse

from server.auth import BearerAuth

KEY = "s3cret-key"
WS = "/invocations-bidirectional-stream"
GOOD = {"authorization": f"Bearer {KEY}"}


@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": "Bearer wrong"}, {"authorization": KEY}, {"authorization": f"Basic {KEY}"},
     {"authorization": f"Bearer {KEY}x"}, {"authorization": "Bearer "}],
)
def test_requests_without_the_right_token_get_401(make_client, headers):
    with make_client(api_key=KEY) as client:
        post = client.post("/invocations", json={"text": "Hi."}, headers=headers)
        metrics = client.get("/metrics", headers=headers)
        voices = client.get("/v1/audio/voices", headers=headers)
    for r in (post, metrics, voices):
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
    assert post.json()["error"]["code"] == metrics.json()["error"]["code"] == "unauthorized"
    # under /v1/ in OpenAI's shape, which its clients parse into an AuthenticationError
    assert voices.json()["error"] == {"message": "missing or wrong bearer token", "type": "invalid_request_error",
                                      "param": None, "code": "invalid_api_key"}
    assert voices.headers["x-request-id"].startswith("req_")  # an OpenAI route's refusal has an id too


def test_the_right_token_passes_and_ping_stays_open(make_client):
    with make_client(api_key=KEY) as client:
        assert client.get("/ping").status_code == 200
        assert client.post("/invocations", json={"text": "Hi."}, headers=GOOD).status_code == 200
        assert client.post("/invocations", json={"text": "Hi."},
                           headers={"authorization": f"bearer {KEY}"}).status_code == 200
        assert client.get("/metrics", headers=GOOD).status_code == 200


def test_websocket_upgrade_needs_the_token(make_client, collect):
    with make_client(api_key=KEY) as client:
        with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect(WS):
            pass
        assert denied.value.status_code == 401
        with client.websocket_connect(WS, headers=GOOD) as ws:
            ws.send_text('{"text": "Hi."}')
            assert collect(ws)[-1]["type"] == "synthesis_complete"


def test_no_key_means_no_auth(make_client):
    with make_client() as client:
        assert client.post("/invocations", json={"text": "Hi."}).status_code == 200


def test_an_empty_key_is_refused():
    with pytest.raises(ValueError):
        BearerAuth(lambda *a: None, "")


def test_cors_preflight_is_answered_without_a_token(make_client):
    with make_client(api_key=KEY, cors_origins="https://app.example") as client:
        r = client.options("/invocations", headers={
            "origin": "https://app.example", "access-control-request-method": "POST",
            "access-control-request-headers": "authorization,content-type",
        })
        denied = client.post("/invocations", json={"text": "Hi."}, headers={"origin": "https://app.example"})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "https://app.example"
    assert denied.status_code == 401
