"""End to end, offline, over real sockets: the agent app (``python -m agent serve --model scripted``) as
a subprocess, talking to the real server (``python -m server serve`` subprocess): with the ONNX runtime,
and, for the fast checks, with the fake runtime behind a tap that records the frames.

What a user notices: in ``bidi`` the first audio arrives while the reply is still being written; in
``batch`` only after it is complete; the audio is speech of plausible length; leaving early stops the
server's work.
"""

from __future__ import annotations

import array
import math
import time

import httpx
import pytest

from tests.agent_support.process import agent_process
from tests.agent_support.sse import iter_sse, pcm_of
from tests.agent_support.wire_tap import WireTap, fake_runtime_server, requests_total

pytestmark = pytest.mark.subprocess

# A short first sentence, then more text written slowly: the first sentence is spoken while the rest
# is still being generated. Kept short: real synthesis on a shared 2-core machine.
REPLY = "Hi. This sentence is written slowly on purpose, word by word."
TOKENS_PER_SECOND = 2  # 14 tokens: 7 s of writing, the first sentence ready after 1 s


def run_turn(url: str, payload: dict, *, stop_after_first_audio: bool = False) -> tuple[list[dict], dict]:
    """Events of one turn and when each kind first/last arrived (seconds since the request)."""
    events: list[dict] = []
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    t0 = time.monotonic()
    with httpx.Client(timeout=120) as client, client.stream("POST", f"{url}/invocations", json=payload) as resp:
        assert resp.status_code == 200
        for arrived, event in iter_sse(resp):
            events.append(event)
            first.setdefault(event["type"], arrived - t0)
            last[event["type"]] = arrived - t0
            if stop_after_first_audio and event["type"] == "audio_chunk":
                break
    return events, {"first": first, "last": last}


def speech_checks(events: list[dict], text: str) -> float:
    pcm = pcm_of(events)
    assert len(pcm) % 2 == 0
    seconds = len(pcm) / 2 / 24_000
    # Kokoro speaks roughly 10-25 characters a second at speed 1.
    assert len(text) / 30 < seconds < len(text) / 6, seconds
    samples = array.array("h", pcm)
    rms = math.sqrt(sum(s * s for s in samples[::7]) / max(1, len(samples[::7])))
    assert rms > 300, f"audio is (nearly) silent: rms={rms:.0f}"
    return seconds


@pytest.fixture(scope="module")
def real_tts(onnx_server):
    """The suite's shared real-model server (``onnx_server``)."""
    return onnx_server.url


@pytest.fixture(scope="module")
def agent_on_real_tts(real_tts):
    proc = agent_process(real_tts, tokens_per_second=TOKENS_PER_SECOND, reply=REPLY,
                         extra=["--voice", "jm_kumo"]).wait_ready()
    yield proc.url
    proc.stop()


@pytest.mark.slow
@pytest.mark.timeout(300)  # the agent's start and a real-model reply
def test_bidi_first_audio_arrives_before_the_reply_is_written(agent_on_real_tts):
    events, at = run_turn(agent_on_real_tts, {"prompt": "Say something", "mode": "bidi"})
    kinds = [e["type"] for e in events]
    assert "error" not in kinds, [e for e in events if e["type"] == "error"]
    assert at["first"]["audio_chunk"] < at["last"]["text_delta"]
    assert kinds.index("audio_chunk") < max(i for i, k in enumerate(kinds) if k == "text_delta")
    assert events[-1]["type"] == "agent_end" and events[-1]["text"] == REPLY
    seconds = speech_checks(events, REPLY)
    print(f"\nbidi: first audio {at['first']['audio_chunk'] * 1000:.0f} ms, last text "
          f"{at['last']['text_delta'] * 1000:.0f} ms, audio {seconds:.2f} s, agent {events[-1]}")


@pytest.mark.slow
@pytest.mark.timeout(300)  # a real-model reply
def test_batch_first_audio_arrives_after_the_reply_is_written(agent_on_real_tts):
    events, at = run_turn(agent_on_real_tts, {"prompt": "Say something", "mode": "batch"})
    kinds = [e["type"] for e in events]
    assert "error" not in kinds, [e for e in events if e["type"] == "error"]
    assert at["first"]["audio_chunk"] > at["last"]["text_delta"]
    assert kinds.index("audio_chunk") > max(i for i, k in enumerate(kinds) if k == "text_delta")
    seconds = speech_checks(events, REPLY)
    print(f"\nbatch: first audio {at['first']['audio_chunk'] * 1000:.0f} ms, last text "
          f"{at['last']['text_delta'] * 1000:.0f} ms, audio {seconds:.2f} s")


# ------------------------------------------------------------------------------------------------
# Against the fake runtime (0.3 s a segment): fast, and the tap records what the agent sent.
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fake_runtime(tmp_path_factory):
    with fake_runtime_server(tmp_path_factory.mktemp("fake"), segment_s=0.3) as srv:
        yield srv


@pytest.fixture
def fake_tts(fake_runtime):
    with WireTap(fake_runtime.ws_url) as tap:
        tap.metrics_url = fake_runtime.url
        yield tap


def test_streams_over_a_real_connection_in_bidi(fake_tts):
    proc = agent_process(fake_tts.url, tokens_per_second=6, reply=REPLY).wait_ready()
    try:
        _, at = run_turn(proc.url, {"prompt": "hi", "mode": "bidi"})
    finally:
        proc.stop()
    assert at["first"]["audio_chunk"] < at["last"]["text_delta"]
    assert [m["text"] for _, m in fake_tts.received if m.get("type") == "synthesize"] == [
        "Hi.", REPLY.split(". ", 1)[1]]


def test_leaving_early_cancels_the_servers_work(fake_tts):
    long_reply = " ".join(f"This is sentence number {i} of a long answer." for i in range(1, 13))
    cancelled_before = requests_total(fake_tts.metrics_url, "499")
    proc = agent_process(fake_tts.url, tokens_per_second=200, reply=long_reply).wait_ready()
    try:
        events, _ = run_turn(proc.url, {"prompt": "hi"}, stop_after_first_audio=True)
        assert events[-1]["type"] == "audio_chunk"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and {"type": "cancel"} not in [m for _, m in fake_tts.received]:
            time.sleep(0.05)
    finally:
        proc.stop()
    assert {"type": "cancel"} in [m for _, m in fake_tts.received]
    completed = [e for e in fake_tts.log if e[0] == "complete"]
    assert len(completed) < 12  # the rest was dropped, not synthesised
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and requests_total(fake_tts.metrics_url, "499") == cancelled_before:
        time.sleep(0.05)
    assert requests_total(fake_tts.metrics_url, "499") > cancelled_before  # counted as cancelled


EARLY = "When you ask a voice assistant a question, the silence is what you notice. Then it answers."


@pytest.mark.parametrize(("flags", "chunks"), [
    ([], ["When you ask a voice assistant a question,", "the silence is what you notice.", "Then it answers."]),
    (["--first-clause-words", "0"], ["When you ask a voice assistant a question, the silence is what you notice.",
                                     "Then it answers."]),
])
def test_the_first_clause_goes_to_the_server_as_soon_as_it_is_written(fake_tts, flags, chunks):
    """On by default: the reply's first clause (at least six words and a comma) is sent before the
    first sentence is complete; ``--first-clause-words 0`` waits for the full sentence."""
    proc = agent_process(fake_tts.url, tokens_per_second=40, reply=EARLY, extra=flags).wait_ready()
    try:
        events, _ = run_turn(proc.url, {"prompt": "hi", "mode": "bidi"})
    finally:
        proc.stop()
    assert events[-1]["type"] == "agent_end"
    assert [m["text"] for _, m in fake_tts.received if m.get("type") == "synthesize"] == chunks
