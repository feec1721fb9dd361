"""Stock Pipecat ``CartesiaTTSService`` and ``ElevenLabsTTSService``, unchanged and configured by
URL, key and voice (and a longer wait for first audio, below), inside a Pipecat pipeline fed an LLM token stream, against the real server
(real ONNX speech, over TCP): the audio is speech of the right length, the word times (from the
model's durations) are monotonic and inside the audio, and an interruption mid-reply stops the audio and the server's
synthesis of that reply, then the next reply plays."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import pytest

from server.settings import Settings
from tests.support.app import LoadedRuntime, build_app
from tests.support.inproc import metric
from tests.support.live import ThreadServer

if TYPE_CHECKING:
    from pipecat.services.cartesia.tts import CartesiaTTSService
    from pipecat.services.elevenlabs.tts import ElevenLabsTTSService

    from tests.support.pipecat_run import Reply

# Pipecat is imported where it is used: every collection of the suite would pay its import.

VOICE = "jm_kumo"  # of the voices on the registry, the one that reads English best
KEY = "test-key"
REPLY = "Hello there. The weather is nice today."
LONG = "This reply is long. It goes on for a while. The user will stop it. Nobody hears this end."
NEXT = "Sure, go ahead."
#: Pipecat ends a reply that has had no audio for 3 s; a test machine shared with other work can
#: take longer than that for a first segment on the CPU, so the tests wait longer.
STOP_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def server(onnx_synth, pipeline, voices) -> Iterator[ThreadServer]:
    pytest.importorskip("pipecat")
    # timed: the ONNX model with the duration output, so word times come from the model's durations
    app = build_app(LoadedRuntime(onnx_synth, timed=True), settings=Settings(api_key=KEY), pipeline=pipeline,
                    voices=voices)
    with ThreadServer(app) as srv:
        assert app.state.kokoro.backend.info.capabilities.word_timings, "the ONNX model has no duration output"
        yield srv


def cartesia(url: str) -> CartesiaTTSService:
    from pipecat.services.cartesia.tts import CartesiaTTSService

    host = url.split("://", 1)[1]
    return CartesiaTTSService(api_key=KEY, url=f"ws://{host}/tts/websocket",
                              settings=CartesiaTTSService.Settings(voice=VOICE), stop_frame_timeout_s=STOP_TIMEOUT_S)


def elevenlabs(url: str) -> ElevenLabsTTSService:
    from pipecat.services.elevenlabs.tts import ElevenLabsTTSService

    host = url.split("://", 1)[1]
    return ElevenLabsTTSService(api_key=KEY, url=f"ws://{host}", settings=ElevenLabsTTSService.Settings(voice=VOICE),
                                stop_frame_timeout_s=STOP_TIMEOUT_S)


SERVICES = [pytest.param(cartesia, id="cartesia"), pytest.param(elevenlabs, id="elevenlabs")]


def segments_synthesised(url: str) -> float:
    request = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return metric(r.read().decode(), "kokoro_segment_synthesis_seconds_count")


def word_offsets(reply: Reply) -> list[float]:
    """Each word's time from the reply's first audio, seconds."""
    assert reply.first_audio_ns is not None
    return [(pts - reply.first_audio_ns) / 1e9 for _, pts in reply.words]


@pytest.mark.parametrize("make", SERVICES)
def test_a_streamed_reply_is_speech_with_word_times_inside_its_audio(server, make: Callable, transcribe):
    from tests.support.pipecat_run import PipecatRun

    async def scenario() -> tuple[Reply, list[str]]:
        async with PipecatRun(make(server.url)) as run:
            reply = await run.say(REPLY)
            return reply, run.errors

    reply, errors = asyncio.run(scenario())
    assert not errors
    assert reply.sample_rate == 24000 and len(reply.audio) % 2 == 0
    audio = np.frombuffer(bytes(reply.audio), dtype="<i2").astype(np.float32) / 32768
    # the right length for the words: Kokoro speaks these 7 words in 1.5-5 s
    assert 1.5 < reply.seconds < 5.0, reply.seconds
    heard = set(transcribe(audio))
    expected = [w.strip(".,").lower() for w in REPLY.split()]
    assert sum(w in heard for w in expected) >= len(expected) // 2, heard
    assert [w for w, _ in reply.words] == REPLY.split()  # every word, once, in order
    times = word_offsets(reply)
    assert times == sorted(times)
    assert -0.05 <= times[0] and times[-1] < reply.seconds, (times, reply.seconds)


@pytest.mark.parametrize("make", SERVICES)
def test_an_interruption_mid_reply_stops_its_audio_and_synthesis_and_the_next_reply_plays(server, make: Callable):
    from tests.support.pipecat_run import PipecatRun

    async def scenario() -> tuple[Reply, Reply, float, float, list[str]]:
        async with PipecatRun(make(server.url)) as run:
            long = await run.start_reply(LONG, tokens_per_s=30)
            await run.wait_audio(long, 0.2)  # the user barges in once the reply is heard
            at_interruption = segments_synthesised(server.url)
            await run.interrupt()
            following = await run.say(NEXT)
            return long, following, at_interruption, segments_synthesised(server.url), run.errors

    long, following, at_interruption, after, errors = asyncio.run(scenario())
    assert not errors
    assert long.after_interruption == 0, "audio of the interrupted reply reached the agent"
    assert long.seconds < 4.0  # the reply's four sentences were not all spoken
    # the server stopped too: at most the segment running at the interruption, then the next reply's
    assert after - at_interruption <= 1 + 2, (at_interruption, after)
    assert following.seconds > 0.5 and [w for w, _ in following.words] == NEXT.split()
