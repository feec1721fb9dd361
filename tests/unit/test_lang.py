"""The language of a request: explicit ``lang``, else the voice's language when the text is in its
script, else the text's script — one rule (``backends.text.lang.resolve_lang``) for every route."""

from __future__ import annotations

import pytest

from backends.api import InvalidRequest
from backends.text.lang import canonical_lang, resolve_lang, voice_language

CASES = [
    # (text, lang, voice, default, expected)
    ("Hello there.", None, "jm_kumo", "en-us", "en-us"),  # a Japanese voice still reads English as English
    ("東京駅から新幹線で大阪へ行きます。", None, "jm_kumo", "en-us", "ja"),
    ("こんにちは", None, "af_heart", "en-us", "ja"),  # kana are Japanese whatever the voice
    ("こんにちは", None, "zf_xiaobei", "en-us", "ja"),
    ("你好世界", None, "zf_xiaobei", "en-us", "cmn"),
    ("東京", None, "jf_alpha", "en-us", "ja"),  # Han only: the voice's CJK language
    ("東京", None, "zf_xiaobei", "en-us", "cmn"),
    ("東京", None, "af_heart", "en-us", "cmn"),  # Han only, no CJK voice: Mandarin
    ("Tokyo は大きい", None, "af_heart", "en-us", "ja"),  # mixed Latin and kana: Japanese
    ("नमस्ते", None, "af_heart", "en-us", "hi"),
    ("Hola, ¿qué tal?", None, "ef_dora", "en-us", "es"),  # a Spanish voice reads Latin text as Spanish
    ("Hola, ¿qué tal?", None, "jm_kumo", "en-us", "en-us"),  # a Japanese voice: the default
    ("Bonjour.", None, "jm_kumo", "fr-fr", "fr-fr"),
    ("Hello.", None, "bf_emma", "en-us", "en-gb"),
    ("Hello.", None, "my_voice", "en-us", "en-us"),  # a name that says no language
    ("1234", None, "jm_kumo", "en-us", "en-us"),  # no letters: the default
    ("東京", "ja", "af_heart", "en-us", "ja"),  # explicit lang wins
    ("Hello.", "en", "jm_kumo", "en-us", "en-us"),  # short forms
    ("你好", "zh", None, "en-us", "cmn"),
    ("Hello.", "es", "jm_kumo", "en-us", "es"),
]


@pytest.mark.parametrize(("text", "lang", "voice", "default", "expected"), CASES)
def test_the_request_language_follows_one_rule(text, lang, voice, default, expected):
    assert resolve_lang(text, lang, voice_language(voice), default) == expected


def test_voice_names_say_their_language():
    assert [voice_language(v) for v in ("af_heart", "bm_george", "jf_alpha", "zm_yunxi", "pf_dora", "hf_alpha")] == [
        "en-us", "en-gb", "ja", "cmn", "pt-br", "hi"]
    assert voice_language("jf_alpha(2)+af_heart(1)") == "ja"  # a blend: its first part
    assert voice_language("nova") is None and voice_language(None) is None


def test_an_unknown_language_is_a_typed_error():
    with pytest.raises(InvalidRequest) as e:
        canonical_lang("xx")
    assert e.value.code == "invalid_language" and "en-us" in e.value.message


def test_the_voice_store_lists_each_voice_language():
    import numpy as np

    from backends.assets.voices import VoiceStore

    pack = np.zeros((510, 1, 256), np.float32)
    store = VoiceStore({"jf_alpha": pack, "af_heart": pack, "custom": pack}, "af_heart", {"nova": "jf_alpha"})
    assert store.languages() == {"af_heart": "en-us", "custom": None, "jf_alpha": "ja"}
    assert store.language("nova") == "ja"  # an alias speaks its target's language


@pytest.mark.parametrize(("text", "lang", "first"), [
    ("新しい駅ができたので、私たちは毎朝その駅から電車に乗って会社へ行きます。", "ja", "新しい駅ができたので、"),
    ("今天天气很好，我们一起去公园散步吧。", "cmn", "今天天气很好，"),
])
def test_japanese_and_mandarin_first_segments_are_cut_at_their_clause_marks(pipeline, text, lang, first):
    segments = pipeline.plan(text, voice="jf_alpha", lang=lang)
    assert segments[0].text == first and len(segments) == 2
    assert "".join(s.text for s in segments).replace(" ", "") == text
