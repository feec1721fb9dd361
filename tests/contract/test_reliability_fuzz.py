"""Fuzzing the decoders: whatever a client sends over the WebSocket or as a POST body —
random bytes, invalid UTF-8, JSON of every wrong shape and type, huge numbers, NUL bytes, path-like
voice names, blend-syntax abuse — gets a typed answer, and the session and the server keep working.

The real app, backends and text pipeline run in process over the fake synthesizer (the one part
replaced, so that hundreds of examples take seconds). The live-server raw-frame fuzzer is in
tests/e2e/test_load_fake_runtime.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.api import KokoroError
from server.pipeline.params import decode_object, message_type, parse_http_options, parse_synthesis
from tests.support.inproc import ERROR_CODES, WS, answer, audio_bytes, client, metric

MAX_TEXT = 300
FIELDS = ["text", "voice", "speed", "sample_rate", "request_id", "type", "lang", "request_timestamp",
          "format", "stream", "input"]
EVIL = [
    "", " ", "\t\n ", "\x00", "\x00\x00Hi.", "Hi.\x00", "\u200b", "\ufeff", "\u202e", "...", "!!!", "🙂🙂",
    "../../etc/passwd", "/dev/zero", "voices.npz", "C:\\Windows", "af_test/../am_other", "af_test\x00",
    "af_test(2)+am_other(1)", "af_test(1e400)", f"af_test({'9' * 400})+am_other(1)", "af_test+" * 12,
    "af_test(0)+am_other(0)", "(" * 200, "af_test(-1)", "__import__('os')", "{}", "[]", "null",
    "Infinity", "NaN", "-0", "1e999", "en-us", "xx-bogus", "ja", "cancel", "synthesize", "x" * (MAX_TEXT + 1),
    "Hello there.", "Ok.", "\u0100\u00e9\r\nSet-Cookie: x=1",
]
NUMBERS = [0, -1, 0.5, 2.0, 2.5, 1e308, -1e308, 2**63, -(2**63), 10**400, -(10**400), 24000, 16000, 1e-320]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(NUMBERS), st.text(max_size=24), st.sampled_from(EVIL),
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)
objects = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), json_values, max_size=6)
good_ish = st.fixed_dictionaries(
    {"text": st.sampled_from(EVIL) | st.text(max_size=40)},
    optional={k: json_values for k in ("voice", "speed", "sample_rate", "request_id", "lang", "type")},
)

# A valid request with one field replaced: where a decoder's type and range checks are tested.
one_bad_field = st.builds(
    lambda field, value, rid: {"text": "Hi.", "request_id": rid, field: value},
    st.sampled_from(FIELDS), st.sampled_from(NUMBERS) | st.sampled_from(EVIL) | json_values, st.text(max_size=8),
)


def _with_bad_utf8(obj: dict, junk: bytes) -> bytes:
    raw = json.dumps(obj).encode()
    return raw[:1] + b'"k": "' + junk + b'", ' + raw[1:] if len(raw) > 2 else b'{"k": "' + junk + b'"}'


payloads = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200),
    json_values.map(json.dumps),
    objects.map(json.dumps),
    objects.map(lambda o: json.dumps(o).encode()),
    good_ish.map(json.dumps),
    good_ish.map(lambda o: json.dumps(o).encode()),
    one_bad_field.map(json.dumps),
    one_bad_field.map(lambda o: json.dumps(o).encode()),
    st.builds(_with_bad_utf8, good_ish, st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80"])),
    st.integers(min_value=1, max_value=5000).map(lambda n: "[" * n + "]" * n),
    st.sampled_from([b"\x00" * 64, b"\xef\xbb\xbf{}", b'{"text": "Hi."', b'{"text": "Hi."}}', b"\x80" * 10]),
)


def _is_close(payload: bytes | str) -> bool:
    try:
        return decode_object(payload).get("type") == "close"
    except KokoroError:
        return False


def _is_cancel(payload: bytes | str) -> bool:
    try:
        return message_type(decode_object(payload)) == "cancel"
    except KokoroError:
        return False


# ---------------------------------------------------------------------------------------------
# The pure decoders: every input is a value or a typed error, never another exception
# ---------------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(payload=payloads)
def test_decoders_return_a_value_or_a_typed_error(payload):
    """What a user would lose: a clear error for a malformed message (an untyped exception instead,
    which kills the session that sent it)."""
    try:
        obj = decode_object(payload)
        kind = message_type(obj)
        if kind == "synthesize":
            p = parse_synthesis(obj, max_text_chars=MAX_TEXT)
            assert isinstance(p.text, str) and p.text.strip() and len(p.text) <= MAX_TEXT
            assert 0.5 <= p.speed <= 2.0
            json.dumps(p.request_id), json.dumps(p.request_timestamp)  # both echoable
            parse_http_options(obj, None)
    except KokoroError as e:
        assert e.code in ERROR_CODES and 400 <= e.status < 500 and e.message


def test_huge_integers_are_typed_errors_not_overflow():
    """math.isfinite(10**400) raised OverflowError: the WebSocket reader died (1011)."""
    with pytest.raises(KokoroError) as e:
        parse_synthesis({"text": "Hi.", "speed": 10**400}, max_text_chars=MAX_TEXT)
    assert e.value.code == "invalid_request"
    assert parse_synthesis({"text": "Hi.", "request_timestamp": 10**400}, max_text_chars=MAX_TEXT).request_timestamp is None


# ---------------------------------------------------------------------------------------------
# Through the app
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def app_client():
    with client(max_text_chars=MAX_TEXT, max_message_bytes=65536, idle_timeout_s=600) as c:
        yield c


class _Session:
    """One WebSocket kept open across examples; reopened after a fuzzed ``close``."""

    def __init__(self, c: Any):
        self.c = c
        self.ctx: Any = None
        self.ws: Any = None
        self.n = 0

    def get(self) -> Any:
        if self.ws is None:
            self.ctx = self.c.websocket_connect(WS)
            self.ws = self.ctx.__enter__()
        return self.ws

    def reset(self) -> None:
        if self.ctx is not None:
            self.ctx.__exit__(None, None, None)
        self.ctx = self.ws = None


def _send(ws: Any, payload: bytes | str) -> None:
    if isinstance(payload, bytes):
        ws.send_bytes(payload)
    else:
        ws.send_text(payload)


def _check_answer(frames: list[dict]) -> None:
    """Each answer: a single typed error, or start, >= 1 audio frame, complete/error."""
    events = [f for f in frames if f["kind"] == "text"]
    for e in events:
        assert e["type"] in ("synthesis_start", "synthesis_complete", "error"), e
        if e["type"] == "error":
            assert e["code"] in ERROR_CODES and isinstance(e["message"], str) and e["message"], e
    assert frames[0]["kind"] == "text", f"the session ended: {frames}"
    if frames[0].get("type") == "synthesis_start":
        assert frames[-1]["type"] in ("synthesis_complete", "error")
        if frames[-1]["type"] == "synthesis_complete":
            assert audio_bytes(frames) > 0  # never a success without audio
    else:
        assert len(frames) == 1 and frames[0]["type"] == "error", frames


def test_websocket_every_message_gets_a_typed_answer_and_the_session_keeps_working(app_client):
    """What a user would lose: their session (and its next request) after one message the server
    could not read, or a success with no audio."""
    session = _Session(app_client)

    @settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
    @given(payload=payloads)
    def one(payload):
        try:
            exchange(payload)
        except BaseException:
            session.reset()  # a failed example must not leave the next one on a dead socket
            raise

    def exchange(payload):
        ws = session.get()
        session.n += 1
        _send(ws, payload)
        if _is_close(payload):
            assert answer(ws) == [{"kind": "close", "code": 1000}]
            session.reset()
            return
        sentinel = f"sentinel-{session.n}"
        ws.send_text(json.dumps({"text": "Ok.", "request_id": sentinel}))
        fuzzed = [] if _is_cancel(payload) else answer(ws)
        if fuzzed:
            _check_answer(fuzzed)
            assert fuzzed[-1].get("request_id") != sentinel
        ok = answer(ws)
        assert ok[0]["type"] == "synthesis_start" and ok[-1]["type"] == "synthesis_complete", ok
        assert ok[-1]["request_id"] == sentinel and audio_bytes(ok) > 0

    try:
        one()
    finally:
        session.reset()
    text = app_client.get("/metrics").text
    assert metric(text, "kokoro_active_sessions") == 0
    assert 'kokoro_errors_total{code="internal_error"' not in text
    assert app_client.get("/ping").status_code == 200


def test_post_every_body_gets_a_typed_status_and_the_server_keeps_working(app_client):
    """What a user would lose: a status that says what was wrong with their body (a 500 instead), or
    the server's next answer."""
    @settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
    @given(payload=payloads, as_pcm=st.booleans())
    def one(payload, as_pcm):
        body = payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else payload
        r = app_client.post("/invocations", content=body, headers={"accept": "audio/L16"} if as_pcm else {})
        assert r.status_code in (200, 400, 404, 413), (r.status_code, r.text[:200])
        if r.status_code == 200:
            assert r.headers["content-type"].startswith("audio/")
            assert len(r.content) > (0 if r.headers["content-type"].startswith("audio/pcm") else 44)
        else:
            error = r.json()["error"]
            assert error["code"] in ERROR_CODES and error["message"]

    one()
    text = app_client.get("/metrics").text
    assert metric(text, 'kokoro_inflight_requests{route="invocations"}') == 0
    assert app_client.post("/invocations", json={"text": "Still serving."}).status_code == 200


def test_websocket_every_known_nasty_value_in_every_field(app_client):
    """The deterministic corpus behind the random one: each number and string above in each field
    of an otherwise valid request (hypothesis may not draw, say, a 400-digit speed every run)."""
    nasty = [(field, {"text": "Hi.", "request_id": f"n{i}", field: value})
             for i, (field, value) in enumerate((f, v) for f in FIELDS for v in [*NUMBERS, *EVIL])
             if not (field == "type" and value == "close")]
    with app_client.websocket_connect(WS) as ws:
        for field, obj in nasty:
            ws.send_text(json.dumps(obj))
            if obj.get("type") == "cancel":
                continue
            frames = answer(ws)
            _check_answer(frames)
            if field != "request_id":
                assert frames[-1]["request_id"] == obj["request_id"]  # the answer is this request's
        ws.send_text(json.dumps({"text": "Ok.", "request_id": "last"}))
        assert answer(ws)[-1]["type"] == "synthesis_complete"


def test_post_every_known_nasty_value_in_every_field(app_client):
    for field in FIELDS:
        for value in [*NUMBERS, *EVIL]:
            r = app_client.post("/invocations", json={"text": "Hi.", field: value, "format": "pcm"})
            assert r.status_code in (200, 400, 404, 413), (field, value, r.status_code)
            if r.status_code == 200:
                assert len(r.content) > 0
            else:
                assert r.json()["error"]["code"] in ERROR_CODES
            assert "set-cookie" not in r.headers  # an id with CR/LF never splits a header
