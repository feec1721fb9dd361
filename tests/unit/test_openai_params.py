"""server/openai_api.parse_speech: what a speech request may carry, and the errors it gets."""

from __future__ import annotations

import pytest

from server.openai_api import APIError, parse_speech

MODELS = {"kokoro", "tts-1"}
LOADED = {"jm_kumo", "jf_alpha"}


def parse(**body):
    return parse_speech({"model": "kokoro", "input": "Hi.", **body}, model_ids=MODELS, loaded=LOADED)


def error(**body) -> APIError:
    with pytest.raises(APIError) as info:
        parse_speech(body, model_ids=MODELS, loaded=LOADED)
    return info.value


def test_defaults_follow_openai():
    p = parse()
    assert (p.format, p.speed, p.sample_rate, p.voice, p.stream_format) == ("mp3", 1.0, 24000, None, "audio")


def test_voices():
    assert parse(voice="jm_kumo(2)+jf_alpha(1)").voice == "jm_kumo(2)+jf_alpha(1)"  # the backend resolves it
    assert parse(voice={"id": "jf_alpha"}).voice == "jf_alpha"
    assert parse(voice="nova").voice is None  # OpenAI's names mean the default voice
    assert error(model="kokoro", input="x", voice=3).param == "voice"


@pytest.mark.parametrize(
    ("body", "param", "status"),
    [
        ({"input": "x"}, "model", 400),
        ({"model": "whisper-1", "input": "x"}, "model", 404),
        ({"model": "kokoro"}, "input", 400),
        ({"model": "kokoro", "input": ""}, "input", 400),
        ({"model": "kokoro", "input": "x", "speed": 0.25}, "speed", 400),
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
        parse_speech(["x"], model_ids=MODELS, loaded=LOADED)
    assert info.value.code == "invalid_json"


def test_extensions():
    p = parse(sample_rate=16000, lang="en-gb", speed=1.5, response_format="FLAC", stream_format="sse")
    assert (p.sample_rate, p.lang, p.speed, p.format, p.stream_format) == (16000, "en-gb", 1.5, "flac", "sse")
