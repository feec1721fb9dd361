"""The official Deepgram SDK (``deepgram-sdk``), unchanged and configured only by URL, key and model,
against the real server on the real ONNX runtime: ``speak.v1.audio.generate`` (REST, with
Deepgram's default format, MP3) and ``speak.v1.connect`` (the WebSocket, telephony μ-law at 8 kHz)
give audio that decodes to the length of the same words as 24 kHz PCM; an unknown model, an
empty text and a wrong key raise the SDK's own error classes. The Cartesia and ElevenLabs HTTP
routes answer their formats as the same speech too (their SDKs are not installed here: the
requests are the ones the SDKs send, byte for byte in the fields that matter)."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator

import av
import httpx
import numpy as np
import pytest

from server.settings import Settings
from tests.support.app import LoadedRuntime, build_app
from tests.support.live import ThreadServer

VOICE = "jm_kumo"
#: Two sentences, so two segments: the audio and the word times must run on from one to the next.
TEXT = "Hello there. This is a test."
KEY = "sekret"


@pytest.fixture(scope="module")
def server(onnx_synth, pipeline, voices) -> Iterator[ThreadServer]:
    app = build_app(LoadedRuntime(onnx_synth), settings=Settings(api_key=KEY), pipeline=pipeline, voices=voices)
    with ThreadServer(app) as srv:
        yield srv


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """Any container/codec PyAV reads (MP3, WAV) -> float samples and their rate."""
    with av.open(io.BytesIO(data)) as f:
        frames = [fr for fr in f.decode(audio=0)]
    rate = frames[0].sample_rate
    return np.concatenate([fr.to_ndarray().reshape(-1) for fr in frames]).astype(np.float64), rate


def g711(data: bytes, law: str, rate: int) -> np.ndarray:
    ctx = av.CodecContext.create("pcm_mulaw" if law == "mulaw" else "pcm_alaw", "r")
    ctx.sample_rate = rate
    ctx.layout = "mono"
    return np.concatenate([fr.to_ndarray().reshape(-1) for fr in ctx.decode(av.Packet(data))]).astype(np.float64)


@pytest.fixture(scope="module")
def reference(server) -> np.ndarray:
    """The same words as raw 24 kHz PCM (REST linear16, no container)."""
    r = httpx.post(f"{server.url}/v1/speak", params={"model": VOICE, "encoding": "linear16", "container": "none",
                                                     "sample_rate": 24000},
                   headers={"Authorization": f"Token {KEY}"}, json={"text": TEXT}, timeout=120)
    assert r.status_code == 200 and r.headers["content-type"].startswith("audio/pcm")
    return np.frombuffer(r.content, "<i2").astype(np.float64)


def seconds(samples: np.ndarray, rate: int) -> float:
    return len(samples) / rate


def deepgram(server):
    from deepgram import DeepgramClient
    from deepgram.environment import DeepgramClientEnvironment

    ws = server.url.replace("http://", "ws://")
    env = DeepgramClientEnvironment(base=server.url, production=ws, agent=ws, agent_rest=server.url)
    return DeepgramClient(api_key=KEY, environment=env)


def test_deepgram_sdk_rest_default_format_is_mp3_of_the_right_length(server, reference):
    audio = b"".join(deepgram(server).speak.v1.audio.generate(text=TEXT, model=VOICE))
    samples, rate = decode(audio)
    assert audio[:2] in (b"\xff\xf3", b"\xff\xf2", b"\xff\xe3")  # MPEG-2 layer III frames (22.05 kHz)
    assert rate == 22050  # Deepgram's REST default: mp3 at 22050 Hz
    assert seconds(samples, rate) == pytest.approx(seconds(reference, 24000), abs=0.12)
    assert np.sqrt(np.mean(samples ** 2)) > 0.01  # speech, not silence


@pytest.mark.parametrize("law", ["mulaw", "alaw"])
def test_deepgram_sdk_rest_telephony_is_g711_at_8khz(server, reference, law):
    audio = b"".join(deepgram(server).speak.v1.audio.generate(
        text=TEXT, model=VOICE, encoding=law, container="none", sample_rate=8000))
    samples = g711(audio, law, 8000)
    assert len(audio) == len(samples)  # one byte per sample
    assert seconds(samples, 8000) == pytest.approx(seconds(reference, 24000), abs=0.05)
    assert np.sqrt(np.mean(samples ** 2)) > 300  # speech, in 16-bit units


def test_deepgram_sdk_websocket_mulaw_8khz(server, reference):
    from deepgram.speak.v1.types import SpeakV1Flush, SpeakV1Text

    chunks, messages = [], []
    with deepgram(server).speak.v1.connect(model=VOICE, encoding="mulaw", sample_rate=8000) as socket:
        socket.send_text(SpeakV1Text(text=TEXT))
        socket.send_flush(SpeakV1Flush(type="Flush"))
        for message in socket:
            if isinstance(message, bytes):
                chunks.append(message)
                continue
            messages.append(message)
            if getattr(message, "type", None) == "Flushed":
                break
    samples = g711(b"".join(chunks), "mulaw", 8000)
    assert seconds(samples, 8000) == pytest.approx(seconds(reference, 24000), abs=0.05)


def test_deepgram_sdk_errors_are_its_own_classes(server):
    from deepgram.core.api_error import ApiError
    from deepgram.errors.bad_request_error import BadRequestError

    dg = deepgram(server)
    with pytest.raises(BadRequestError) as unknown:
        b"".join(dg.speak.v1.audio.generate(text=TEXT, model="aura-2-nobody-en"))
    assert "No such model/version combination found" in json.dumps(unknown.value.body)
    with pytest.raises(BadRequestError) as empty:
        b"".join(dg.speak.v1.audio.generate(text=" ", model=VOICE))
    assert "Input text contains no characters" in json.dumps(empty.value.body)
    from deepgram import DeepgramClient

    wrong = DeepgramClient(api_key="wrong", environment=dg._client_wrapper.get_environment())
    with pytest.raises(ApiError) as refused:
        b"".join(wrong.speak.v1.audio.generate(text=TEXT, model=VOICE))
    assert refused.value.status_code == 401


def test_cartesia_bytes_and_sse_as_the_sdk_asks(server, reference):
    headers = {"Authorization": f"Bearer {KEY}", "Cartesia-Version": "2026-08-14"}
    body = {"model_id": "sonic-3", "transcript": TEXT, "voice": {"mode": "id", "id": VOICE},
            "output_format": {"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000}}
    r = httpx.post(f"{server.url}/tts/bytes", headers={**headers, "Accept": "audio/wav"}, json=body, timeout=120)
    assert r.status_code == 200
    assert seconds(g711(r.content, "mulaw", 8000), 8000) == pytest.approx(seconds(reference, 24000), abs=0.05)

    sse = {**body, "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
           "add_timestamps": True}
    r = httpx.post(f"{server.url}/tts/sse", headers={**headers, "Accept": "text/event-stream"}, json=sse, timeout=120)
    events = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
    audio = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "chunk")
    starts = [s for e in events if e["type"] == "timestamps" for s in e["word_timestamps"]["start"]]
    ends = [s for e in events if e["type"] == "timestamps" for s in e["word_timestamps"]["end"]]
    words = [w for e in events if e["type"] == "timestamps" for w in e["word_timestamps"]["words"]]
    total = len(audio) / 2 / 24000
    assert events[-1]["type"] == "done" and total == pytest.approx(seconds(reference, 24000), abs=0.01)
    assert " ".join(words).split() == TEXT.split()
    assert starts == sorted(starts) and all(a <= b for a, b in zip(starts, ends, strict=True)) and ends[-1] <= total
    assert starts[-1] > total / 2  # times run from the request's start, not each segment's

    bad = httpx.post(f"{server.url}/tts/bytes", headers=headers, json={**body, "voice": {"id": "nobody"}})
    assert bad.status_code == 404 and bad.headers["x-should-retry"] == "false" and bad.json()["message"]


def test_elevenlabs_routes_as_the_sdk_and_livekit_ask(server, reference):
    headers = {"xi-api-key": KEY}
    base = f"{server.url}/v1/text-to-speech/{VOICE}"
    body = {"text": TEXT, "model_id": "eleven_turbo_v2_5", "voice_settings": None, "apply_text_normalization": "auto"}
    r = httpx.post(f"{base}/stream", params={"output_format": "mp3_22050_32", "enable_logging": "true"},
                   headers=headers, json=body, timeout=120)  # LiveKit's synthesize(), its default format
    assert r.status_code == 200 and r.headers["content-type"].startswith("audio/")
    samples, rate = decode(r.content)
    assert rate == 22050 and seconds(samples, rate) == pytest.approx(seconds(reference, 24000), abs=0.12)

    r = httpx.post(f"{base}/stream/with-timestamps", params={"output_format": "pcm_24000"}, headers=headers,
                   json={"text": TEXT}, timeout=120)
    lines = [json.loads(line) for line in r.text.splitlines() if line.strip()]
    audio = b"".join(base64.b64decode(x["audio_base64"]) for x in lines)
    starts = [s for x in lines for s in x["alignment"]["character_start_times_seconds"]]
    ends = [s for x in lines for s in x["alignment"]["character_end_times_seconds"]]
    chars = "".join(c for x in lines for c in x["alignment"]["characters"])
    total = len(audio) / 2 / 24000
    assert chars.split() == TEXT.split() and starts == sorted(starts) and max(ends) == pytest.approx(total, abs=0.002)

    bad = httpx.post(f"{server.url}/v1/text-to-speech/nobody", headers=headers, json=body)
    assert bad.status_code == 404 and bad.json()["detail"]["status"] == "voice_not_found"
    assert httpx.post(base, headers={"xi-api-key": "wrong"}, json=body).status_code == 401
    assert httpx.post(base, headers=headers, json={"text": ""}).status_code == 400
