"""server/pipeline/word_timings.py: words from Kokoro's per-token frame durations (600 samples a frame)."""

from __future__ import annotations

import numpy as np
import pytest

from server.pipeline.word_timings import FRAME_SAMPLES, SAMPLE_RATE, char_times, segment_word_timings

TEXT = "Hello there, this is a short test of the speech server."
PHONEMES = "həlˈoʊ ðˈɛɹ, ðɪs ɪz ɐ ʃˈɔːɹt tˈɛst ʌvðə spˈiːtʃ sˈɜːvɚ."  # espeak-ng, as the pipeline makes it
WORDS = {
    "Hello": "həlˈoʊ",
    "there,": "ðˈɛɹ,",
    "this": "ðˈɪs",
    "is": "ɪz",
    "a": "ɐ",
    "short": "ʃˈɔːɹt",
    "test": "tˈɛst",
    "of": "ʌv",
    "the": "ðə",
    "speech": "spˈiːtʃ",
    "server.": "sˈɜːvɚ.",
}


def frames(phonemes: str, per_char: int = 3, bos: int = 4, eos: int = 2) -> np.ndarray:
    return np.array([bos, *([per_char] * len(phonemes)), eos])


def check_monotonic(words, total):
    prev = 0.0
    for w in words:
        assert prev - 1e-9 <= w.start <= w.end <= total + 1e-9, w
        prev = w.end


def test_char_times_follow_frames():
    d = np.array([2, 1, 4, 3])
    starts, ends = char_times("ab", d, n_samples=10 * FRAME_SAMPLES)
    assert starts.tolist() == pytest.approx([2 * 0.025, 3 * 0.025])
    assert ends.tolist() == pytest.approx([3 * 0.025, 7 * 0.025])


def test_aligned_words_cover_the_speech_and_split_merged_phoneme_words():
    d = frames(PHONEMES)
    n = int(d.sum()) * FRAME_SAMPLES
    words = segment_word_timings(TEXT, PHONEMES, d, n, WORDS.get)
    assert [w.word for w in words] == TEXT.split()
    total = n / SAMPLE_RATE
    check_monotonic(words, total)
    assert words[0].start == pytest.approx(4 * 0.025)  # after <bos>
    assert words[-1].end == pytest.approx((4 + 3 * len(PHONEMES)) * 0.025)  # before <eos>
    # "of the" is one espeak word "ʌvðə"; each still gets its own half.
    of, the = words[7], words[8]
    assert of.end <= the.start and of.end - of.start == pytest.approx(the.end - the.start)
    assert all(w.end > w.start for w in words)


def test_offset_shifts_times():
    d = frames(PHONEMES)
    n = int(d.sum()) * FRAME_SAMPLES
    a = segment_word_timings(TEXT, PHONEMES, d, n, WORDS.get)
    b = segment_word_timings(TEXT, PHONEMES, d, n, WORDS.get, offset=2.5)
    assert [x.start + 2.5 for x in a] == pytest.approx([x.start for x in b])


def test_without_phonemizer_words_share_by_letters():
    d = frames(PHONEMES)
    n = int(d.sum()) * FRAME_SAMPLES
    words = segment_word_timings(TEXT, PHONEMES, d, n)
    assert len(words) == len(TEXT.split())
    check_monotonic(words, n / SAMPLE_RATE)
    assert words[-1].end == pytest.approx((4 + 3 * len(PHONEMES)) * 0.025)


def test_lone_punctuation_gets_a_zero_length_mark():
    text, ph = "wait — now", "wˈeɪt nˈaʊ"
    d = frames(ph)
    words = segment_word_timings(
        text, ph, d, int(d.sum()) * FRAME_SAMPLES, {"wait": "wˈeɪt", "—": "", "now": "nˈaʊ"}.get
    )
    assert words[1].word == "—" and words[1].start == words[1].end == words[0].end
    assert words[2].start >= words[1].end


def test_times_clamped_to_audio():
    d = frames(PHONEMES)
    n = 1000  # a runtime that trimmed its output
    words = segment_word_timings(TEXT, PHONEMES, d, n, WORDS.get)
    check_monotonic(words, n / SAMPLE_RATE)


def test_real_espeak_alignment(g2p):
    """Real G2P: per-word phonemes from espeak-ng align onto the sentence's phonemes."""
    text = "On the 3rd of May, Dr. Smith paid 42 dollars — quite a lot."
    ph = g2p.phonemize(text, "en-us")
    d = frames(ph, per_char=2)
    n = int(d.sum()) * FRAME_SAMPLES
    words = segment_word_timings(text, ph, d, n, lambda w: g2p.phonemize(w, "en-us"))
    assert [w.word for w in words] == text.split()
    check_monotonic(words, n / SAMPLE_RATE)
    spoken = [w for w in words if w.word != "—"]
    assert all(w.end > w.start for w in spoken)
    assert words[-1].end == pytest.approx((4 + 2 * len(ph)) * 0.025)
