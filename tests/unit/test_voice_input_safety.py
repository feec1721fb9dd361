"""Voice names and blends from clients: only the loaded set, parsed never evaluated, never a path,
never a NaN voice. Each bug fixed here has the test that would have caught it."""

from __future__ import annotations

import builtins
import string

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.api import InvalidRequest, UnknownVoice
from backends.assets.voices import MAX_BLEND_PARTS, VoiceStore

NAMES = ("af_one", "am_two", "jf_three")


@pytest.fixture(scope="module")
def store() -> VoiceStore:
    rng = np.random.default_rng(1)
    return VoiceStore({n: rng.standard_normal((510, 1, 256)).astype(np.float32) for n in NAMES}, NAMES[0])


def test_huge_weights_are_refused_instead_of_blending_to_nan(store):
    """'a(<400 digits>)' parsed to inf and inf/inf made a NaN voice: silence with a 200."""
    with pytest.raises(InvalidRequest) as e:
        store.resolve(f"af_one({'9' * 400})+am_two(1)")
    assert e.value.code == "invalid_voice"


def test_a_tiny_weight_resolves_to_a_form_that_parses_again(store):
    """The canonical form was written '1e-07', which the blend grammar then refused at synthesis."""
    canonical = store.resolve("af_one(1)+am_two(0.0000001)")
    assert "e-" not in canonical
    assert np.isfinite(store.get(canonical)).all()


@pytest.mark.parametrize("spec", ["af_one+af_one+af_one(10.0)", "af_one(1)+am_two(1)+af_one(10)", "af_one(1)+am_two(2)"])
def test_the_canonical_form_of_a_blend_resolves_to_itself(store, spec):
    """Weights rounded one by one summed to 0.999999, and the renormalised form read back differed."""
    canonical = store.resolve(spec)
    assert store.resolve(canonical) == canonical


@pytest.mark.parametrize("spec", [
    "../voices.npz", "/etc/passwd", "voices/af_one", "af_one.npy", "C:\\af_one", "af_one\x00", "~/af_one",
    "file://af_one", "af_one;rm -rf /", "__import__('os').system('true')", "af_one(1)*9", "af_one(1e3)",
    "af_one(-1)", "af_one(nan)", "af_one(inf)", "+".join(["af_one"] * (MAX_BLEND_PARTS + 1)),
])
def test_path_like_and_expression_like_voices_never_reach_the_filesystem(store, monkeypatch, spec):
    def no_files(*args, **kwargs):
        raise AssertionError(f"voice {spec!r} opened a file")

    monkeypatch.setattr(builtins, "open", no_files)
    with pytest.raises((InvalidRequest, UnknownVoice)):
        store.get(spec)


voice_like = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=string.ascii_letters + string.digits + "_-()+.* /\\e", max_size=60),
    st.lists(
        st.tuples(st.sampled_from([*NAMES, "zz_none", "", "../x"]),
                  st.one_of(st.none(), st.floats(min_value=0, allow_nan=False, allow_infinity=False),
                            st.integers(min_value=0, max_value=10**400))),
        min_size=1, max_size=MAX_BLEND_PARTS + 2,
    ).map(lambda parts: "+".join(n if w is None else f"{n}({w})" for n, w in parts)),
)


@settings(max_examples=300, deadline=None)
@given(spec=voice_like)
def test_any_voice_string_is_a_typed_error_or_a_finite_loaded_voice(store, spec):
    """What a user would lose: a clear 400/404 for a voice name or blend that cannot be (an untyped
    error instead), or speech at all (a blend of non-finite weights is noise or silence)."""
    try:
        canonical = store.resolve(spec)
    except (InvalidRequest, UnknownVoice) as e:
        assert e.status in (400, 404)
        return
    pack = store.get(canonical)  # what the runtime does with the canonical form, later
    assert pack.shape == (510, 1, 256) and np.isfinite(pack).all()
    assert store.resolve(canonical) == canonical


def test_distinct_blends_do_not_grow_memory_without_bound(store):
    """Each distinct blend is a new 0.5 MB pack; the cache used to keep every one a client asked for."""
    from backends.assets.voices import MAX_CACHED_BLENDS

    for i in range(MAX_CACHED_BLENDS * 4):
        store.get(f"af_one({i + 1})+am_two(1)")
    assert len(store._blends) <= MAX_CACHED_BLENDS
    recent = store.resolve(f"af_one({MAX_CACHED_BLENDS * 4})+am_two(1)")
    assert recent in store._blends  # the most recent ones stay
    np.testing.assert_allclose(store.get("af_one(1)+am_two(1)"),
                               0.5 * store.get("af_one") + 0.5 * store.get("am_two"), rtol=1e-6)


def test_a_blend_style_row_is_mixed_on_the_spot_and_cached_nowhere(store):
    """The ONNX runtime only needs one 256-float row per segment; materialising and caching whole
    packs for every client-chosen blend grew the server's memory by 0.5 MB per distinct blend."""
    store._blends.clear()
    for i in range(50):
        row = store.style(f"af_one({i + 1})+jf_three(2)", 17)
        expected = ((i + 1) * store.get("af_one")[16] + 2 * store.get("jf_three")[16]) / (i + 3)
        np.testing.assert_allclose(row, expected, rtol=1e-4, atol=1e-5)
    assert not store._blends
