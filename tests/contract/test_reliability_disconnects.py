"""100 abrupt client disconnects mid-synthesis: active sessions back to 0, no task or
thread left behind, the queued work of the vanished clients never synthesised, the server serving.

uvicorn runs the real app in a thread of this process (so the test can count its event loop's
tasks and the process's threads) over real TCP; the clients are raw sockets that vanish with a
TCP RST (or a bare FIN) right after their first audio frame, with more work still queued.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from server.settings import Settings
from tests.support.app import build_app, fake_synth, wait_for
from tests.support.inproc import metric
from tests.support.live import BINARY, RawWS, ThreadServer

CLIENTS = 100
LONG = " ".join(f"Sentence number {i} goes on for a little while." for i in range(12))


def _vanish(port: int, i: int, rst: bool) -> None:
    ws = RawWS(port)
    assert ws.status == 101
    ws.send_text(json.dumps({"text": LONG, "request_id": f"long-{i}"}))
    ws.send_text(json.dumps({"text": f"Queued marker {i}.", "request_id": f"queued-{i}"}))
    while ws.recv()[0] != BINARY:  # synthesis_start, then the first audio: mid-synthesis now
        pass
    if rst:
        ws.abort()
    else:
        ws.close()


@pytest.mark.parametrize("mode", ["sequential", "concurrent"])
def test_abrupt_disconnects_leak_nothing_and_drop_queued_work(mode):
    synth = fake_synth(segment_s=0.01)
    app = build_app(synth, mode, settings=Settings(max_sessions=CLIENTS))
    with ThreadServer(app) as srv:
        metrics_url = f"{srv.url}/metrics"

        def settled() -> bool:
            text = httpx.get(metrics_url).text
            return metric(text, "kokoro_active_sessions") == 0 and metric(
                text, 'kokoro_inflight_requests{route="invocations"}') == 0 and synth.active == 0

        # One round of the same shape first, so thread pools (the runtime's: two parallel calls in
        # concurrent mode) and lazy state exist before the baseline is taken.
        with ThreadPoolExecutor(25) as pool:
            list(pool.map(lambda i: _vanish(srv.port, -1 - i, rst=True), range(CLIENTS)))
        wait_for(settled, timeout=60)
        tasks_before, threads_before = srv.task_count(), threading.active_count()
        calls_before = len(synth.calls)

        with ThreadPoolExecutor(25) as pool:
            list(pool.map(lambda i: _vanish(srv.port, i, rst=i % 2 == 0), range(CLIENTS)))
        wait_for(settled, timeout=60)
        wait_for(lambda: srv.task_count() == tasks_before, timeout=20)
        state = app.state.kokoro
        assert not state.sessions and state.inflight == 0
        # Idle worker threads (anyio's, the runtime's pools) may exit meanwhile; none may be added.
        wait_for(lambda: threading.active_count() <= threads_before, timeout=20)
        assert srv.call(lambda: state.backend.queue_depth) == 0

        run = synth.calls[calls_before:]
        assert not [t for t in run if "Queued marker" in t]  # queued requests of vanished clients: dropped
        # Each long request has many segments; a vanished client costs at most the one or two in flight.
        assert len(run) <= 3 * CLIENTS
        r = httpx.post(f"{srv.url}/invocations", json={"text": "Still serving."}, timeout=30)
        assert r.status_code == 200 and len(r.content) > 44
        text = httpx.get(metrics_url).text
    # Every request of a vanished client is accounted for: in flight or queued, each counts as 499.
    ws_counts = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                 if line.startswith('kokoro_requests_total{route="ws"')}
    assert ws_counts == {'kokoro_requests_total{route="ws",status="499"}': 2 * 2 * CLIENTS}  # (both rounds)
