"""Voice listing, defaults, blending and errors."""

from __future__ import annotations

import numpy as np
import pytest

from backends.api import InvalidRequest, UnknownVoice
from backends.assets.voices import VoiceStore, load_voice_packs, parse_blend

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



# ---------------------------------------------------------------------------------------------
# aliases (KOKORO_VOICE_ALIASES)
# ---------------------------------------------------------------------------------------------
def test_an_alias_resolves_to_its_voice_or_blend(voices):
    store = voices.with_aliases({"nova": "jf_nezumi", "alloy": "jm_kumo(3)+jf_alpha(1)"})
    assert store.resolve("nova") == "jf_nezumi" and store.get("nova") is voices.get("jf_nezumi")
    assert store.resolve("alloy") == voices.resolve("jm_kumo(3)+jf_alpha(1)")
    assert "nova" in store and "nova" not in voices and store.names() == voices.names()
    assert store.aliases == {"nova": "jf_nezumi", "alloy": "jm_kumo(3)+jf_alpha(1)"}
    # inside a blend, an alias stands for its voices (weights multiplied, a voice named twice merged)
    assert store.resolve("nova(1)+jf_nezumi(1)") == "jf_nezumi"
    mixed = store.style("alloy(1)+jf_tebukuro(1)", 40)
    expected = 0.375 * voices.style("jm_kumo", 40) + 0.125 * voices.style("jf_alpha", 40) + 0.5 * voices.style(
        "jf_tebukuro", 40)
    assert np.allclose(mixed, expected, atol=1e-6)


@pytest.mark.parametrize(
    ("aliases", "error", "needle"),
    [
        ({"nova": "af_nobody"}, UnknownVoice, "af_nobody"),  # the target must be loaded
        ({"nova": "jm_kumo(1)+af_nobody(1)"}, UnknownVoice, "af_nobody"),
        ({"nova": "jm_kumo(2"}, InvalidRequest, "invalid voice expression"),
        ({"jm_kumo": "jf_alpha"}, InvalidRequest, "would hide the loaded voice"),
        ({"no va": "jf_alpha"}, InvalidRequest, "letters, digits"),
    ],
)
def test_a_bad_alias_refuses_to_build_the_store(voices, aliases, error, needle):
    with pytest.raises(error) as info:
        voices.with_aliases(aliases)
    assert needle in info.value.message and "voice alias" in info.value.message


def test_the_aliases_setting_is_parsed_and_checked():
    from backends.config import BackendConfig, parse_voice_aliases

    assert parse_voice_aliases(" alloy=jm_kumo , nova = jf_nezumi(2)+jm_kumo(1) ,") == {
        "alloy": "jm_kumo", "nova": "jf_nezumi(2)+jm_kumo(1)"}
    assert parse_voice_aliases("") == {}
    assert BackendConfig.defaults(voice_aliases="nova=jf_nezumi").voice_alias_map == {"nova": "jf_nezumi"}
    for bad, needle in (("nova", "expected alias=voice"), ("=jm_kumo", "expected"), ("a=b,a=c", "twice")):
        with pytest.raises(ValueError, match=needle):
            BackendConfig.defaults(voice_aliases=bad)
