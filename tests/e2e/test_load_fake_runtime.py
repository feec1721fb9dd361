"""End to end under load and abuse: ``python -m server serve`` as a real subprocess with
the fake runtime (``KOKORO_BACKEND=fake``: the real server, pipeline and backends, a model-free
synthesizer with a fixed latency), driven over loopback.

* 50 sessions x 4 pipelined sentences, both modes: 0 lost, 0 misordered, nothing interleaved,
  every request answered, every session closed normally; /ping p99 printed (benchmarks/load.py
  holds the numbers);
* a raw-frame fuzzer: thousands of frames written by hand — random payloads in well-formed frames,
  then every kind of malformed frame — each answered with a typed error or a protocol close, and
  the server healthy and leak-free afterwards.
"""

from __future__ import annotations

import json
import os
import random
import struct

import httpx
import pytest

from benchmarks.load import load_run
from tests.support.inproc import metric, wait_for
from tests.support.live import BINARY, CLOSE, PING, TEXT, Closed, RawWS, ServerProcess

pytestmark = pytest.mark.subprocess

FAKE_ENV = {"KOKORO_BACKEND": "fake", "KOKORO_FAKE_SEGMENT_S": "0.005"}


@pytest.fixture(scope="module", params=["sequential", "concurrent"])
def fake_server(request, model_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("fake-server") / "server.log"
    proc = ServerProcess(log, KOKORO_MODEL_DIR=str(model_dir), KOKORO_MODE=request.param, **FAKE_ENV)
    try:
        yield proc.wait_ready()
    finally:
        assert proc.stop() == 0, proc.log()


def _metrics(server) -> str:
    return httpx.get(f"{server.url}/metrics", timeout=10).text


def test_fifty_sessions_of_four_pipelined_sentences_lose_nothing(fake_server):
    before = metric(_metrics(fake_server), 'kokoro_requests_total{route="ws",status="200"}')
    stats = load_run(fake_server.url, fake_server.ws_url, sessions=50, per_session=4)
    mode = httpx.get(f"{fake_server.url}/ping").json()["mode"]
    print(f"\n[load {mode}] 50x4: ping p50 {stats['ping']['p50_ms']} ms, p99 {stats['ping']['p99_ms']} ms, "
          f"max {stats['ping']['max_ms']} ms over {stats['ping']['probes']} probes; wall {stats['wall_s']} s")
    assert (stats["requests"], stats["answered"], stats["completed"]) == (200, 200, 200)
    assert stats["lost"] == 0 and stats["misordered_sessions"] == 0 and stats["violations"] == 0
    assert stats["closed_normally"] == 50
    assert set(stats["ping"]["statuses"]) == {200}  # never a failed health check under load
    text = _metrics(fake_server)
    assert metric(text, 'kokoro_requests_total{route="ws",status="200"}') - before == 200
    assert metric(text, "kokoro_active_sessions") == 0


# ---------------------------------------------------------------------------------------------
# The raw-frame fuzzer
# ---------------------------------------------------------------------------------------------
WELL_FORMED_FRAMES = 3000
BURST = 8  # frames sent before reading their answers (the session queue holds 16)


def _random_payload(rng: random.Random) -> tuple[int, bytes]:
    kind = rng.randrange(6)
    if kind == 0:
        return BINARY, rng.randbytes(rng.randrange(0, 300))
    if kind == 1:  # valid UTF-8 noise in a text frame
        return TEXT, "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0xA0, 0xD7FF)]))
                             for _ in range(rng.randrange(0, 80))).encode()
    if kind == 2:  # JSON of the wrong shape
        value = rng.choice([[], [1, 2], "text", 3.5, None, True, {"text": None}, {"text": 5}, {"type": "dance"}])
        return rng.choice([TEXT, BINARY]), json.dumps(value).encode()
    if kind == 3:  # a request with a bad field
        field, value = rng.choice([("speed", 99), ("speed", "fast"), ("voice", "../../x"), ("voice", "zz_none"),
                                   ("sample_rate", 7), ("text", ""), ("text", "\u0000\u0000"), ("lang", "xx"),
                                   ("text", "Привет"), ("voice", "af(1e999)"), ("request_id", [1])])
        return rng.choice([TEXT, BINARY]), json.dumps({"text": "Hi.", field: value}).encode()
    if kind == 4:  # truncated or padded JSON
        good = json.dumps({"text": "Hello there.", "request_id": "x"}).encode()
        return rng.choice([TEXT, BINARY]), good[: rng.randrange(1, len(good))]
    return BINARY, b"\xef\xbb\xbf" + rng.randbytes(rng.randrange(1, 40))  # BOM + noise


def _answers(ws: RawWS, n: int) -> list[dict]:
    """The next ``n`` terminal events (skipping a synthesis's start and audio)."""
    out: list[dict] = []
    while len(out) < n:
        opcode, payload = ws.recv()
        if opcode == TEXT:
            event = json.loads(payload)
            if event["type"] in ("synthesis_complete", "error"):
                out.append(event)
    return out


MALFORMED = {
    # name: (frames to send as (opcode, payload, kwargs)), what the server may answer
    "invalid UTF-8 in a text frame": [(TEXT, b'{"text": "\xff\xfe"}', {})],
    "reserved bit 1": [(TEXT, b"{}", {"rsv": 4})],
    "reserved bits 2 and 3": [(BINARY, b"{}", {"rsv": 3})],
    "opcode 0x3": [(0x3, b"{}", {})],
    "opcode 0xB": [(0xB, b"", {})],
    "unmasked client frame": [(TEXT, b'{"text": "Hi."}', {"mask": False})],
    "control frame over 125 bytes": [(PING, b"p" * 200, {})],
    "fragmented control frame": [(PING, b"p", {"fin": False})],
    "continuation without a start": [(0x0, b"{}", {})],
    "new message inside a fragmented one": [(TEXT, b'{"te', {"fin": False}), (TEXT, b'xt": "Hi."}', {})],
    "close with an invalid code": [(CLOSE, struct.pack("!H", 999), {})],
    "close with a 1-byte payload": [(CLOSE, b"\x03", {})],
    "close with invalid UTF-8 reason": [(CLOSE, struct.pack("!H", 1000) + b"\xff", {})],
    "declared 100 MB, sent little": [(BINARY, b"x" * 10, {"declared_len": 100 << 20})],
}


def test_raw_frame_fuzzer(fake_server):
    rng = random.Random(int(os.environ.get("FUZZ_SEED", "9")))
    port = fake_server.port
    frames = 0
    # 1. Well-formed frames with random payloads: exactly one typed answer each, session alive.
    ws = RawWS(port)
    assert ws.status == 101
    codes: dict[str, int] = {}
    while frames < WELL_FORMED_FRAMES:
        burst = [_random_payload(rng) for _ in range(BURST)]
        for opcode, payload in burst:
            ws.send_frame(opcode, payload)
        for event in _answers(ws, len(burst)):
            assert event["type"] == "error" and event["message"], event
            codes[event["code"]] = codes.get(event["code"], 0) + 1
        frames += len(burst)
    ws.send_text(json.dumps({"text": "Still here.", "request_id": "alive"}))
    assert _answers(ws, 1)[0]["type"] == "synthesis_complete"
    ws.send_frame(PING, b"hello")  # a ping mid-session is answered by a pong, the session goes on
    ws.send_text(json.dumps({"text": "And here.", "request_id": "alive2"}))
    assert _answers(ws, 1)[0]["request_id"] == "alive2"
    ws.close()
    assert set(codes) <= {"invalid_json", "invalid_request", "empty_text", "invalid_voice", "unknown_voice",
                          "invalid_language", "language_mismatch"}, codes

    # 2. A valid fragmented message is reassembled and answered.
    ws = RawWS(port)
    ws.send_frame(TEXT, b'{"text": "In two', fin=False)
    ws.send_frame(0x0, b' parts.", "request_id": "frag"}')
    answer = _answers(ws, 1)[0]
    assert (answer["type"], answer["request_id"]) == ("synthesis_complete", "frag")
    ws.close()

    # 3. Malformed frames: each closes its own connection (a protocol error, never a crash).
    closes: dict[str, int | None] = {}
    for name, sequence in MALFORMED.items():
        for _ in range(5):
            ws = RawWS(port)
            try:
                for opcode, payload, kw in sequence:
                    ws.send_frame(opcode, payload, **kw)
                    frames += 1
                while True:
                    ws.recv()
            except (Closed, OSError) as e:  # a close frame, or the connection dropped
                closes[name] = getattr(e, "code", None)
            ws.close()
    # 4. Over the size limits: the app's (just over) and uvicorn's (far over) both close 1009.
    for size, sent in ((65536 + 10, 65536 + 10), (8 << 20, 1024)):  # the large one is refused by its header
        ws = RawWS(port)
        ws.send_frame(BINARY, (b"{" + b" " * (size - 2) + b"}")[:sent], declared_len=size)
        frames += 1
        with pytest.raises(Closed) as closed:
            while True:
                ws.recv()
        assert closed.value.code == 1009, size
        ws.close()
    # 5. Connections that vanish mid-frame or mid-handshake.
    for _ in range(20):
        ws = RawWS(port)
        ws.send_frame(BINARY, b"x" * 100, declared_len=5000)
        ws.abort()
        frames += 1
    print(f"\n[raw-frame fuzzer] {frames} frames; error codes {codes}; malformed-frame closes {closes}")
    assert frames >= WELL_FORMED_FRAMES
    assert closes.keys() == MALFORMED.keys() and set(closes.values()) <= {1002, 1007, 1009}, closes

    # The server is healthy and nothing leaked.
    assert httpx.get(f"{fake_server.url}/ping").status_code == 200
    wait_for(lambda: metric(_metrics(fake_server), "kokoro_active_sessions") == 0)
    assert 'code="internal_error"' not in _metrics(fake_server)
    ws = RawWS(port)
    ws.send_text(json.dumps({"text": "After the storm.", "request_id": "after"}))
    assert _answers(ws, 1)[0]["type"] == "synthesis_complete"
    ws.close()
