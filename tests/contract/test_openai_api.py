"""The OpenAI-compatible API, driven by the official ``openai`` package (only ``base_url`` changed)
against a real uvicorn server on loopback over the real ONNX runtime.

Word timings need a runtime that reports durations: they are checked through the real torch
runtime on the CPU, under both backends (sequential and concurrent).
"""

from __future__ import annotations

import base64
import io
import json
import math
import time
from typing import TYPE_CHECKING

import av
import httpx
import numpy as np
import pytest
import soundfile

from backends.api import SAMPLE_RATE
from server.settings import Settings
from tests.support.app import LoadedRuntime, build_app
from tests.support.live import ThreadServer

if TYPE_CHECKING:
    # The SDK is imported in the tests that use it: every worker collects this module, and most
    # run none of it.
    import openai

TEXT = "Hello there."
LONG = "The first sentence is here. A second one follows it. And a third closes."


# ---------------------------------------------------------------------------------------------
# servers
# ---------------------------------------------------------------------------------------------
SETTINGS = Settings(api_key=None, cors_origins="")
#: KOKORO_VOICE_ALIASES of the test server: an OpenAI name for a voice, and one for a blend.
ALIASES = {"nova": "jf_nezumi", "shimmer": "jm_kumo(2)+jf_alpha(1)"}


@pytest.fixture(scope="module")
def onnx_server(onnx_synth, pipeline, voices):
    """The project's app (which mounts the OpenAI routes) under uvicorn, on the real ONNX runtime."""
    app = build_app(LoadedRuntime(onnx_synth), settings=SETTINGS, pipeline=pipeline, voices=voices.with_aliases(ALIASES))
    with ThreadServer(app) as server:
        yield server


def openai_client(server) -> openai.OpenAI:
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def client(onnx_server):
    return openai_client(onnx_server)


def decode(data: bytes, fmt: str, rate: int = SAMPLE_RATE) -> tuple[int, np.ndarray]:
    if fmt == "pcm":
        return rate, np.frombuffer(data, "<i2").astype(np.float32) / 32768
    with av.open(io.BytesIO(data)) as c:
        out = np.concatenate([f.to_ndarray().reshape(-1).astype(np.float32) for f in c.decode(audio=0)])
        return c.streams.audio[0].codec_context.sample_rate, out


def speech(client, fmt="pcm", text=TEXT, voice="jm_kumo", extra_headers=None, **extra) -> bytes:
    return client.audio.speech.create(
        model="kokoro", voice=voice, input=text, response_format=fmt, extra_body=extra or None,
        extra_headers=extra_headers,
    ).content


@pytest.fixture(scope="module")
def reference_pcm(client) -> np.ndarray:
    return decode(speech(client), "pcm")[1]


@pytest.fixture(scope="module")
def spoken(client):
    """``speech(client, fmt, voice=voice)``, asked once for the tests that each check something else of
    the same answer (the ONNX runtime is deterministic: asking again gives the same bytes)."""
    answers: dict[tuple[str, str], bytes] = {}

    def get(fmt: str = "pcm", voice: str = "jm_kumo") -> bytes:
        if (fmt, voice) not in answers:
            answers[fmt, voice] = speech(client, fmt, voice=voice)
        return answers[fmt, voice]

    return get


# ---------------------------------------------------------------------------------------------
# speech in every format
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_speech_in_each_format_decodes_to_plausible_audio(spoken, reference_pcm, fmt):
    data = spoken(fmt)
    rate, audio = decode(data, fmt)
    assert rate == (48_000 if fmt == "opus" else SAMPLE_RATE)  # Opus decoders always give 48 kHz
    expected = len(reference_pcm) / SAMPLE_RATE
    assert 0.5 < expected < 4  # "Hello there." is about a second and a half of speech
    assert abs(len(audio) / rate - expected) < 0.12  # codec priming/padding only
    assert np.sqrt(np.mean(audio[: int(expected * rate)] ** 2)) > 0.01  # not silence


def test_content_types(onnx_server):
    body = {"model": "tts-1", "input": TEXT, "voice": "jm_kumo"}
    with httpx.Client(base_url=onnx_server.url, timeout=120) as http:
        r = http.post("/v1/audio/speech", json=body)  # OpenAI's default format: mp3
        assert r.status_code == 200 and r.headers["content-type"] == "audio/mpeg"
        r = http.post("/v1/audio/speech", json={**body, "response_format": "pcm"})
        assert r.headers["content-type"] == "audio/pcm; rate=24000; channels=1"  # little-endian: not L16
        r = http.post("/v1/audio/speech", json={**body, "response_format": "pcm", "sample_rate": 16000})
        assert r.headers["content-type"] == "audio/pcm; rate=16000; channels=1"
        metrics = http.get("/metrics").text
    assert 'kokoro_time_to_first_audio_seconds_count{route="openai"}' in metrics


def test_streaming_response_sends_first_audio_before_the_end(client):
    arrivals, parts = [], []
    with client.audio.speech.with_streaming_response.create(
        model="kokoro", voice="jm_kumo", input=LONG, response_format="wav"
    ) as response:
        assert response.headers["content-type"] == "audio/wav"
        for part in response.iter_bytes():
            arrivals.append(time.perf_counter())
            parts.append(part)
    data = b"".join(parts)
    assert len(parts) >= 2 and arrivals[0] < arrivals[-1]
    assert data[:4] == b"RIFF" and int.from_bytes(data[40:44], "little") == 0xFFFFFFFF  # streaming sizes
    rate, audio = decode(data, "wav")
    assert rate == SAMPLE_RATE and 3 < len(audio) / rate < 12  # three sentences


def test_sse_stream_format_carries_the_encoded_audio(onnx_server, reference_pcm):
    body = {
        "model": "kokoro",
        "input": TEXT,
        "voice": "jm_kumo",
        "response_format": "mp3",
        "stream_format": "sse",
    }
    with httpx.Client(base_url=onnx_server.url, timeout=120) as http:
        r = http.post("/v1/audio/speech", json=body)
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    mp3 = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    rate, audio = decode(mp3, "mp3")
    assert rate == SAMPLE_RATE and 0.5 < len(audio) / rate < 4
    # usage in OpenAI's shape: input characters, output seconds of audio (rounded up)
    seconds = math.ceil(len(reference_pcm) / SAMPLE_RATE)  # the same text and voice, as PCM
    usage = events[-1]["usage"]
    assert usage == {"input_tokens": len(TEXT), "output_tokens": seconds, "total_tokens": len(TEXT) + seconds}


# ---------------------------------------------------------------------------------------------
# models and voices
# ---------------------------------------------------------------------------------------------
def test_models_and_voices(client):
    ids = [m.id for m in client.models.list()]
    assert ids[0] == "kokoro" and {"tts-1", "tts-1-hd"} <= set(ids)
    assert client.models.retrieve("tts-1").id == "tts-1"
    listing = client.get("/audio/voices", cast_to=object)
    assert "jm_kumo" in listing["voices"] and listing["default"] in listing["voices"]
    assert listing["aliases"] == ALIASES and not set(ALIASES) & set(listing["voices"])


def test_openai_voice_names_without_an_alias_mean_the_default_voice(client, reference_pcm):
    # jm_kumo is the default of the offline voice set
    alloy = decode(speech(client, voice="alloy"), "pcm")[1]
    assert np.array_equal(alloy, reference_pcm)


def test_an_alias_speaks_with_its_voice(client, spoken, reference_pcm):
    """``KOKORO_VOICE_ALIASES=nova=jf_nezumi``: the same samples as asking for jf_nezumi (the ONNX
    runtime is deterministic), not the default voice's."""
    nova = decode(speech(client, voice="nova"), "pcm")[1]
    assert np.array_equal(nova, decode(speech(client, voice="jf_nezumi"), "pcm")[1])
    assert not (len(nova) == len(reference_pcm) and np.allclose(nova, reference_pcm, atol=1e-3))
    # an alias to a blend is that blend
    shimmer = decode(speech(client, voice="shimmer"), "pcm")[1]
    assert np.array_equal(shimmer, decode(spoken(voice="jm_kumo(2)+jf_alpha(1)"), "pcm")[1])


# ---------------------------------------------------------------------------------------------
# blending
# ---------------------------------------------------------------------------------------------
def test_blend_changes_the_voice(client, spoken, reference_pcm):
    blend = decode(spoken(voice="jm_kumo(2)+jf_alpha(1)"), "pcm")[1]
    n = min(len(blend), len(reference_pcm))
    assert n > SAMPLE_RATE // 2
    assert not np.allclose(blend[:n], reference_pcm[:n], atol=1e-3)
    # weights are normalised: 4:2 is the same blend as 2:1
    same = decode(speech(client, voice="jm_kumo(4)+jf_alpha(2)"), "pcm")[1]
    assert np.array_equal(same, blend)


@pytest.mark.parametrize(
    ("voice", "error", "code", "needle"),
    [
        ("jm_kumo(2", "BadRequestError", "invalid_voice", "invalid voice expression"),
        ("jm_kumo(2)++jf_alpha", "BadRequestError", "invalid_voice", "invalid voice expression"),
        ("jm_kumo(1)+nobody(1)", "BadRequestError", "unknown_voice", "nobody"),  # OpenAI: 400
        ("nobody", "BadRequestError", "unknown_voice", "nobody"),
    ],
)
def test_bad_voice_gives_clear_openai_error(client, voice, error, code, needle):
    import openai

    with pytest.raises(getattr(openai, error)) as info:
        speech(client, voice=voice)
    err = info.value.body
    assert err["code"] == code and err["param"] == "voice" and err["type"] == "invalid_request_error"
    assert needle in err["message"]


# ---------------------------------------------------------------------------------------------
# resampling
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("fmt", "rate"), [("pcm", 16000), ("wav", 44100), ("flac", 8000), ("mp3", 22050)])
def test_resampled_output_has_asked_rate_and_length(client, reference_pcm, fmt, rate):
    out_rate, audio = decode(speech(client, fmt, sample_rate=rate), fmt, rate)
    assert out_rate == rate
    expected = len(reference_pcm) * rate / SAMPLE_RATE
    if fmt == "mp3":
        assert expected - 10 <= len(audio) <= expected + 2304  # MP3 priming and frame padding
    else:
        assert abs(len(audio) - expected) <= 2


def test_bad_sample_rate(client):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        speech(client, sample_rate=11025)
    assert info.value.body["param"] == "sample_rate" and "22050" in info.value.body["message"]


# ---------------------------------------------------------------------------------------------
# errors in OpenAI's shape
# ---------------------------------------------------------------------------------------------
def test_request_errors(client, onnx_server):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        speech(client, fmt="ogg")
    assert info.value.body["param"] == "response_format"
    with pytest.raises(openai.NotFoundError) as info:
        client.audio.speech.create(model="whisper-1", voice="jm_kumo", input=TEXT)
    assert info.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as info:
        client.audio.speech.create(model="kokoro", voice="jm_kumo", input=TEXT, speed=4.5)
    assert info.value.body["param"] == "speed"
    with pytest.raises(openai.BadRequestError) as info:  # OpenAI answers over-long input with 400, not 413
        client.audio.speech.create(model="kokoro", voice="jm_kumo", input="a" * (SETTINGS.max_text_chars + 1))
    assert (info.value.body["param"], info.value.body["code"]) == ("input", "text_too_long")
    with pytest.raises(openai.BadRequestError) as info:
        client.audio.speech.create(model="kokoro", voice="jm_kumo", input="   ")
    assert info.value.body["param"] == "input"
    with httpx.Client(base_url=onnx_server.url) as http:
        r = http.post("/v1/audio/speech", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"


# ---------------------------------------------------------------------------------------------
# what OpenAI's clients take for granted: FLAC that soundfile reads, x-request-id, OpenAI's speeds
# ---------------------------------------------------------------------------------------------
def test_flac_reads_back_with_soundfile_at_the_right_length(spoken, reference_pcm):
    data = spoken("flac")
    audio, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    assert rate == SAMPLE_RATE and len(audio) == len(reference_pcm)  # lossless: every sample
    assert np.max(np.abs(audio - reference_pcm)) < 1e-4


def test_every_openai_answer_has_a_request_id(client):
    import openai

    seen = set()
    raw = client.audio.speech.with_raw_response.create(model="kokoro", voice="jm_kumo", input=TEXT,
                                                       response_format="pcm")
    seen.add(raw.headers["x-request-id"])
    with client.audio.speech.with_streaming_response.create(
        model="kokoro", voice="jm_kumo", input=TEXT, response_format="mp3", extra_body={"stream_format": "sse"}
    ) as sse:
        seen.add(sse.request_id)
    seen.add(client.models.with_raw_response.list().headers["x-request-id"])
    seen.add(client.models.retrieve("tts-1")._request_id)
    seen.add(client.get("/audio/voices", cast_to=httpx.Response).headers["x-request-id"])
    errors = [
        lambda: speech(client, voice="nobody"),  # 400 from the pipeline
        lambda: client.models.retrieve("whisper-1"),  # 404 from a GET route
        lambda: client.post("/audio/speech/timed", body={"model": "kokoro", "input": TEXT}, cast_to=object),  # 501
        lambda: client.get("/no-such-route", cast_to=object),  # 404 from the router
    ]
    for call in errors:
        with pytest.raises(openai.APIStatusError) as info:
            call()
        seen.add(info.value.request_id)
    assert None not in seen and len(seen) == 9  # one fresh id per answer
    assert all(rid.startswith("req_") for rid in seen)


def test_a_clients_own_request_id_is_echoed(client, onnx_server):
    import openai

    raw = client.audio.speech.with_raw_response.create(
        model="kokoro", voice="jm_kumo", input=TEXT, response_format="pcm", extra_headers={"X-Request-Id": "call-42"}
    )
    assert raw.headers["x-request-id"] == "call-42"
    with pytest.raises(openai.BadRequestError) as info:
        speech(client, voice="nobody", extra_headers={"X-Request-Id": "call-43"})
    assert info.value.request_id == "call-43"
    long_id = "x" * 300
    with httpx.Client(base_url=onnx_server.url, timeout=60) as http:
        r = http.get("/v1/models", headers={"X-Request-Id": long_id})
        assert r.headers["x-request-id"] == long_id[:128]  # bounded
        for raw in ("caf\u00e9 42".encode(), "caf\u00e9 42".encode("latin-1")):
            r = http.get("/v1/models", headers=[(b"X-Request-Id", raw)])
            assert dict(r.headers.raw)[b"x-request-id"] == raw  # as sent, UTF-8 or Latin-1


@pytest.mark.parametrize(("asked", "same_as"), [(0.25, 0.5), (4.0, 2.0)])
def test_openai_speed_range_gives_audio(client, reference_pcm, asked, same_as):
    """OpenAI's ends of the range give speech, as Kokoro's own ends do (clamped to 0.5–2.0, where
    Kokoro still sounds right: see server/openai/params.py)."""
    out = client.audio.speech.create(model="tts-1", voice="jm_kumo", input=TEXT, response_format="pcm", speed=asked)
    audio = decode(out.content, "pcm")[1]
    assert np.sqrt(np.mean(audio**2)) > 0.01  # speech, not silence
    assert (len(audio) > len(reference_pcm)) == (asked < 1)  # slower is longer, faster shorter
    same = client.audio.speech.create(model="tts-1", voice="jm_kumo", input=TEXT, response_format="pcm", speed=same_as)
    assert np.array_equal(audio, decode(same.content, "pcm")[1])


def test_word_timings_unsupported_without_durations(onnx_server):
    # LoadedRuntime (without timed=True) passes on only `synthesize`: no durations. (ONNX with its
    # timed model answers: tests/integration/test_onnx_durations.py.)
    body = {"model": "kokoro", "input": TEXT, "voice": "jm_kumo"}
    with httpx.Client(base_url=onnx_server.url, timeout=60) as http:
        r = http.post("/v1/audio/speech/timed", json=body)
    assert r.status_code == 501
    err = r.json()["error"]
    assert err["code"] == "unsupported" and "torch" in err["message"]


# ---------------------------------------------------------------------------------------------
# word timings through the real torch runtime (CPU), in both scheduling modes
# ---------------------------------------------------------------------------------------------
TIMED_TEXT = "Hello there, it costs 42 dollars."


def torch_app(mode, torch_synth, pipeline, voices):
    """The app over the run's torch runtime, which declares word timings."""
    return build_app(LoadedRuntime(torch_synth, timed=True), mode, settings=SETTINGS, pipeline=pipeline, voices=voices)


@pytest.mark.parametrize("mode", ["sequential", "concurrent"])
def test_word_timings_from_the_torch_runtime(mode, torch_synth, pipeline, voices):
    app = torch_app(mode, torch_synth, pipeline, voices)
    body = {"model": "kokoro", "input": TIMED_TEXT, "voice": "jm_kumo", "response_format": "wav", "sample_rate": 16000}
    with ThreadServer(app) as server, httpx.Client(base_url=server.url, timeout=120) as http:
        r = http.post("/v1/audio/speech/timed", json=body)
        assert r.status_code == 200, r.text
        faster = http.post("/v1/audio/speech/timed", json={**body, "speed": 2.0})
    result = r.json()
    rate, audio = decode(base64.b64decode(result["audio"]), "wav")
    assert rate == result["sample_rate"] == 16000
    duration = len(audio) / rate
    assert 1.0 < duration < 6.0  # one short sentence of speech
    assert result["duration"] == pytest.approx(duration, abs=0.01)
    words = result["words"]
    assert [w["word"] for w in words] == TIMED_TEXT.split()
    prev = 0.0
    for w in words:
        assert prev <= w["start"] <= w["end"] <= duration + 0.001, w
        prev = w["end"]
    assert all(w["end"] > w["start"] for w in words)  # every word here is spoken
    assert words[-1]["end"] > duration / 2  # the words span the speech, not a corner of it
    assert faster.status_code == 200 and faster.json()["words"][-1]["end"] < words[-1]["end"]
