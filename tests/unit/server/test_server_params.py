"""Decoding and validation of client messages (shared by the WebSocket and POST routes)."""

from __future__ import annotations

import pytest

from backends.api import EmptyText, InvalidJSON, InvalidRequest, TextTooLong
from server.pipeline.params import (
    decode_object,
    message_type,
    parse_http_options,
    parse_synthesis,
    request_id_of,
)


def test_text_and_binary_frames_decode_alike():
    assert decode_object('{"text": "hé"}') == decode_object('{"text": "hé"}'.encode()) == {"text": "hé"}


@pytest.mark.parametrize("data", [b"", b"\xc3", b"null", b"1e999999", b"[" * 100_000, b'{"a": Infinity}', "\ud800"])
def test_undecodable_messages_are_invalid_json(data):
    with pytest.raises(InvalidJSON):
        decode_object(data)


def test_defaults_and_generated_request_id():
    p = parse_synthesis({"text": "Hi."}, max_text_chars=10)
    assert (p.text, p.voice, p.speed, p.sample_rate, p.lang) == ("Hi.", None, 1.0, None, None)
    assert isinstance(p.request_id, str) and len(p.request_id) == 32


def test_client_fields_are_kept():
    p = parse_synthesis(
        {"text": "Hi.", "voice": "a(2)+b(1)", "speed": 2, "sample_rate": 16000.0, "request_id": 5,
         "request_timestamp": 1.5, "lang": "en-gb", "extra": {"ignored": True}},
        max_text_chars=10,
    )
    assert (p.voice, p.speed, p.sample_rate, p.request_id, p.request_timestamp, p.lang) == (
        "a(2)+b(1)", 2.0, 16000, 5, 1.5, "en-gb")


@pytest.mark.parametrize(
    ("obj", "error"),
    [
        ({}, InvalidRequest), ({"text": None}, InvalidRequest), ({"text": "\n\t "}, EmptyText),
        ({"text": "x" * 11}, TextTooLong), ({"text": "hi", "speed": 2.01}, InvalidRequest),
        ({"text": "hi", "speed": [1]}, InvalidRequest), ({"text": "hi", "voice": ""}, InvalidRequest),
        ({"text": "hi", "sample_rate": True}, InvalidRequest), ({"text": "hi", "request_id": "r" * 129}, InvalidRequest),
        ({"text": "hi", "lang": 7}, InvalidRequest),
    ],
)
def test_bad_fields_are_typed_errors(obj, error):
    with pytest.raises(error):
        parse_synthesis(obj, max_text_chars=10)


def test_message_types():
    assert message_type({}) == "synthesize"
    assert message_type({"type": "cancel"}) == "cancel"
    with pytest.raises(InvalidRequest):
        message_type({"type": ["close"]})


def test_request_id_of_ignores_unusable_ids():
    assert request_id_of({"request_id": "a"}) == "a"
    assert request_id_of({"request_id": 3}) == 3
    assert request_id_of({"request_id": True}) is None
    assert request_id_of({"request_id": {"x": 1}}) is None


def test_http_options_from_body_or_accept():
    assert parse_http_options({}, None) == ("wav", True)
    assert parse_http_options({"format": "MP3", "stream": False}, None) == ("mp3", False)
    assert parse_http_options({}, "audio/L16; rate=24000") == ("pcm", True)
    assert parse_http_options({"format": "wav"}, "audio/mpeg") == ("wav", True)
