"""The agent's TTS client when the endpoint goes away: ``python -m server serve`` (fake runtime) as a
real subprocess, killed with SIGKILL mid-reply and started again on the same port.

What the listener would notice: every sentence is spoken exactly once — one start, one completion,
and exactly its audio (no byte lost, none twice) — across the outage, with one ``VoiceLost`` and one
``VoiceRestored`` between; with no server to come back, a clear ``tts_unavailable`` error after the
configured tries; with no server at the start, the same.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from agent.messages import AudioChunk, SynthesisComplete, SynthesisStart, TTSError, VoiceLost, VoiceRestored
from agent.reconnect import Reconnect
from agent.tts_client import TTSClient
from tests.support.live import ServerProcess, free_port

pytestmark = pytest.mark.subprocess

SENTENCES = [f"Sentence {word} of the reply is spoken once and only once." for word in
             ("one", "two", "three", "four", "five", "six", "seven", "eight")]
#: Slow enough that the reply is still being answered when the server dies.
ENV = {"KOKORO_BACKEND": "fake", "KOKORO_FAKE_SEGMENT_S": "0.15"}


def _server(tmp_path, port: int, name: str) -> ServerProcess:
    return ServerProcess(tmp_path / f"{name}.log", port=port, **ENV)


async def _paced(items):
    for item in items:
        yield item
        await asyncio.sleep(0.05)


async def test_a_reply_survives_the_server_killed_and_restarted(tmp_path):
    port = free_port()
    first = _server(tmp_path, port, "first").wait_ready()
    second = None
    client = TTSClient.websocket(f"http://127.0.0.1:{port}", retry=Reconnect(tries=60, delay_s=0.1, max_delay_s=0.5))
    events = []
    try:
        async for event in client.speak(_paced(SENTENCES)):
            events.append(event)
            completed = sum(isinstance(e, SynthesisComplete) for e in events)
            if second is None and completed == 2 and isinstance(event, AudioChunk):
                first.proc.kill()  # SIGKILL mid-reply: sentence 3 is cut mid-audio
                first.proc.wait()
                second = await asyncio.to_thread(lambda: _server(tmp_path, port, "second").wait_ready())
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert second is not None, "the server was never killed"

    kinds = [type(e).__name__ for e in events]
    assert kinds.count("VoiceLost") == 1 and kinds.count("VoiceRestored") == 1
    assert kinds.index("VoiceLost") < kinds.index("VoiceRestored")
    restored = next(e for e in events if isinstance(e, VoiceRestored))
    assert restored.resent >= 1  # at least the sentence cut mid-way
    starts = [e for e in events if isinstance(e, SynthesisStart)]
    completes = [e for e in events if isinstance(e, SynthesisComplete)]
    assert [s.text for s in starts] == SENTENCES  # each spoken, in order, once
    assert Counter(c.request_id for c in completes) == Counter(s.request_id for s in starts)
    assert [c.request_id for c in completes] == [s.request_id for s in starts]
    audio = Counter()
    for e in events:
        if isinstance(e, AudioChunk):
            audio[e.request_id] += len(e.pcm)
    for c in completes:  # exactly each sentence's audio: nothing lost, nothing played twice
        assert round(audio[c.request_id] / 2 / 24_000, 4) == c.audio_duration_s, c


async def test_no_server_to_come_back_is_a_clear_error_after_the_tries(tmp_path):
    port = free_port()
    server = _server(tmp_path, port, "only").wait_ready()
    client = TTSClient.websocket(f"http://127.0.0.1:{port}", retry=Reconnect(tries=3, delay_s=0.05, max_delay_s=0.1))
    events = []
    try:
        with pytest.raises(TTSError) as info:
            async for event in client.speak(_paced(SENTENCES)):
                events.append(event)
                if isinstance(event, AudioChunk) and server.proc.poll() is None:
                    server.proc.kill()
    finally:
        server.stop()
    assert info.value.code == "tts_unavailable" and not info.value.retryable
    assert "3 attempts" in info.value.message
    assert sum(isinstance(e, VoiceLost) for e in events) == 1
    assert not any(isinstance(e, VoiceRestored) for e in events)


async def test_no_server_at_the_start_is_the_same_clear_error():
    client = TTSClient.websocket(f"http://127.0.0.1:{free_port()}", retry=Reconnect(tries=2, delay_s=0.05))
    with pytest.raises(TTSError) as info:
        [e async for e in client.speak(_paced(SENTENCES[:1]))]
    assert info.value.code == "tts_unavailable"
