"""The one synthesis pipeline behind every speech route, over real TCP (uvicorn in a thread, the
real app and sequential backend over the fake runtime): the bounded body, one admission, and the
work stopped when an HTTP client leaves before the first audio."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from tests.support.app import build_app, fake_pipeline, fake_synth, wait_for
from tests.support.live import ThreadServer

SPEECH_ROUTES = ("/invocations", "/v1/audio/speech", "/v1/audio/speech/timed")
FOUR_MB = 4 * 1024 * 1024
LIMIT = 65_536  # KOKORO_MAX_MESSAGE_BYTES's default


def valid_body(path: str, text: str = "Fine here.") -> dict:
    if path == "/invocations":
        return {"text": text, "format": "pcm"}
    return {"model": "kokoro", "input": text, "voice": "af_test", "response_format": "pcm"}


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length, read off a raw socket."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        assert data, "the server closed the connection without an answer"
        buf += data
    head, body = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        data = sock.recv(65536)
        assert data, "the body was cut short"
        body += data
    return int(lines[0].split(" ", 2)[1]), headers, body


def send_part_of_a_big_body(port: int, path: str, *, chunked: bool) -> tuple[int, dict]:
    """Headers announcing a 4 MB JSON body (or a chunked one) and only the first 128 KiB of it;
    the rest is never sent. Returns the status and JSON error the server answers with."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {FOUR_MB}"
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     f"{framing}\r\n\r\n".encode())
        part = b'{"text": "' + b"a" * (2 * LIMIT)
        if chunked:  # two chunks, no terminating zero-length chunk
            half = len(part) // 2
            part = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (part[:half], part[half:]))
        sock.sendall(part)
        status, _, body = read_response(sock)
    return status, json.loads(body)


@pytest.fixture
def served():
    """``synth, server`` — the real app under uvicorn; the fake runtime holds a segment whose text
    contains 'Hold' until ``synth.release()``."""
    synth = fake_synth(hang_on="Hold")
    app = build_app(synth)
    try:
        with ThreadServer(app) as server:
            yield synth, server
    finally:
        synth.release()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_4mb_body_gets_413_at_once_on_every_speech_route_and_the_next_request_is_served(served, chunked):
    _, server = served
    for path in SPEECH_ROUTES:
        status, error = send_part_of_a_big_body(server.port, path, chunked=chunked)
        assert status == 413, (path, error)
        assert error["error"]["code"] == "text_too_long", path
        assert "limit" in error["error"]["message"]
        if path != "/v1/audio/speech/timed":  # the fake runtime reports no durations: timed is 501
            after = httpx.post(server.url + path, json=valid_body(path), timeout=30)
            assert after.status_code == 200 and after.content, path
    # the timed route answers its next request normally too (here: the runtime cannot time words)
    timed = httpx.post(server.url + "/v1/audio/speech/timed", json=valid_body("timed"), timeout=30)
    assert timed.status_code == 501 and timed.json()["error"]["code"] == "unsupported"
    metrics = httpx.get(server.url + "/metrics").text
    assert 'kokoro_requests_total{route="invocations",status="413"} 1.0' in metrics
    assert 'kokoro_requests_total{route="openai",status="413"} 2.0' in metrics


#: Four sentences, the second of which the ``served`` runtime holds until released.
HELD_TEXT = "The first sentence is here. Hold the second one now. The third one follows. And a fourth closes."


def held_plan(*, fast_first: bool) -> tuple[list[str], int]:
    """:data:`HELD_TEXT`'s segments and the index of the held one (neither the first nor the last)."""
    planned = [segment.text for segment in fake_pipeline().plan(HELD_TEXT, voice="af_test", fast_first=fast_first)]
    held = next(i for i, segment in enumerate(planned) if "Hold" in segment)
    assert 0 < held < len(planned) - 1
    return planned, held


def post_and_hang_up(port: int, path: str, body: dict, until) -> None:
    """POST ``body`` on a socket of its own, and close it once ``until()`` holds."""
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n".encode()
                     + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        wait_for(until)


def cancelled_then_settled(synth, server, route: str) -> None:
    """Wait until the server counts the request 499 (while the runtime still holds a segment), then
    release the runtime and wait until nothing runs."""
    wait_for(lambda: f'kokoro_requests_total{{route="{route}",status="499"}} 1.0'
             in httpx.get(server.url + "/metrics").text)
    synth.release()
    wait_for(lambda: synth.active == 0 and server.call(lambda: server.app.state.kokoro.inflight) == 0)


@pytest.mark.parametrize("stream_format", ["audio", "sse"])
def test_an_openai_client_that_leaves_before_the_first_audio_stops_the_work(served, stream_format):
    synth, server = served
    text = "Hold on. The second sentence is here. The third one follows. And a fourth closes."
    planned = fake_pipeline().plan(text, voice="af_test", fast_first=True)
    assert len(planned) >= 3
    synth.started.clear()
    before = len(synth.calls)
    post_and_hang_up(server.port, "/v1/audio/speech", {**valid_body("/v1/audio/speech", text), "stream_format": stream_format},
                     synth.started.is_set)  # the first segment is being synthesised (and held)
    # the client is gone; the server notices while the first segment is still running
    cancelled_then_settled(synth, server, "openai")
    after = httpx.post(server.url + "/v1/audio/speech", json=valid_body("/v1/audio/speech"), timeout=30)
    assert after.status_code == 200
    synthesised = synth.calls[before:]
    assert synthesised[0] == planned[0].text
    assert not any(segment.text in synthesised for segment in planned[1:]), synthesised
    assert 'kokoro_errors_total{code="cancelled",route="openai"} 1.0' in httpx.get(server.url + "/metrics").text


def test_an_openai_client_that_leaves_mid_stream_stops_the_work(served):
    """The client reads the first segment's audio and hangs up while the rest is on its way: the
    segments after the one in progress are never synthesised."""
    synth, server = served
    planned, held = held_plan(fast_first=True)
    before = len(synth.calls)
    with httpx.Client(base_url=server.url, timeout=30) as http, http.stream(
        "POST", "/v1/audio/speech", json=valid_body("/v1/audio/speech", HELD_TEXT)
    ) as r:
        assert r.status_code == 200
        next(r.iter_raw())  # the first segment's audio, then hang up
    cancelled_then_settled(synth, server, "openai")
    # the held segment may or may not have started before the hang-up was seen; none after it did
    assert synth.calls[before:] in (planned[:held], planned[: held + 1])


def test_a_client_that_leaves_a_whole_file_request_while_it_is_synthesised_stops_the_work(served):
    """``"stream": false``: nothing is sent before the whole audio is made; a client that hangs up
    meanwhile is noticed at once, and the segments after the one in progress are never synthesised."""
    synth, server = served
    planned, held = held_plan(fast_first=False)
    before = len(synth.calls)
    post_and_hang_up(server.port, "/invocations", {"text": HELD_TEXT, "format": "pcm", "stream": False},
                     lambda: any("Hold" in call for call in synth.calls[before:]))  # the held segment runs
    cancelled_then_settled(synth, server, "invocations")
    assert synth.calls[before:] == planned[: held + 1]
    after = httpx.post(server.url + "/invocations", json=valid_body("/invocations"), timeout=30)
    assert after.status_code == 200 and after.content


@pytest.mark.parametrize("path", SPEECH_ROUTES)
def test_every_speech_route_has_the_same_admission_while_draining(served, path):
    _, server = served
    server.call(lambda: setattr(server.app.state.kokoro, "draining", True))
    r = httpx.post(server.url + path, json=valid_body(path), timeout=30)
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "not_ready" and "shutting down" in r.json()["error"]["message"]
    route = "invocations" if path == "/invocations" else "openai"
    metrics = httpx.get(server.url + "/metrics").text
    assert f'kokoro_requests_total{{route="{route}",status="503"}} 1.0' in metrics
