"""Nothing kept per session after it ends: thousands of sessions over every route — HTTP requests,
the four WebSocket protocols, with cancels, barge-ins and clients that vanish mid-answer — and
afterwards every table the server and the backend keep per session, request or runtime call is
back at its idle size (0), as are the event loop's tasks; and no client was left waiting.

The real app under uvicorn (in a thread, on a loopback port) over the real engine and text
pipeline; only the runtime is the fake (tones, no model). The mix is the churn suite's
(``benchmarks.churn_mix``); its long run against a server process is ``python -m benchmarks churn``.
"""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from backends.engine.schedule import SegmentQueue
from benchmarks.churn_mix import KINDS, Churn, plan, run_mix
from server.settings import Settings
from tests.support.app import build_app, fake_synth, wait_for
from tests.support.live import ThreadServer


def test_the_round_forgets_a_session_once_nothing_of_it_is_queued():
    """One key per session was kept forever (every HTTP request is a session of its own)."""
    queue = SegmentQueue(lambda q: q.turn)
    for i in range(1000):
        queue.push(f"item-{i}", session=f"request-{i}", request_seq=i)
        if i % 3 == 0:
            queue.pop()
        elif i % 3 == 1:
            queue.remove(lambda item, i=i: item == f"item-{i}")
    queue.push("cancelled", session="kept", request_seq=1)
    queue.push("kept", session="kept", request_seq=2)
    queue.remove(lambda item: item == "cancelled")
    while queue.pop() is not None:
        pass
    assert queue.sizes() == {"queue_entries": 0, "queue_turns": 0}


def test_an_interrupted_entry_put_back_keeps_its_place_in_the_round():
    queue = SegmentQueue(lambda q: q.turn)
    queue.push("a1", session="a", request_seq=0)
    queue.push("b1", session="b", request_seq=1)
    taken = queue.pop()
    assert taken is not None and taken.item == "a1" and queue.sizes()["queue_turns"] == 1
    queue.push("c1", session="c", request_seq=2)
    queue.requeue(taken)  # interrupted: a's turn is the one it was served at, ahead of c's join
    assert [e.item for e in queue] == ["b1", "a1", "c1"]


# A table that keeps anything of a session shows after one session of its kind (the tables must read 0);
# the count is for the rest: every kind runs dozens of times in varied interleavings, and a label kept
# per session on any one protocol's sessions (3/22 of the mix at the least) adds more series than the
# bound below leaves above the ~220 at rest.
@pytest.mark.parametrize(("mode", "sessions"), [("concurrent", 1000), ("sequential", 700)])
def test_thousands_of_sessions_leave_every_table_at_its_idle_size(mode, sessions):
    app = build_app(fake_synth(segment_s=0.001), mode, settings=Settings(max_queued_per_session=8))
    state = app.state.kokoro
    with ThreadServer(app) as srv:
        tasks_at_rest = srv.task_count()
        churn = Churn(srv.url, "af_test", timeout_s=60)
        units = list(KINDS) + plan(sessions - len(KINDS))  # every kind at least once
        asyncio.run(run_mix(churn, units, concurrency=8))
        assert churn.unanswered == [], churn.unanswered
        assert sum(c["answered"] for c in churn.counts.values()) >= sessions * 0.95, churn.counts
        # what a listener still plays is known until its audio runs out; then nothing is left
        wait_for(lambda: not any(srv.call(state.table_sizes).values()), timeout=120)
        wait_for(lambda: srv.task_count() <= tasks_at_rest, timeout=30)
        text = httpx.get(srv.url + "/metrics").text
    tables = dict(re.findall(r'kokoro_state_entries\{table="(\w+)"\} (\S+)', text))
    assert {"backend_queue_turns", "backend_listeners_playing", "server_sessions", "server_inflight"} <= set(tables)
    assert all(float(v) == 0 for v in tables.values()), tables
    # metric label sets are routes, statuses and codes: a handful, whatever the number of sessions
    series = [line for line in text.splitlines() if line.startswith("kokoro_") and "{" in line]
    assert len(series) < 300 and not re.search(r'(session|request_id|context)="', text), len(series)
