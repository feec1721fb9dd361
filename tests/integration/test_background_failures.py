"""No background task dies silently: the concurrent scheduler's loop, the sequential mode's
hand-over to its worker, the concurrent mode's completion step, a text stream's worker — each
failure is logged with its traceback, the requests that waited on it get a typed error at once
(never a wait for the request timeout: the timeout is off here, so a lost request would hang), and
the server restarts the task or reports unhealthy on ``/ping``.

The faults are bugs in the server's own code (a runtime's faults run on worker threads and are
typed per segment: tests/contract/test_reliability_faults.py), so they are injected where the code
runs: the engine's scheduling policy, and a text stream's step. Requests run on the real engine,
text pipeline and app over the fake runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from backends.api import BackendFault, NotReady, SynthesisRequest
from server.metrics import Metrics
from server.settings import Settings
from server.state import ServerState
from server.streaming import text_stream
from server.streaming.text_stream import Audio, Done, Failed, Flushed, StreamOptions, TextStream
from tests.support.app import build_backend, fake_synth
from tests.support.inproc import client

BOUND_S = 30  # a failure answers within this (in practice at once); a lost request would hang forever


class Bug(RuntimeError):
    pass


def broken(method, times: int = 1_000_000):
    """``method`` (a bound policy method) made to raise for its next ``times`` calls, then to work
    again: a bug in the loop's own code."""
    left = [times]

    def boom(*args, **kwargs):
        if left[0] > 0:
            left[0] -= 1
            raise Bug("injected")
        return method(*args, **kwargs)

    return boom, left


async def collect(backend, text: str, session: str = "s") -> list:
    request = await backend.prepare(SynthesisRequest(text=text, session=session))
    async with asyncio.timeout(BOUND_S):
        return [chunk async for chunk in backend.stream(request)]


def logged_with_traceback(caplog, words: str) -> bool:
    return any(r.levelno >= logging.ERROR and words in r.getMessage() and r.exc_info for r in caplog.records)


@contextlib.asynccontextmanager
async def started(mode: str = "concurrent") -> AsyncIterator[Any]:
    """The real backend of ``mode`` over the fake runtime, started on the test's own loop (the
    scheduler's task lives there), without a request timeout."""
    backend = build_backend(fake_synth(), mode, request_timeout_s=None)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.aclose()


async def test_a_scheduler_that_dies_fails_its_requests_at_once_logs_why_and_starts_again(caplog):
    async with started() as concurrent:
        boom, left = broken(concurrent.policy.hold_s, times=1)
        concurrent.policy.hold_s = boom
        with pytest.raises(BackendFault, match="batch scheduler failed"):
            await collect(concurrent, "This request waits on the scheduler. It has two sentences.")
        assert logged_with_traceback(caplog, "the batch scheduler failed")
        assert left[0] == 0
        chunks = await collect(concurrent, "Served by the restarted scheduler.")
        assert chunks and all(c.audio.size for c in chunks)
        await concurrent.check_health()  # one failure: restarted, still healthy


async def test_every_waiting_request_of_every_session_gets_the_error():
    async with started() as concurrent:
        gate = concurrent.synthesizer.gate = threading.Event()  # every call waits: the queue fills
        requests = [asyncio.create_task(collect(concurrent, f"Session {i} speaks. Twice over.", session=f"s{i}"))
                    for i in range(6)]
        for _ in range(BOUND_S * 100):  # until all six are admitted (two running, four queued)
            if concurrent.table_sizes()["admitted_requests"] == 6:
                break
            await asyncio.sleep(0.01)
        concurrent.policy.hold_s, _ = broken(concurrent.policy.hold_s, times=1)
        gate.set()  # the running calls finish: the loop picks again, and fails
        results = await asyncio.gather(*requests, return_exceptions=True)
        assert all(isinstance(r, BackendFault) for r in results), results
        sizes = concurrent.table_sizes()
        assert sizes["admitted_requests"] == sizes["queue_entries"] == sizes["queue_turns"] == 0


async def test_a_scheduler_that_keeps_dying_stays_down_and_says_so():
    async with started() as concurrent:
        concurrent.policy.hold_s = broken(concurrent.policy.hold_s)[0]
        for _ in range(concurrent.scheduler.restarts + 1):
            with pytest.raises(BackendFault):
                await collect(concurrent, "Again.")
        with pytest.raises(NotReady, match="batch scheduler failed 4 times"):
            await concurrent.check_health()
        with pytest.raises(BackendFault, match="batch scheduler"):  # refused at once, not queued to wait
            await collect(concurrent, "Refused.")


def test_ping_reports_a_scheduler_that_stays_down_so_the_platform_replaces_the_instance():
    with client(mode="concurrent", backend_kw={"request_timeout_s": None}) as c:
        policy = c.app.state.kokoro.backend.policy
        policy.hold_s = broken(policy.hold_s)[0]
        for _ in range(4):
            r = c.post("/invocations", json={"text": "Hello."})
            assert r.status_code == 500 and r.json()["error"]["code"] == "backend_error"
        ping = c.get("/ping")
        assert ping.status_code == 503
        assert ping.json()["status"] == "unhealthy" and "batch scheduler" in ping.json()["error"]


async def test_a_completion_step_that_raises_fails_only_that_request(caplog):
    async with started() as concurrent:
        concurrent.policy.segment_ready, _ = broken(concurrent.policy.segment_ready, times=1)
        with pytest.raises(BackendFault):
            await collect(concurrent, "The first segment's hand-over fails.")
        assert logged_with_traceback(caplog, "handing its segment over failed")
        assert await collect(concurrent, "The next one is served.")


async def test_sequential_a_failed_hand_over_to_the_worker_fails_its_request_and_the_queue_goes_on(caplog):
    async with started("sequential") as backend:
        backend.policy.call_started, _ = broken(backend.policy.call_started, times=1)
        first, second = await asyncio.gather(collect(backend, "Fails to start.", session="a"),
                                             collect(backend, "Runs after it.", session="b"), return_exceptions=True)
        assert isinstance(first, BackendFault) and isinstance(second, list) and second
        assert logged_with_traceback(caplog, "starting a runtime call failed")
        assert backend.table_sizes()["waiting_segments"] == backend.table_sizes()["worker_busy"] == 0


# -- text streams ------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def server_state() -> AsyncIterator[ServerState]:
    async with started("sequential") as backend:
        yield ServerState(Settings(max_text_chars=300), backend, Metrics())


async def read_until(stream: TextStream, kind: type) -> list:
    out = []
    async with asyncio.timeout(BOUND_S):
        async for event in stream:
            out.append(event)
            if isinstance(event, kind):
                return out
    return out


async def test_a_text_stream_worker_that_dies_still_hands_over_its_markers_and_the_stream_goes_on(
        monkeypatch, caplog):
    def bug(**_kw):
        raise Bug("injected")

    async with server_state() as state:
        stream = TextStream(state, "test", StreamOptions())
        monkeypatch.setattr(text_stream, "SynthesisRequest", bug)  # the worker dies outside a piece's handling
        stream.push("This piece kills the worker. ")
        stream.flush(7)
        events = await read_until(stream, Flushed)
        assert [type(e) for e in events] == [Failed, Flushed] and events[-1] == Flushed(7)
        assert events[0].error.code == "backend_error"
        assert logged_with_traceback(caplog, "worker failed")
        monkeypatch.undo()
        stream.push("The next turn is spoken. ")
        stream.end()
        rest = await read_until(stream, Done)
        assert isinstance(rest[0], Audio) and isinstance(rest[-1], Done)


async def test_a_turn_end_that_fails_still_acknowledges_the_flush(monkeypatch, caplog):
    async def bug(self):
        raise Bug("injected")

    async with server_state() as state:
        stream = TextStream(state, "test", StreamOptions(sample_rate=16000))  # a resampler tail at each flush
        monkeypatch.setattr(TextStream, "_end_turn_audio", bug)
        stream.push("Spoken, then the tail fails. ")
        stream.flush("m")
        events = await read_until(stream, Flushed)
        assert isinstance(events[0], Audio) and isinstance(events[-2], Failed) and events[-1] == Flushed("m")
        assert logged_with_traceback(caplog, "ending a turn's audio failed")
        await stream.aclose()


def test_deepgram_client_gets_flushed_even_when_the_worker_dies(monkeypatch):
    def bug(**_kw):
        raise Bug("injected")

    with client(backend_kw={"request_timeout_s": None}) as c, \
            c.websocket_connect("/v1/speak?model=af_test&encoding=linear16&sample_rate=24000") as ws:
        assert json.loads(ws.receive_text())["type"] == "Metadata"
        monkeypatch.setattr(text_stream, "SynthesisRequest", bug)
        ws.send_text(json.dumps({"type": "Speak", "text": "Lost to a bug."}))
        ws.send_text(json.dumps({"type": "Flush"}))
        frames = []
        while not frames or frames[-1].get("type") not in ("Flushed", "close"):
            m = ws.receive()
            frames.append({"type": "close"} if m["type"] == "websocket.close" else
                          {"type": "audio"} if m.get("bytes") is not None else json.loads(m["text"]))
        assert frames[-1] == {"type": "Flushed", "sequence_id": 0}, frames
        assert any(f["type"] == "Warning" for f in frames), frames  # the failure, in Deepgram's shape
        monkeypatch.undo()
        ws.send_text(json.dumps({"type": "Speak", "text": "Spoken after it."}))
        ws.send_text(json.dumps({"type": "Flush"}))
        m = ws.receive()
        assert m.get("bytes")  # audio again: the session went on
