"""No silent failures: empty or whitespace-only text, text with nothing to pronounce, a
language the server lacks, text in a script the language cannot read, a runtime error — each is a
typed error on every route, never a 200 (or a ``synthesis_complete``) without speech.

The voice/language rule: a voice's language prefix (``jf_`` = Japanese) does *not* restrict the
request's ``lang`` — Kokoro voices are style vectors that read any phonemes (accent transfer is a
feature, and the offline default ``jm_kumo`` reads English); without a ``lang``, the text's script picks
the language (``backends.text.lang.resolve_lang``). What is refused is what would come out
as garbage: letters the language's G2P can only spell out ("Japanese letter, Japanese letter").
"""

from __future__ import annotations

import json

import pytest

from backends.text.g2p.frontends import check_script
from tests.support.app import fake_synth
from tests.support.inproc import WS, answer, audio_bytes, client

NOTHING = ["", " ", "\t\n  \r\n", "\x00", "\x00\x00\x00", "\u200b\u200b", "\ufeff", "...", "!?", "- - -", "\u2028"]
REFUSED = [
    # (text, lang, code)
    ("こんにちは", "en-us", "language_mismatch"),  # Japanese text read as English: "Japanese letter" x5
    ("漢字です。", "en-gb", "language_mismatch"),
    ("Привет, мир.", None, "language_mismatch"),  # no supported language reads Cyrillic
    ("नमस्ते", "fr-fr", "language_mismatch"),
    ("Hello.", "xx-bogus", "invalid_language"),
    ("Hello.", "EN-US", "invalid_language"),
]
ACCEPTED = [
    ("Hello there.", None, "jf_third"),  # a Japanese voice reading English: allowed, by design
    ("こんにちは。", "ja", "af_test"),  # an American voice reading Japanese: allowed
    ("こんにちは。", None, "af_test"),  # no lang: kana are Japanese, whatever the voice
    ("東京へ行きます。", None, "jf_third"),  # no lang: a Japanese voice reads Han text as Japanese
    ("漢字", "cmn", None),
    ("Tokyo is called 東京.", "ja", None),  # Latin letters are fine in Japanese text
    ("The angle α is small.", None, None),  # Greek letters are read by name
    ("Café, naïve, Straße.", None, None),
    ("🙂 Okay.", None, None),
]


@pytest.fixture(scope="module")
def c():
    with client(fake_synth(fail_on="Boom")) as c:
        yield c


def _ws(c, obj: dict) -> list[dict]:
    with c.websocket_connect(WS) as ws:
        ws.send_text(json.dumps(obj))
        return answer(ws)


@pytest.mark.parametrize("text", NOTHING)
def test_text_with_nothing_to_say_is_a_typed_error_everywhere(c, text):
    ws = _ws(c, {"text": text, "request_id": "e"})
    post = c.post("/invocations", json={"text": text})
    openai = c.post("/v1/audio/speech", json={"model": "kokoro", "input": text, "voice": "af_test"})
    assert [(f["type"], f["code"]) for f in ws] == [("error", "empty_text")]
    assert post.status_code == 400 and post.json()["error"]["code"] == "empty_text"
    assert openai.status_code == 400


@pytest.mark.parametrize(("text", "lang", "code"), REFUSED)
def test_text_the_language_cannot_read_is_a_typed_error_everywhere(c, text, lang, code):
    body = {"text": text, **({"lang": lang} if lang else {})}
    ws = _ws(c, {**body, "request_id": "m"})
    post = c.post("/invocations", json=body)
    openai = c.post("/v1/audio/speech", json={"model": "kokoro", "input": text, "voice": "af_test",
                                              **({"lang": lang} if lang else {})})
    assert [(f["type"], f["code"]) for f in ws] == [("error", code)]
    assert post.status_code == 400 and post.json()["error"]["code"] == code
    assert "lang" in post.json()["error"]["message"]  # says what to change
    assert openai.status_code == 400


@pytest.mark.parametrize(("text", "lang", "voice"), ACCEPTED)
def test_voice_language_combinations_that_read_fine_are_served(c, text, lang, voice):
    body = {"text": text, **({"lang": lang} if lang else {}), **({"voice": voice} if voice else {})}
    frames = _ws(c, body)
    assert frames[-1]["type"] == "synthesis_complete" and audio_bytes(frames) > 0
    assert c.post("/invocations", json={**body, "format": "pcm"}).content


def test_a_runtime_error_is_typed_on_every_route(c):
    ws = _ws(c, {"text": "Boom.", "request_id": "b"})
    post = c.post("/invocations", json={"text": "Boom."})
    buffered = c.post("/invocations", json={"text": "Boom.", "stream": False})
    openai = c.post("/v1/audio/speech", json={"model": "kokoro", "input": "Boom.", "voice": "af_test"})
    assert [(f["type"], f["code"]) for f in ws] == [("error", "backend_error")]
    for r in (post, buffered):
        assert r.status_code == 500 and r.json()["error"]["code"] == "backend_error"
    assert openai.status_code == 500 and openai.headers["content-type"].startswith("application/json")


def test_every_supported_language_reads_its_own_script():
    for text, lang in [("Hello", "en-us"), ("Hola", "es"), ("こんにちは", "ja"), ("你好", "cmn"), ("नमस्ते", "hi"),
                       ("Bonjour", "fr-fr"), ("Ciao", "it"), ("Olá", "pt-br"), ("Hello", "en-gb")]:
        check_script(text, lang)
