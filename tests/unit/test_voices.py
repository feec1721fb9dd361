"""Voice listing, defaults, blending and errors."""

from __future__ import annotations

import numpy as np
import pytest

from backends.base import InvalidRequest, UnknownVoice
from backends.voices import VoiceStore, load_voice_packs, parse_blend

OFFLINE = ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]


def test_offline_voices_and_default(voices):
    assert voices.names() == OFFLINE
    assert voices.default == "jm_kumo"  # no af_heart offline


def test_af_heart_is_default_when_the_official_pack_is_present():
    packs = {n: np.zeros((510, 1, 256), np.float32) for n in ("af_heart", "jm_kumo")}
    assert VoiceStore(packs).default == "af_heart"


def test_unknown_voice_names_the_available_ones(voices):
    with pytest.raises(UnknownVoice) as e:
        voices.get("af_nobody")
    assert "af_nobody" in e.value.message and "jm_kumo" in e.value.message
    assert e.value.status == 404


@pytest.mark.parametrize("spec", ["../../etc/passwd", "a(2", "a()+b", "a(-1)", "+", "a(0)", "__import__('os')"])
def test_bad_blend_syntax_is_rejected(voices, spec):
    with pytest.raises((InvalidRequest, UnknownVoice)):
        voices.get(spec)


def test_blend_weights_are_normalised(voices):
    assert parse_blend("a(2)+b(1)") == [("a", pytest.approx(2 / 3)), ("b", pytest.approx(1 / 3))]
    blended = voices.get("jm_kumo(3)+jf_alpha(1)")
    expected = 0.75 * voices.get("jm_kumo") + 0.25 * voices.get("jf_alpha")
    np.testing.assert_allclose(blended, expected, rtol=1e-6)
    assert voices.resolve("jm_kumo") == "jm_kumo"


def test_style_row_follows_token_count(voices):
    pack = voices.get("jm_kumo")
    np.testing.assert_array_equal(voices.style("jm_kumo", 10), pack[9])
    np.testing.assert_array_equal(voices.style("jm_kumo", 9999), pack[-1])


def test_packs_are_loaded_without_pickle(tmp_path):
    bad = tmp_path / "v.npz"
    np.savez(bad, evil=np.array([object()], dtype=object))
    with pytest.raises(ValueError):
        load_voice_packs(bad)


def test_folder_of_npy_packs(tmp_path):
    np.save(tmp_path / "xx_one.npy", np.ones((510, 1, 256), np.float32))
    assert VoiceStore.from_path(tmp_path).names() == ["xx_one"]

