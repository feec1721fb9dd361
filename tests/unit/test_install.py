"""The phonemizer trap: kokoro-onnx needs `phonemizer`, misaki wants `phonemizer-fork`; both install
the module `phonemizer` and the last one wins silently. After a full install G2P must still work —
espeak-ng, misaki's English with its espeak-ng fallback on the pinned phonemizer, and the front
ends of the other languages — with nothing fetched at run time."""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util

import pytest


def test_phonemizer_fork_is_not_installed():
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.version("phonemizer-fork")
    assert metadata.version("phonemizer") == "3.4.0"


def test_g2p_works_after_a_full_install(g2p):
    assert g2p.phonemize("Hello world.", "en-us") == "həlˈoʊ wˈɜːld."


def test_misaki_english_works_offline_with_its_espeak_fallback(monkeypatch):
    """misaki would download spaCy's model when ``en_core_web_sm`` is not installed under that name;
    it comes from the registry's repack and is never fetched."""
    import spacy.cli

    from backends.text.g2p.misaki import MisakiEnglish

    def no_download(*args, **kwargs):
        raise AssertionError(f"spaCy tried to download {args}")

    monkeypatch.setattr(spacy.cli, "download", no_download)
    misaki = MisakiEnglish()
    assert misaki("Hello world.") == "həlˈO wˈɜɹld."  # misaki's phone set, not espeak-ng's
    assert misaki("Zyxqwerty.").strip(".")  # not in misaki's lexicons: espeak-ng, through phonemizer 3.4.0


def test_japanese_readings_need_no_sudachi_dictionary():
    from backends.text.g2p.ja import JapaneseG2P

    assert importlib.util.find_spec("sudachidict_core") is None  # pyopenjtalk-plus is installed --no-deps
    assert JapaneseG2P()("東京へ行きます。") == "toːkʲoː e ikʲimasɨ."


def test_torch_is_the_pinned_safe_build_when_installed():
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        pytest.fail("make install installs torch==2.13.0; it is missing")
    major, minor = (int(x) for x in version.split("+")[0].split(".")[:2])
    assert (major, minor) >= (2, 10), f"torch {version} is affected by PYSEC-2026-2286"
