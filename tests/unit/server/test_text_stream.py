"""The streaming-input core (``server.streaming.text_stream``, ``server.streaming.stream_set``) over the real sequential
backend and text pipeline (fake runtime): order, word timings on the turn's clock, clear, contexts."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from backends.api import Overloaded, TextTooLong
from backends.runtimes.fake import FakeSynthesizer
from server.metrics import Metrics
from server.settings import Settings
from server.state import ServerState
from server.streaming.stream_set import StreamSet
from server.streaming.text_stream import Audio, Cleared, Done, Flushed, StreamOptions, TextStream
from tests.support.app import build_backend


@pytest.fixture
async def state():
    backend = build_backend(FakeSynthesizer(segment_s=0.0, timed=True))  # durations, as torch reports them
    await backend.start()
    yield ServerState(Settings(max_text_chars=300), backend, Metrics())
    await backend.aclose()


async def events_of(stream: TextStream) -> list:
    return [e async for e in stream]


async def test_words_come_timed_on_the_turns_clock_and_in_order(state):
    stream = TextStream(state, "test", StreamOptions(word_timings=True))
    assert stream.timed
    for token in "One two three four five six, seven. And a second sentence here".split(" "):
        stream.push(token + " ")
    stream.end()
    events = await events_of(stream)
    audio = [e for e in events if isinstance(e, Audio)]
    assert isinstance(events[-1], Done) and len(audio) >= 2
    words = [w for a in audio for w in a.words]
    assert [w.word for w in words] == "One two three four five six, seven. And a second sentence here".split()
    assert all(a.start <= a.end <= b.start + 1e-6 for a, b in itertools.pairwise(words))
    total = sum(a.duration for a in audio)
    assert events[-1].audio_seconds == pytest.approx(total, abs=1e-3)
    assert all(a.offset <= w.start <= w.end <= a.offset + a.duration + 1e-6 for a in audio for w in a.words)
    assert sum(len(a.data) for a in audio) / 2 / 24000 == pytest.approx(total, abs=1e-3)


async def test_flush_marks_follow_their_audio_and_clear_restarts_the_clock(state):
    stream = TextStream(state, "test", StreamOptions())
    stream.push("First turn here. ")
    stream.flush("a")
    seen = []
    async for event in stream:
        seen.append(event)
        if isinstance(event, Flushed):
            break
    assert isinstance(seen[0], Audio) and seen[-1] == Flushed("a")
    stream.push("Dropped before it is spoken")
    await stream.clear("b")
    stream.push("Next turn. ")
    stream.end()
    rest = await events_of(stream)
    assert rest[0] == Cleared("b") and isinstance(rest[1], Audio) and rest[1].offset == 0.0
    assert isinstance(rest[-1], Done)


async def test_buffered_text_is_bounded(state):
    stream = TextStream(state, "test", StreamOptions())
    with pytest.raises(TextTooLong):
        stream.push("word " * 100)
    await stream.aclose()


async def test_contexts_keep_their_own_order_and_are_bounded(state):
    got: dict[str, list] = {}
    both_done = asyncio.Event()

    async def send(context_id, event):
        got.setdefault(context_id, []).append(event)
        if sum(isinstance(e, Done) for events in got.values() for e in events) == 2:
            both_done.set()

    contexts = StreamSet(state, "test", send, max_contexts=2)
    a = contexts.open("a", StreamOptions())
    b = contexts.open("b", StreamOptions())
    with pytest.raises(Overloaded):
        contexts.open("c", StreamOptions())
    a.push("Context A speaks. ")
    b.push("Context B speaks too. ")
    a.end()
    b.end()
    await asyncio.wait_for(both_done.wait(), 30)
    assert all(isinstance(events[-1], Done) and isinstance(events[0], Audio) for events in got.values())
    assert set(got) == {"a", "b"}
    await contexts.aclose()
