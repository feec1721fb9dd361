"""Clients that stop reading: a WebSocket session that pipelines requests and never reads, and a
POST client that reads one byte a second, against ``python -m server serve`` as a real subprocess
(fake runtime) over real loopback sockets.

What a user of the server would notice: the stuck client's synthesis pauses (the server makes far
less audio than it asked for, and its memory does not grow by what it asked for), another session
still gets its answer, and after ``KOKORO_SEND_TIMEOUT_S`` the stuck session is closed / the stuck
response cut — the client sees a truncated body or a closed socket — and it is counted in
``kokoro_send_timeouts_total``.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.app import wait_for
from tests.support.inproc import metric
from tests.support.live import RawWS, ServerProcess, answer

pytestmark = pytest.mark.subprocess

LONG = " ".join(f"Sentence number {i} keeps the synthesis going for quite a while longer." for i in range(60))
QUEUED = 16  # the session's queue limit (KOKORO_MAX_QUEUED_PER_SESSION's default)
BYTES_PER_AUDIO_S = 48_000  # PCM s16le at 24 kHz


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


# One server per mode for both tests: each stalls a route of its own and reads the counters as differences.
@pytest.fixture(scope="module", params=["sequential", "concurrent"])
def server(request, tmp_path_factory):
    proc = ServerProcess(tmp_path_factory.mktemp("server") / "server.log", KOKORO_BACKEND="fake",
                         KOKORO_MODE=request.param, KOKORO_SEND_TIMEOUT_S="4", KOKORO_FAKE_SEGMENT_S="0.001")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture
def scrape(server: ServerProcess) -> Iterator[Callable[[], str]]:
    """The server's /metrics, over one kept-alive connection: the waits below poll it many times a second."""
    with httpx.Client(base_url=server.url, timeout=10) as http:
        yield lambda: http.get("/metrics").text


def _audio_seconds(scrape: Callable[[], str]) -> float:
    return metric(scrape(), "kokoro_audio_seconds_total")


def _timeouts(scrape: Callable[[], str], route: str) -> float:
    return metric(scrape(), f'kokoro_send_timeouts_total{{route="{route}"}}')


def _send_timeout_errors(scrape: Callable[[], str], route: str) -> float:
    return metric(scrape(), f'kokoro_errors_total{{code="send_timeout",route="{route}"}}')


def test_a_websocket_client_that_never_reads_pauses_its_synthesis_and_is_closed(server, scrape):
    one_request_s = answer(server.ws_url, LONG)["audio_duration_s"]
    rss_before, audio_before = _rss(server.proc.pid), _audio_seconds(scrape)
    timeouts_before, errors_before = _timeouts(scrape, "ws"), _send_timeout_errors(scrape, "ws")

    stuck = RawWS(server.port)
    for i in range(QUEUED):
        stuck.send_text(json.dumps({"text": LONG, "request_id": f"stuck-{i}"}))
    wait_for(lambda: _audio_seconds(scrape) > audio_before)

    # Another session is answered while the stuck one waits for its reader.
    assert answer(server.ws_url, "Someone else is still served.")["audio_duration_s"] > 0

    wait_for(lambda: _timeouts(scrape, "ws") == timeouts_before + 1)
    asked_s = QUEUED * one_request_s
    made_s = _audio_seconds(scrape) - audio_before
    assert made_s < asked_s / 4, f"{made_s:.0f} s of audio made for a client that asked {asked_s:.0f} s and read none"
    grown = _rss(server.proc.pid) - rss_before
    assert grown < asked_s * BYTES_PER_AUDIO_S / 4, f"RSS grew {grown / 2**20:.0f} MiB"
    wait_for(lambda: metric(scrape(), "kokoro_active_sessions") == 0)
    assert _send_timeout_errors(scrape, "ws") == errors_before + 1

    # The client, reading at last, gets what was buffered and then the end of the connection.
    received = 0
    with pytest.raises(Exception) as closed:
        while True:
            received += len(stuck.recv()[1])
    assert type(closed.value).__name__ == "Closed"
    assert received < asked_s * BYTES_PER_AUDIO_S / 4
    stuck.close()
    assert httpx.get(f"{server.url}/ping").status_code == 200


def _trickle_post(port: int, body: bytes, stop: threading.Event) -> socket.socket:
    """A POST whose client reads one byte a second until ``stop`` is set."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)  # a small reader, as on a slow link
    sock.settimeout(60)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    while not stop.wait(1.0):
        sock.recv(1)
    return sock


def test_a_post_client_reading_a_byte_a_second_pauses_its_synthesis_and_is_cut(server, scrape):
    one_request_s = answer(server.ws_url, LONG)["audio_duration_s"]
    audio_before = _audio_seconds(scrape)
    timeouts_before = _timeouts(scrape, "invocations")
    errors_before = _send_timeout_errors(scrape, "invocations")
    body = json.dumps({"text": LONG, "format": "pcm"}).encode()
    stop = threading.Event()
    result: list[socket.socket] = []
    reader = threading.Thread(target=lambda: result.append(_trickle_post(server.port, body, stop)))
    reader.start()
    try:
        wait_for(lambda: _audio_seconds(scrape) > audio_before)
        assert answer(server.ws_url, "Someone else is still served.")["audio_duration_s"] > 0
        wait_for(lambda: _timeouts(scrape, "invocations") == timeouts_before + 1)
    finally:
        stop.set()
        reader.join()
    made_s = _audio_seconds(scrape) - audio_before
    sock = result[0]
    # Read the rest at speed: a chunked body that ends without its final empty chunk (cut).
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    assert not data.endswith(b"0\r\n\r\n"), "the cut response must not look complete"
    assert made_s < one_request_s, "synthesis went on for a client that was not reading"
    wait_for(lambda: metric(scrape(), 'kokoro_inflight_requests{route="invocations"}') == 0)
    assert _send_timeout_errors(scrape, "invocations") == errors_before + 1
