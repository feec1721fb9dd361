"""The phonemizer trap: kokoro-onnx needs `phonemizer`, misaki wants `phonemizer-fork`; both install
the module `phonemizer` and the last one wins silently. After a full install G2P must still work."""

from __future__ import annotations

import importlib.metadata as metadata

import pytest


def test_phonemizer_fork_is_not_installed():
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.version("phonemizer-fork")
    assert metadata.version("phonemizer") == "3.4.0"


def test_g2p_works_after_a_full_install(g2p):
    assert g2p.phonemize("Hello world.", "en-us") == "həlˈoʊ wˈɜːld."


def test_torch_is_the_pinned_safe_build_when_installed():
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        pytest.fail("make install installs torch==2.13.0; it is missing")
    major, minor = (int(x) for x in version.split("+")[0].split(".")[:2])
    assert (major, minor) >= (2, 10), f"torch {version} is affected by PYSEC-2026-2286"
