"""Auth and CORS, beyond tests/unit/server/test_server_auth.py: *every* route the app has
— found by walking its routes, so a route added later is covered too — needs the key except
/ping; the key is compared in constant time; a token anywhere but the header is refused; refusals
cost no capacity; CORS answers only the configured origins; both are set from the environment."""

from __future__ import annotations

import json

import pytest
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import WebSocketDenialResponse

import server.auth as auth
from server.settings import Settings
from tests.support.inproc import WS, answer, client, metric

KEY = "k-" + "x" * 40
GOOD = {"authorization": f"Bearer {KEY}"}
OPEN = {"/ping"}


def _routes(app) -> list[tuple[str, str]]:
    out = []
    for route in app.routes:
        if isinstance(route, WebSocketRoute):
            out.append(("WS", route.path))
        elif isinstance(route, Route):
            out.extend((m, route.path) for m in sorted(route.methods or ()) if m != "HEAD")
    return out


#: The providers' HTTP routes: the key as their clients send it, refused in their own error shape.
PROVIDER_HTTP = ("/v1/speak", "/tts/bytes", "/tts/sse")


def test_every_route_but_ping_needs_the_key():
    with client(api_key=KEY) as c:
        routes = _routes(c.app)
        assert {p for _, p in routes} >= {"/ping", "/invocations", WS, "/metrics", "/v1/audio/speech"}
        for method, path in routes:
            if method == "WS" and path.startswith("/v1/text-to-speech/"):
                continue  # ElevenLabs' key may come in the first message: test_elevenlabs checks it there
            if method == "WS":
                with pytest.raises(WebSocketDenialResponse) as denied, c.websocket_connect(path):
                    pass
                assert denied.value.status_code == 401
                if path == WS:  # the voice-agent protocols take the key their clients send: their own tests
                    with c.websocket_connect(path, headers=GOOD) as ws:
                        ws.send_text('{"text": "Hi."}')
                        assert answer(ws)[-1]["type"] == "synthesis_complete"
                continue
            body = {"text": "Hi.", "model": "kokoro", "input": "Hi.", "voice": "af_test"}
            anonymous = c.request(method, path, json=body if method == "POST" else None)
            keyed = c.request(method, path, json=body if method == "POST" else None, headers=GOOD)
            if path in OPEN:
                assert anonymous.status_code == 200, path
            elif path in PROVIDER_HTTP or path.startswith("/v1/text-to-speech/"):
                assert anonymous.status_code == 401, (method, path)  # in the provider's shape (its SDK's tests)
            else:
                assert anonymous.status_code == 401, (method, path)
                want = "invalid_api_key" if path.startswith("/v1/") else "unauthorized"  # OpenAI's code there
                assert anonymous.json()["error"]["code"] == want
            assert keyed.status_code not in (401, 403), (method, path)  # the route's own answer


@pytest.mark.parametrize("where", ["query", "cookie", "ws-subprotocol", "lowercase-header-name"])
def test_a_token_anywhere_but_the_authorization_header_is_refused(where):
    with client(api_key=KEY) as c:
        if where == "query":
            r = c.post(f"/invocations?api_key={KEY}&token={KEY}", json={"text": "Hi."})
        elif where == "cookie":
            c.cookies.set("authorization", f"Bearer {KEY}")
            r = c.post("/invocations", json={"text": "Hi."})
            c.cookies.clear()
        elif where == "ws-subprotocol":
            with pytest.raises(WebSocketDenialResponse) as denied, c.websocket_connect(
                    WS, subprotocols=["bearer", KEY]):
                pass
            assert denied.value.status_code == 401
            return
        else:  # header names are case-insensitive: this one must pass
            r = c.post("/invocations", json={"text": "Hi."}, headers={"AUTHORIZATION": f"Bearer {KEY}"})
            assert r.status_code == 200
            return
    assert r.status_code == 401


def test_the_key_is_compared_in_constant_time(monkeypatch):
    """Every request, whatever its header, costs one comparison of two fixed-size digests: neither
    the key's content nor its length shows in the time a refusal takes."""
    calls: list[tuple[int, int]] = []
    real = auth.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    headers = [{}, {"authorization": "Bearer"}, {"authorization": "Bearer k"}, {"authorization": "Basic " + KEY},
               {"authorization": f"Bearer {KEY}{'y' * 1000}"}, {"authorization": f"Bearer {KEY[:-1]}"}, GOOD]
    with client(api_key=KEY) as c:
        calls.clear()
        statuses = [c.get("/metrics", headers=h).status_code for h in headers]
    assert statuses == [401] * 6 + [200]
    assert calls == [(32, 32)] * len(headers)


def test_refused_requests_cost_no_capacity():
    with client(api_key=KEY, max_sessions=1) as c:
        for _ in range(300):
            assert c.post("/invocations", json={"text": "Hi."}).status_code == 401
            with pytest.raises(WebSocketDenialResponse), c.websocket_connect(WS):
                pass
        text = c.get("/metrics", headers=GOOD).text
        with c.websocket_connect(WS, headers=GOOD) as ws:  # the one session slot is still free
            ws.send_text(json.dumps({"text": "Hi."}))
            assert answer(ws)[-1]["type"] == "synthesis_complete"
    assert metric(text, "kokoro_active_sessions") == 0
    assert metric(text, 'kokoro_inflight_requests{route="invocations"}') == 0


def test_cors_answers_only_the_configured_origins():
    allowed, other = "https://app.example", "https://evil.example"
    preflight = {"access-control-request-method": "POST", "access-control-request-headers": "authorization"}
    with client(api_key=KEY, cors_origins=f"{allowed}, https://two.example") as c:
        ok = c.options("/invocations", headers={"origin": allowed, **preflight})
        bad = c.options("/invocations", headers={"origin": other, **preflight})
        simple = c.post("/invocations", json={"text": "Hi."}, headers={"origin": allowed, **GOOD})
        foreign = c.post("/invocations", json={"text": "Hi."}, headers={"origin": other, **GOOD})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == allowed
    assert "authorization" in ok.headers["access-control-allow-headers"].lower()
    assert bad.status_code == 400 and "access-control-allow-origin" not in bad.headers
    assert simple.headers["access-control-allow-origin"] == allowed
    assert "x-request-id" in simple.headers["access-control-expose-headers"].lower()
    assert "access-control-allow-origin" not in foreign.headers
    with client() as c:  # not configured: no CORS headers at all
        r = c.post("/invocations", json={"text": "Hi."}, headers={"origin": allowed})
    assert "access-control-allow-origin" not in r.headers


def test_key_and_origins_come_from_the_environment():
    s = Settings.from_env({"KOKORO_API_KEY": KEY, "KOKORO_CORS_ORIGINS": "https://a.example,https://b.example"})
    assert s.api_key.get_secret_value() == KEY and KEY not in repr(s)  # never printed
    assert s.cors_origin_list == ["https://a.example", "https://b.example"]
    assert Settings.from_env({"KOKORO_API_KEY": ""}).api_key is None  # empty means off
