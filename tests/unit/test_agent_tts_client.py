"""The TTS client's WebSocket transport against a server that follows DESIGN.md §4 (the fake in
tests/agent_support): order of answers, frame types, pipelining, close, cancel, errors."""

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
from tests.agent_support.fake_tts_server import FakeTTSServer

SENTENCES = ["The first sentence is here.", "A second one follows.", "And a third ends it."]


@pytest.fixture
def server():
    srv = FakeTTSServer(synth_rtf=0.05).start()
    yield srv
    srv.stop()


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
    await collect(TTSClient.websocket(server.url, voice="jm_kumo", speed=1.1), SENTENCES)
    kinds = {kind for kind, _ in server.received}
    assert kinds == {"binary"}  # as SageMaker delivers client payloads
    messages = [msg for _, msg in server.received]
    assert [m["text"] for m in messages[:-1]] == SENTENCES
    assert all(m["voice"] == "jm_kumo" and m["speed"] == 1.1 for m in messages[:-1])
    assert messages[-1] == {"type": "close"}


async def test_sentences_are_pipelined(server):
    server.synth_rtf = 0.3  # slow synthesis: the client must not wait for each answer
    await collect(TTSClient.websocket(server.url), SENTENCES)
    first_complete = server.log.index(("complete", server.received[0][1]["request_id"]))
    received_before = [e for e in server.log[:first_complete] if e[0] == "received"]
    assert len(received_before) == len(SENTENCES) + 1  # all three requests and the close


async def test_next_sentence_leaves_while_the_first_is_still_being_answered(server):
    """Sentences trickle in (as from a language model); each leaves as soon as it exists, without
    waiting for the previous one's completion."""
    server.synth_rtf = 0.5
    first = "This is part one. This is part two. This is part three."  # three segments, ~0.5 s each
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


async def test_listener_going_away_sends_cancel(server):
    server.synth_rtf = 0.5
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
    await asyncio.sleep(0.1)
    assert server.cancelled  # the server dropped the rest
    assert len([e for e in server.log if e[0] == "complete"]) < len(SENTENCES)


async def test_cancelling_the_consuming_task_sends_cancel(server):
    server.synth_rtf = 0.5
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
