"""LiveServer's process handling, on a tiny real HTTP server (no model): start on a free port,
wait for /ping, scrape /metrics, stop, peak RSS; a program that dies reports its log."""

import sys

import pytest

from benchmarks.live import LiveServer, ServerFailed

pytestmark = pytest.mark.subprocess

PING_SERVER = r'''
import argparse, http.server
p = argparse.ArgumentParser(); p.add_argument("--host"); p.add_argument("--port", type=int)
a = p.parse_args()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"/ping": b'{"status": "ok"}', "/metrics": b"kokoro_audio_seconds_total 12.5\n"}.get(self.path)
        self.send_response(200 if body else 404); self.end_headers(); self.wfile.write(body or b"")
    def log_message(self, *args): pass
http.server.HTTPServer((a.host, a.port), H).serve_forever()
'''


def test_starts_waits_for_ping_scrapes_and_stops():
    srv = LiveServer(argv=[sys.executable, "-c", PING_SERVER], name="ping", log=lambda _m: None)
    with srv:
        assert srv.ping == {"status": "ok"}
        assert srv.scrape()[("kokoro_audio_seconds_total", ())] == 12.5
        proc = srv.proc
    assert proc.poll() is not None
    assert srv.peak_rss_mib and srv.peak_rss_mib > 1


def test_a_server_that_dies_raises_with_its_log():
    argv = [sys.executable, "-c", "import sys; print('no model here'); sys.exit(3)"]
    with pytest.raises(ServerFailed, match="no model here"):
        LiveServer(argv=argv, name="dies", log=lambda _m: None).start()


def test_a_free_port_is_outside_the_range_outgoing_connections_take_their_ports_from():
    """A port in the ephemeral range may be taken by any client's connection before the server binds it."""
    import socket

    from server.process import _ephemeral_ports, free_port

    ports = {free_port() for _ in range(20)}
    assert not ports & set(_ephemeral_ports())
    for port in ports:  # and each is free to listen on
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
