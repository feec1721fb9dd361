"""server.openai.params: what a speech request may carry, and the errors it gets (OpenAI's statuses)."""

from __future__ import annotations

import pytest

from backends.api import KokoroError, TextTooLong, UnknownVoice
from server.openai.params import APIError, parse_speech
from server.pipeline.http import BodyTooLarge

MODELS = {"kokoro", "tts-1"}
LOADED = {"jm_kumo", "jf_alpha", "alloy"}  # "alloy": an alias the server was given


def parse(**body):
    return parse_speech({"model": "kokoro", "input": "Hi.", **body}, model_ids=MODELS, voices=LOADED)


def error(**body) -> APIError:
    with pytest.raises(APIError) as info:
        parse_speech(body, model_ids=MODELS, voices=LOADED)
    return info.value


def test_defaults_follow_openai():
    p = parse()
    assert (p.format, p.speed, p.sample_rate, p.voice, p.stream_format) == ("mp3", 1.0, 24000, None, "audio")


def test_voices():
    assert parse(voice="jm_kumo(2)+jf_alpha(1)").voice == "jm_kumo(2)+jf_alpha(1)"  # the backend resolves it
    assert parse(voice={"id": "jf_alpha"}).voice == "jf_alpha"
    assert parse(voice="nova").voice is None  # OpenAI's names without an alias mean the default voice
    assert parse(voice="alloy").voice == "alloy"  # ... and with one, the alias (the voice store resolves it)
    assert error(model="kokoro", input="x", voice=3).param == "voice"


@pytest.mark.parametrize(
    ("body", "param", "status"),
    [
        ({"input": "x"}, "model", 400),
        ({"model": "whisper-1", "input": "x"}, "model", 404),
        ({"model": "kokoro"}, "input", 400),
        ({"model": "kokoro", "input": ""}, "input", 400),
        ({"model": "kokoro", "input": "x", "speed": 0.2}, "speed", 400),
        ({"model": "kokoro", "input": "x", "speed": 4.5}, "speed", 400),
        ({"model": "kokoro", "input": "x", "speed": True}, "speed", 400),
        ({"model": "kokoro", "input": "x", "speed": "1"}, "speed", 400),
        ({"model": "kokoro", "input": "x", "response_format": "ogg"}, "response_format", 400),
        ({"model": "kokoro", "input": "x", "sample_rate": "16000"}, "sample_rate", 400),
        ({"model": "kokoro", "input": "x", "sample_rate": 12345}, "sample_rate", 400),
        ({"model": "kokoro", "input": "x", "lang": 5}, "lang", 400),
        ({"model": "kokoro", "input": "x", "stream_format": "ws"}, "stream_format", 400),
    ],
)
def test_errors_name_the_parameter(body, param, status):
    e = error(**body)
    assert (e.param, e.status, e.type) == (param, status, "invalid_request_error")
    err = e.response().body
    assert b'"error"' in err and b'"message"' in err and b'"code"' in err


def test_body_must_be_an_object():
    with pytest.raises(APIError) as info:
        parse_speech(["x"], model_ids=MODELS, voices=LOADED)
    assert info.value.code == "invalid_json"


def test_extensions():
    p = parse(sample_rate=16000, lang="en-gb", speed=1.5, response_format="FLAC", stream_format="sse")
    assert (p.sample_rate, p.lang, p.speed, p.format, p.stream_format) == (16000, "en-gb", 1.5, "flac", "sse")


@pytest.mark.parametrize(("asked", "synthesised"), [(0.25, 0.5), (0.4, 0.5), (1.0, 1.0), (2.5, 2.0), (4.0, 2.0)])
def test_openai_speeds_are_accepted_and_clamped_to_kokoros_range(asked, synthesised):
    assert parse(speed=asked).speed == synthesised


@pytest.mark.parametrize(
    ("error", "status", "param"),
    [
        (UnknownVoice("unknown voice 'x'"), 400, "voice"),  # OpenAI's status; /invocations keeps 404
        (TextTooLong("text has 9000 characters"), 400, "input"),  # /invocations keeps 413
        (BodyTooLarge("request body is over the 65536-byte limit"), 413, None),  # 413 on every route
        (KokoroError("boom"), 500, None),
    ],
)
def test_backend_errors_get_openais_statuses(error, status, param):
    e = APIError.of(error)
    assert (e.status, e.param, e.code) == (status, param, error.code)
