"""The TTS client's WebSocket transport against the real server (the fake runtime stands in for the
model), through a tap that records the frames: order of answers, frame types, pipelining, close, cancel,
errors."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from agent.tts_client import (
    AudioChunk,
    SynthesisComplete,
    SynthesisFailed,
    SynthesisStart,
    TTSClient,
    TTSError,
)
from agent.ws_client import ws_url
from tests.agent_support.wire_tap import WireTap, fake_runtime_server, requests_total

SENTENCES = ["The first sentence is here.", "A second one follows.", "And a third ends it."]


@pytest.fixture(scope="module")
def fast_server(fake_server):
    """The suite's shared fake-runtime server (``fake_server``)."""
    return fake_server


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory):
    """Each segment takes 0.4 s: the client must not wait for one answer before sending on."""
    with fake_runtime_server(tmp_path_factory.mktemp("slow"), segment_s=0.4) as srv:
        yield srv


@pytest.fixture
def server(fast_server):
    with WireTap(fast_server.ws_url) as tap:
        yield tap


@pytest.fixture
def slow(slow_server):
    with WireTap(slow_server.ws_url) as tap:
        tap.metrics_url = slow_server.url
        yield tap


async def listed(items):
    for item in items:
        yield item


async def collect(client: TTSClient, sentences) -> list:
    return [event async for event in client.speak(listed(sentences))]


async def test_answers_arrive_in_order_with_audio_between_start_and_complete(server):
    events = await collect(TTSClient.websocket(server.url), SENTENCES)

    starts = [e for e in events if isinstance(e, SynthesisStart)]
    assert [s.text for s in starts] == SENTENCES
    assert all(s.sample_rate == 24_000 and s.encoding == "pcm_s16le" for s in starts)
    for start in starts:
        mine = [e for e in events if getattr(e, "request_id", None) == start.request_id]
        assert isinstance(mine[0], SynthesisStart)
        assert isinstance(mine[-1], SynthesisComplete)
        audio = [e for e in mine if isinstance(e, AudioChunk)]
        assert audio and all(len(a.pcm) % 2 == 0 for a in audio)
        assert mine[-1].audio_duration_s == pytest.approx(sum(len(a.pcm) for a in audio) / 48_000, abs=0.01)
    # Everything was answered within one ordered stream: never two requests interleaved.
    order = [e.request_id for e in events]
    assert order == sorted(order, key=[s.request_id for s in starts].index)


async def test_messages_go_out_as_binary_frames_and_close_ends_the_session(server):
    events = await collect(TTSClient.websocket(server.url, voice="jm_kumo", speed=1.1), SENTENCES)
    assert not [e for e in events if isinstance(e, SynthesisFailed)]
    kinds = {kind for kind, _ in server.received}
    assert kinds == {"binary"}  # as SageMaker delivers client payloads
    messages = [msg for _, msg in server.received]
    assert [m["text"] for m in messages[:-1]] == SENTENCES
    assert all(m["voice"] == "jm_kumo" and m["speed"] == 1.1 for m in messages[:-1])
    assert messages[-1] == {"type": "close"}


@pytest.mark.subprocess
async def test_sentences_are_pipelined(slow):
    await collect(TTSClient.websocket(slow.url), SENTENCES)
    first_complete = slow.log.index(("complete", slow.received[0][1]["request_id"]))
    received_before = [e for e in slow.log[:first_complete] if e[0] == "received"]
    assert len(received_before) == len(SENTENCES) + 1  # all three requests and the close


@pytest.mark.subprocess
async def test_next_sentence_leaves_while_the_first_is_still_being_answered(slow):
    """Sentences trickle in (as from a language model); each leaves as soon as it exists, without
    waiting for the previous one's completion."""
    server = slow
    first = "This is part one. This is part two. This is part three."  # several segments, 0.4 s each
    gate = asyncio.Event()

    async def trickle():
        yield first
        await gate.wait()
        yield SENTENCES[1]

    seen = []
    async for event in TTSClient.websocket(server.url).speak(trickle()):
        seen.append(event)
        if isinstance(event, AudioChunk):
            gate.set()
    rid1 = seen[0].request_id
    second = next(i for i, e in enumerate(server.log) if e[0] == "received" and e[1] != rid1)
    assert second < server.log.index(("complete", rid1))
    assert [e.text for e in seen if isinstance(e, SynthesisStart)] == [first, SENTENCES[1]]


@pytest.mark.subprocess
async def test_listener_going_away_sends_cancel(slow):
    server = slow
    cancelled_before = requests_total(server.metrics_url, "499")
    stream = TTSClient.websocket(server.url).speak(listed(SENTENCES))
    async for event in stream:
        if isinstance(event, AudioChunk):
            break
    await stream.aclose()
    for _ in range(100):
        if any(msg == {"type": "cancel"} for _, msg in server.received):
            break
        await asyncio.sleep(0.02)
    assert {"type": "cancel"} in [msg for _, msg in server.received]
    for _ in range(100):  # the server dropped the rest: it counts the requests as cancelled (499)
        if requests_total(server.metrics_url, "499") > cancelled_before:
            break
        await asyncio.sleep(0.05)
    assert requests_total(server.metrics_url, "499") > cancelled_before
    assert len([e for e in server.log if e[0] == "complete"]) < len(SENTENCES)


@pytest.mark.subprocess
async def test_cancelling_the_consuming_task_sends_cancel(slow):
    server = slow
    got_audio = asyncio.Event()

    async def listen():
        async for event in TTSClient.websocket(server.url).speak(listed(SENTENCES)):
            if isinstance(event, AudioChunk):
                got_audio.set()

    task = asyncio.create_task(listen())
    await asyncio.wait_for(got_audio.wait(), 10)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    for _ in range(100):
        if {"type": "cancel"} in [msg for _, msg in server.received]:
            break
        await asyncio.sleep(0.02)
    assert {"type": "cancel"} in [msg for _, msg in server.received]


async def test_refused_request_is_an_event_and_the_session_continues(server):
    events = await collect(TTSClient.websocket(server.url, voice="af_nobody"), SENTENCES[:2])
    failed = [e for e in events if isinstance(e, SynthesisFailed)]
    assert [f.code for f in failed] == ["unknown_voice", "unknown_voice"]
    assert len({f.request_id for f in failed}) == 2


async def test_unreachable_server_is_a_retryable_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TTSError) as info:
        await collect(TTSClient.websocket(f"http://127.0.0.1:{port}"), SENTENCES)
    assert info.value.code == "connect_failed" and info.value.retryable


def test_url_forms():
    # http(s) becomes ws(s); a bare host:port gets the bidirectional path.
    for given, expected in [
        ("http://h:1", "ws://h:1/invocations-bidirectional-stream"),
        ("https://h", "wss://h/invocations-bidirectional-stream"),
        ("h:2", "ws://h:2/invocations-bidirectional-stream"),
        ("ws://h:3/custom", "ws://h:3/custom"),
    ]:
        assert ws_url(given) == expected
