"""End to end: ``python -m server serve`` as a real subprocess (uvicorn, the real ONNX runtime),
driven over loopback with the ``websockets`` client and httpx (compare vLLM's RemoteOpenAIServer).

Real synthesis is slow on a small CPU, so the texts are short and spoken at speed 2; the long
synthesis in the /ping test is cancelled as soon as it has shown what it must.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.support.inproc import metric

pytestmark = pytest.mark.subprocess


@pytest.fixture(scope="module")
def server(onnx_server):
    """The suite's shared real-model server (``onnx_server``): these tests only talk to it."""
    return onnx_server


def req(text: str, rid: str, **kw) -> str:
    return json.dumps({"text": text, "speed": 2.0, "request_id": rid, **kw})


async def one_answer(ws) -> list:
    """Frames up to the terminal event: parsed dicts for text frames, bytes for binary frames."""
    frames: list = []
    while True:
        message = await ws.recv()
        if isinstance(message, bytes):
            frames.append(message)
            continue
        event = json.loads(message)
        frames.append(event)
        if event["type"] in ("synthesis_complete", "error"):
            return frames


def assert_answer(frames: list, rid: str) -> None:
    assert isinstance(frames[0], dict) and frames[0]["type"] == "synthesis_start" and frames[0]["request_id"] == rid
    assert len(frames) >= 3 and all(isinstance(f, bytes) for f in frames[1:-1])
    assert frames[-1]["type"] == "synthesis_complete" and frames[-1]["request_id"] == rid
    pcm = sum(len(f) for f in frames[1:-1])
    assert frames[-1]["audio_duration_s"] == pytest.approx(pcm / 2 / 24000, abs=1e-3)


async def until(check) -> None:
    """Poll ``await check()`` until it is true (a condition to reach, not a timing assertion)."""
    async with asyncio.timeout(60):
        for _ in itertools.count():
            if await check():
                return
            await asyncio.sleep(0.02)


# ---------------------------------------------------------------------------------------------
# WebSocket
# ---------------------------------------------------------------------------------------------
async def test_binary_frame_without_type_then_a_second_sentence(server):
    async with connect(server.ws_url) as ws:
        await ws.send(req("Hello.", "b1").encode())  # a binary frame, no "type": what SageMaker delivers
        assert_answer(await one_answer(ws), "b1")
        await ws.send(req("Again.", "b2"))
        assert_answer(await one_answer(ws), "b2")


async def test_pipelined_requests_in_order_and_close_ends_normally(server):
    async with connect(server.ws_url) as ws:
        for rid, text in (("p1", "One."), ("p2", "Two."), ("p3", "Three.")):
            await ws.send(req(text, rid))
        await ws.send(json.dumps({"type": "close"}))
        answers = [await one_answer(ws) for _ in range(3)]
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
    for frames, rid in zip(answers, ("p1", "p2", "p3"), strict=True):
        assert_answer(frames, rid)  # each answer is contiguous: nothing of another request inside it
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


async def test_bad_messages_get_error_events_and_the_session_still_synthesises(server):
    bad = [
        (b"\x00{nope", "invalid_json"),
        (json.dumps({"voice": "jm_kumo"}), "invalid_request"),
        (json.dumps({"text": "Hi.", "voice": "af_nobody"}), "unknown_voice"),
        (json.dumps({"text": ["Hi."]}), "invalid_request"),
        (json.dumps({"text": "Hi.", "speed": "2"}), "invalid_request"),
        (json.dumps({"text": "Hi.", "speed": 0.1}), "invalid_request"),
    ]
    async with connect(server.ws_url) as ws:
        for message, _ in bad:
            await ws.send(message)
        errors = [await one_answer(ws) for _ in bad]
        await ws.send(req("Still fine.", "ok"))
        assert_answer(await one_answer(ws), "ok")
    assert [(e[0]["type"], e[0]["code"]) for e in errors] == [("error", code) for _, code in bad]


# ---------------------------------------------------------------------------------------------
# POST /invocations
# ---------------------------------------------------------------------------------------------
async def test_post_first_bytes_arrive_before_the_last_segment_is_synthesised(server):
    """Order of events, read from the server's own segment counter: when the first audio bytes
    arrive, the last segment has not been synthesised yet."""
    text = "First sentence. The second sentence is a little longer than the first one was."
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        before = metric((await http.get("/metrics")).text, "kokoro_segment_synthesis_seconds_count")
        async with http.stream("POST", "/invocations", json={"text": text, "format": "pcm"}) as r:
            assert r.status_code == 200
            chunks = r.aiter_raw()
            first = await anext(chunks)
            at_first_bytes = metric((await http.get("/metrics")).text, "kokoro_segment_synthesis_seconds_count")
            rest = [c async for c in chunks]
        after = metric((await http.get("/metrics")).text, "kokoro_segment_synthesis_seconds_count")
    assert first and sum(map(len, rest)) > 0
    assert before < at_first_bytes < after  # segment 1 done, a later segment still to come


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{", 400, "invalid_json"),
        (b'{"text": "Hi.", "speed": 3}', 400, "invalid_request"),
        (b'{"text": "Hi.", "voice": "af_nobody"}', 404, "unknown_voice"),
        (json.dumps({"text": "x" * 5001}).encode(), 413, "text_too_long"),
    ],
)
def test_post_error_statuses(server, body, status, code):
    r = httpx.post(f"{server.url}/invocations", content=body, timeout=30)
    assert r.status_code == status and r.json()["error"]["code"] == code


# ---------------------------------------------------------------------------------------------
# /ping under load, /metrics
# ---------------------------------------------------------------------------------------------
LONG = ("This sentence is long on purpose so that its synthesis keeps every core of the machine busy "
        "for a good while, long enough to ask the server whether it is still alive")


async def test_ping_answers_while_three_long_syntheses_run(server):
    """If inference ran on the event loop, /ping could only be answered between segments: a
    segment would complete between the two metric reads around it. Here it is answered while the
    same segment is still being synthesised and all three requests are still in flight."""
    async with httpx.AsyncClient(base_url=server.url, timeout=60,
                                 limits=httpx.Limits(max_connections=10)) as http:

        async def long_post() -> None:
            async with http.stream("POST", "/invocations", json={"text": LONG, "speed": 1.5}) as r:
                await anext(r.aiter_raw())

        posts = [asyncio.create_task(long_post()) for _ in range(3)]
        try:
            inflight = 'kokoro_inflight_requests{route="invocations"}'


            async def all_in_flight() -> bool:
                return metric((await http.get("/metrics")).text, inflight) == 3

            await until(all_in_flight)
            clean = False
            for _ in range(3):  # a probe may straddle a segment boundary by chance; blocking fails all
                m0 = (await http.get("/metrics")).text
                ping = await http.get("/ping")
                m1 = (await http.get("/metrics")).text
                assert ping.status_code == 200
                seg0 = metric(m0, "kokoro_segment_synthesis_seconds_count")
                seg1 = metric(m1, "kokoro_segment_synthesis_seconds_count")
                if seg0 == seg1 and metric(m1, inflight) == 3 and not any(p.done() for p in posts):
                    clean = True
                    break
            assert clean
        finally:
            for p in posts:
                p.cancel()
            await asyncio.wait(posts)


def test_metrics_expose_the_named_series(server):
    assert httpx.post(f"{server.url}/invocations", json={"text": "Hi.", "speed": 2.0}, timeout=60).status_code == 200
    text = httpx.get(f"{server.url}/metrics").text
    for name in ("kokoro_requests_total", "kokoro_time_to_first_audio_seconds_bucket",
                 "kokoro_segment_synthesis_seconds_bucket", "kokoro_audio_seconds_total",
                 "kokoro_realtime_factor_bucket", "kokoro_active_sessions", "kokoro_queue_depth",
                 "kokoro_batch_size_bucket"):
        assert re.search(rf"^{name}(\{{|\s)", text, re.M), name
    assert 'kokoro_requests_total{route="invocations",status="200"}' in text


async def test_a_keep_alive_connection_idle_longer_than_uvicorns_default_still_serves(server):
    """A front end (SageMaker's, a load balancer) pools connections to the server and reuses one
    after it sat idle: the server must not have closed it meanwhile (uvicorn's own default is 5 s)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        for _ in range(2):
            writer.write(b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            assert head.startswith(b"HTTP/1.1 200"), head
            length = int(re.search(rb"content-length: (\d+)", head.lower()).group(1))
            await reader.readexactly(length)
            await asyncio.sleep(6)
    finally:
        writer.close()
