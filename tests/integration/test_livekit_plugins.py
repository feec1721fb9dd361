"""LiveKit Agents' TTS plugins (``livekit-plugins-deepgram``, ``-cartesia``, ``-elevenlabs`` 1.8.9),
installed unchanged and configured only by URL, key and voice, each with its default format
(Deepgram linear16 and Cartesia ``pcm_s16le`` at 24 kHz, ElevenLabs ``mp3_22050_32``), against the
real server on the real ONNX runtime, through ``stream()`` (the WebSocket routes) and
``synthesize()`` (the HTTP twins):

* the audio is speech of the length of the same words read as 24 kHz PCM, at the rate the plugin
  asked for; ``synthesize()`` gives no word times, ``stream()`` gives Cartesia's in order and inside
  the audio, ElevenLabs' with every word of the text but restarting at each message (below);
* a reply closed mid-way holds the next turn up by the segment then running at most, and the
  next turn is heard;
* a bad voice, an empty text and a wrong key raise the plugins' own errors.

Where a plugin misreads the protocol or drops what the server says (it would against the real
services too: the server's messages are theirs), the test asserts what it really does, and
docs/voice-agents.md says so:

* ElevenLabs ``stream()`` appends each message's ``alignment`` as if it ran from the context's start,
  while the service restarts it at 0 in every message: the word times go back at each message;
* Cartesia ``stream()`` with an unknown voice: the service's error message carries ``done: true``,
  which the plugin reads first, as the end of the context: it reports "no audio frames were
  pushed", a *retryable* ``APIError`` (so it retries, 3 times by default), not the 404;
* ``synthesize()`` errors (all three) carry only the HTTP status line (``Not Found``), not the body;
* ``stream()`` with an empty text sends nothing and raises nothing (all three).

Every utterance ends in a frame of 10 ms: the plugins' ``AudioEmitter`` holds the last 10 ms back
to mark it final. In ``synthesize()`` of the Deepgram and Cartesia plugins, which flush the emitter
before ending it, that frame is 10 ms of silence the emitter adds after the server's audio.

Every call gets ``APIConnectOptions(max_retry=0, timeout=60)``: a test sees the first attempt, and a
shared CPU may take longer than the plugins' default 10 s to a first segment."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest

from server.settings import Settings
from tests.support.app import LoadedRuntime, build_app
from tests.support.inproc import metric
from tests.support.live import ThreadServer

if TYPE_CHECKING:
    from livekit.agents import tts

# LiveKit is imported where it is used: its import takes seconds, which every collection of the
# suite (the fast lane's too) would pay.

VOICE = "jm_kumo"  # of the voices on the registry, the one that reads English best
KEY = "livekit-key"
TEXT = "Hello there. This is a test."
LONG = "This reply is long. It goes on for a while. The user will stop it. Nobody hears this end."
NEXT = "Sure, go ahead."
PLUGINS = ["deepgram", "cartesia", "elevenlabs"]
#: The rate each plugin asks for by default (ElevenLabs: MP3 at 22050 Hz, decoded by the plugin).
DEFAULT_RATE = {"deepgram": 24000, "cartesia": 24000, "elevenlabs": 22050}
#: How far a reading may be from the 24 kHz PCM one: PCM to the sample (a millisecond), MP3 within
#: frames of 576 samples and the codec's delay.
LENGTH_TOLERANCE_S = {"deepgram": 0.001, "cartesia": 0.001, "elevenlabs": 0.12}
#: ``synthesize()`` of the Deepgram and Cartesia plugins: their emitter is flushed before it ends, so
#: it marks the end with a frame of 10 ms of silence of its own.
MADE_UP_S = {"deepgram": 0.01, "cartesia": 0.01, "elevenlabs": 0.0}


def make(plugin: str, url: str, *, key: str = KEY, voice: str = VOICE) -> tts.TTS:
    """The plugin as a LiveKit agent builds it, pointed at the server: URL, key and voice, nothing else."""
    from livekit.plugins import cartesia, deepgram, elevenlabs

    if plugin == "deepgram":
        return deepgram.TTS(base_url=f"{url}/v1/speak", api_key=key, model=voice)
    if plugin == "cartesia":
        return cartesia.TTS(base_url=url, api_key=key, voice=voice)
    return elevenlabs.TTS(base_url=f"{url}/v1", api_key=key, voice_id=voice)


@contextlib.asynccontextmanager
async def opened(plugin: str, url: str, **settings: str) -> AsyncIterator[tts.TTS]:
    """:func:`make`'s plugin, closed after use as an agent closes it."""
    p = make(plugin, url, **settings)
    try:
        yield p
    finally:
        await p.aclose()


@pytest.fixture(scope="module")
def server(onnx_synth, pipeline, voices) -> Iterator[ThreadServer]:
    # timed: the ONNX model with the duration output, so word times come from the model's durations
    app = build_app(LoadedRuntime(onnx_synth, timed=True), settings=Settings(api_key=KEY), pipeline=pipeline,
                    voices=voices)
    with ThreadServer(app) as srv:
        yield srv


@pytest.fixture(scope="module")
def reference_s(server) -> float:
    """Seconds of TEXT as 24 kHz PCM (Deepgram's REST route, raw linear16)."""
    r = httpx.post(f"{server.url}/v1/speak", params={"model": VOICE, "encoding": "linear16", "container": "none",
                                                     "sample_rate": 24000},
                   headers={"Authorization": f"Token {KEY}"}, json={"text": TEXT}, timeout=120)
    assert r.status_code == 200
    return len(r.content) / 2 / 24000


@dataclass
class Heard:
    """What a plugin's stream yielded: its frames, and the word times attached to them."""

    frames: list[Any] = field(default_factory=list)
    words: list[tuple[str, float, float]] = field(default_factory=list)

    @property
    def rate(self) -> int:
        return int(self.frames[0].sample_rate)

    @property
    def samples(self) -> np.ndarray:
        return np.concatenate([np.frombuffer(f.data, "<i2") for f in self.frames]).astype(np.float64) / 32768

    @property
    def seconds(self) -> float:
        return sum(f.samples_per_channel for f in self.frames) / self.rate if self.frames else 0.0


def options() -> Any:
    """Every call's: no retry (a test sees the first attempt), and 60 s for each message (the plugins'
    default is 10 s; a shared CPU may take longer to a first segment)."""
    from livekit.agents import APIConnectOptions

    return APIConnectOptions(max_retry=0, timeout=60)


async def heard(source: Any) -> Heard:
    from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT

    out = Heard()
    async for ev in source:
        out.frames.append(ev.frame)
        out.words += [(str(w), w.start_time, w.end_time) for w in ev.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]
    return out


def streamed(plugin: tts.TTS, text: str) -> Awaitable[Heard]:
    """``stream()`` fed as an LLM's reply is (word by word), then ended."""

    async def run() -> Heard:
        async with plugin.stream(conn_options=options()) as stream:
            for word in text.split(" "):
                stream.push_text(word + " ")
            stream.end_input()
            return await heard(stream)

    return run()


def synthesized(plugin: tts.TTS, text: str) -> Awaitable[Heard]:
    async def run() -> Heard:
        async with plugin.synthesize(text, conn_options=options()) as stream:
            return await heard(stream)

    return run()


def agent(body: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``body`` as a LiveKit job would: in an event loop with the plugins' HTTP session."""

    from livekit.agents import utils

    async def run() -> Any:
        async with utils.http_context.open():
            return await body()

    return asyncio.run(run())


def segments_synthesised(url: str) -> float:
    request = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return metric(r.read().decode(), "kokoro_segment_synthesis_seconds_count")


def assert_speech(out: Heard, plugin: str, reference_s: float, *, made_up_s: float = 0.0) -> None:
    """Speech at the plugin's rate, of the reference's length once ``made_up_s`` of silence the
    plugin appended is taken off; its last frame is 10 ms (the emitter's end-of-utterance frame)."""
    last = out.frames[-1]
    assert out.rate == DEFAULT_RATE[plugin] and last.samples_per_channel == out.rate // 100
    if made_up_s:
        assert not np.frombuffer(last.data, "<i2").any()  # silence, not the server's audio
    heard_s = out.seconds - made_up_s
    assert heard_s == pytest.approx(reference_s, abs=LENGTH_TOLERANCE_S[plugin]), (out.seconds, reference_s)
    assert np.sqrt(np.mean(out.samples ** 2)) > 0.01  # speech, not silence


def read_once(plugin: str, url: str, read: Callable[[Any, str], Awaitable[Heard]]) -> Heard:
    """What ``read`` (:func:`synthesized` or :func:`streamed`) hears of :data:`TEXT` through a
    plugin opened for this one reading."""
    async def body() -> Heard:
        async with opened(plugin, url) as p:
            return await read(p, TEXT)

    result: Heard = agent(body)
    return result


@pytest.mark.parametrize("plugin", PLUGINS)
def test_synthesize_is_speech_of_the_right_length_in_the_default_format(server, reference_s, plugin):
    out = read_once(plugin, server.url, synthesized)
    assert_speech(out, plugin, reference_s, made_up_s=MADE_UP_S[plugin])
    assert out.words == []  # none of the three asks for times over HTTP


@pytest.mark.parametrize("plugin", PLUGINS)
def test_stream_is_speech_of_the_right_length_with_the_word_times_each_plugin_reads(server, reference_s, plugin):
    out = read_once(plugin, server.url, streamed)
    assert_speech(out, plugin, reference_s)
    if plugin == "deepgram":
        assert out.words == []  # Deepgram's protocol has no word times
        return
    words = [w for w, _, _ in out.words]
    starts = [s for _, s, _ in out.words]
    ends = [e for _, _, e in out.words]
    assert "".join(words).split() == TEXT.split()  # every word, once, in order
    assert min(starts) >= 0 and max(ends) <= out.seconds
    if plugin == "cartesia":  # times from the context's first sample: in order, inside the audio
        assert starts == sorted(starts) and all(s <= e for s, e in zip(starts, ends, strict=True))
        return
    # ElevenLabs: one message a sentence, its times from 0 (as the service sends them), appended by
    # the plugin unshifted: the first sentence reads right, its last word ends where the next
    # message's times start (before it began), and the second sentence's words start over from 0.
    second = words.index("This ")
    assert starts[:second] == sorted(starts[:second]) and starts[second:] == sorted(starts[second:])
    assert ends[second - 1] < starts[second - 1]
    assert starts[second] < starts[second - 1]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_reply_closed_mid_way_holds_up_the_next_turn_by_one_segment_at_most(server, plugin):
    """The user barges in once the reply is heard: the agent closes its stream and speaks the next
    turn with the same TTS. Deepgram's and Cartesia's plugins drop the socket (the server aborts the
    reply); ElevenLabs' closes the reply's context after flushing every sentence, so the service
    speaks it to the end, on the same socket, while the next context opens: the server serves a
    socket's newest context first. Either way the next turn waits for the segment running at the
    interruption, not for the rest of the abandoned reply."""

    async def body() -> tuple[float, float, Heard]:
        async with opened(plugin, server.url) as p:
            stream = p.stream(conn_options=options())
            stream.push_text(LONG)
            stream.flush()  # the LLM's reply so far; more would follow
            async for _ in stream:  # the reply is heard, then the user barges in
                break
            at_interruption = segments_synthesised(server.url)
            await stream.aclose()
            following = await streamed(p, NEXT)
            return at_interruption, segments_synthesised(server.url), following

    at_interruption, after, following = agent(body)
    # synthesised from the interruption to the next turn's end: the segment running, then the turn's
    assert after - at_interruption <= 1 + 2, (at_interruption, after)
    assert 0.8 < following.seconds < 2.5  # the next turn's words, none of the abandoned reply's
    if plugin != "deepgram":
        assert "".join(w for w, _, _ in following.words).split() == NEXT.split()


async def failure(call: Awaitable[Heard]) -> Exception | Heard:
    try:
        return await call
    except Exception as e:
        return e


@pytest.mark.parametrize("plugin", PLUGINS)
def test_a_bad_voice_an_empty_text_and_a_wrong_key_raise_the_plugins_errors(server, plugin):
    from livekit.agents import APIError, APIStatusError

    cases = {"bad voice": {"voice": "nobody"}, "empty text": {}, "wrong key": {"key": "wrong"}}

    async def body() -> dict[tuple[str, str], Exception | Heard]:
        out: dict[tuple[str, str], Exception | Heard] = {}
        for case, settings in cases.items():
            text = "" if case == "empty text" else TEXT
            for call in (synthesized, streamed):
                async with opened(plugin, server.url, **settings) as p:
                    out[case, call.__name__] = await failure(call(p, text))
        return out

    results = agent(body)
    unknown = 400 if plugin == "deepgram" else 404  # Deepgram: "No such model/version combination found"
    for (case, call), status in [(("bad voice", "synthesized"), unknown), (("empty text", "synthesized"), 400),
                                 (("wrong key", "synthesized"), 401), (("wrong key", "streamed"), 401)]:
        error = results[case, call]
        assert isinstance(error, APIStatusError) and error.status_code == status, (case, call, error)
        assert not error.retryable
    for case in cases:  # synthesize(): only the HTTP status line reaches the error, not the body
        error = results[case, "synthesized"]
        assert isinstance(error, APIStatusError) and error.message in ("Bad Request", "Not Found", "Unauthorized")

    bad_voice = results["bad voice", "streamed"]
    if plugin == "cartesia":  # the error's done: true read first: a retryable "no audio", not the 404
        assert type(bad_voice) is APIError and bad_voice.retryable and "no audio frames" in bad_voice.message
    else:  # refused at the upgrade, with its status
        assert isinstance(bad_voice, APIStatusError) and bad_voice.status_code == unknown
        assert not bad_voice.retryable
    empty = results["empty text", "streamed"]
    assert isinstance(empty, Heard) and empty.frames == []  # the plugins send nothing, and raise nothing
