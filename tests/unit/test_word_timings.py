"""server/pipeline/word_timings.py: words cut from Kokoro's per-token frame durations (600 samples a
frame) at the word spans the segment's own G2P reading gave (backends/text/g2p/spans.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from backends.api import WordSpan
from server.pipeline.word_timings import FRAME_SAMPLES, SAMPLE_RATE, char_times, segment_word_timings

TEXT = "Hello there, this is a short test of the speech server."
PHONEMES = "həlˈoʊ ðˈɛɹ, ðɪs ɪz ɐ ʃˈɔːɹt tˈɛst ʌvðə spˈiːtʃ sˈɜːvɚ."  # espeak-ng, as the pipeline makes it


def frames(phonemes: str, per_char: int = 3, bos: int = 4, eos: int = 2) -> np.ndarray:
    return np.array([bos, *([per_char] * len(phonemes)), eos])


def check_timings(words, text: str, total: float) -> None:
    """In order, monotonic, inside the audio, and each word is the text's."""
    prev = 0.0
    at = 0
    for w in words:
        assert prev - 1e-9 <= w.start <= w.end <= total + 1e-9, w
        found = text.find(w.word, at)
        assert found >= 0, (w.word, text[at:])
        at = found + len(w.word)
        prev = w.end


def spans_of(text: str, phonemes: str, pairs: list[tuple[str, str]]) -> list[WordSpan]:
    out, at, ph_at = [], 0, 0
    for word, said in pairs:
        a = text.index(word, at)
        p = phonemes.index(said, ph_at) if said else ph_at
        out.append(WordSpan(a, a + len(word), p, p + len(said)))
        at, ph_at = a + len(word), p + len(said)
    return out


def test_char_times_follow_frames():
    d = np.array([2, 1, 4, 3])
    starts, ends = char_times("ab", d, n_samples=10 * FRAME_SAMPLES)
    assert starts.tolist() == pytest.approx([2 * 0.025, 3 * 0.025])
    assert ends.tolist() == pytest.approx([3 * 0.025, 7 * 0.025])


def test_a_word_runs_from_its_first_phoneme_to_its_last():
    text, ph = "of the end", "ʌvðɪ ˈɛnd"
    d = np.array([4, *range(1, len(ph) + 1), 2])  # every character a different length
    spans = [WordSpan(0, 2, 0, 2), WordSpan(3, 6, 2, 4), WordSpan(7, 10, 5, 9)]
    words = segment_word_timings(text, ph, d, int(d.sum()) * FRAME_SAMPLES, spans)
    starts, ends = char_times(ph, d, int(d.sum()) * FRAME_SAMPLES)
    assert [w.word for w in words] == ["of", "the", "end"]
    assert [t for w in words for t in (w.start, w.end)] == pytest.approx(
        [starts[0], ends[1], starts[2], ends[3], starts[5], ends[8]])


def test_offset_shifts_times():
    d = frames(PHONEMES)
    n = int(d.sum()) * FRAME_SAMPLES
    spans = spans_of(TEXT, PHONEMES, [("Hello", "həlˈoʊ"), ("there,", "ðˈɛɹ")])
    a = segment_word_timings(TEXT, PHONEMES, d, n, spans)
    b = segment_word_timings(TEXT, PHONEMES, d, n, spans, offset=2.5)
    assert [x.start + 2.5 for x in a] == pytest.approx([x.start for x in b])


def test_without_spans_words_share_by_letters():
    d = frames(PHONEMES)
    n = int(d.sum()) * FRAME_SAMPLES
    words = segment_word_timings(TEXT, PHONEMES, d, n)
    assert [w.word for w in words] == TEXT.split()
    check_timings(words, TEXT, n / SAMPLE_RATE)
    assert words[-1].end == pytest.approx((4 + 3 * len(PHONEMES)) * 0.025)


def test_lone_punctuation_gets_a_zero_length_mark():
    text, ph = "wait — now", "wˈeɪt nˈaʊ"
    d = frames(ph)
    spans = [WordSpan(0, 4, 0, 5), WordSpan(5, 6, 5, 5), WordSpan(7, 10, 6, 10)]
    words = segment_word_timings(text, ph, d, int(d.sum()) * FRAME_SAMPLES, spans)
    assert words[1].word == "—" and words[1].start == words[1].end == words[0].end
    assert words[2].start >= words[1].end


def test_times_clamped_to_audio():
    d = frames(PHONEMES)
    n = 1000  # a runtime that trimmed its output
    spans = spans_of(TEXT, PHONEMES, [("Hello", "həlˈoʊ"), ("server.", "sˈɜːvɚ")])
    check_timings(segment_word_timings(TEXT, PHONEMES, d, n, spans), TEXT, n / SAMPLE_RATE)


ENGLISH = [
    "Hello there, this is a short test of the speech server.",
    "Pi is about 3.14, and the launch was on 2024-03-05 at 2:30 pm.",
    "On the 3rd of May, Dr. Smith paid $42.50 — quite a lot!",
    "Wait... \"really?\" (yes); it's 1,250 units — at 20% off.",
]


@pytest.mark.parametrize("text", ENGLISH)
def test_real_english_words_are_the_texts_and_timed_from_their_own_phonemes(server_g2p, text):
    """Real G2P: one reading gives the phonemes and each word's span; the words are the text's
    tokens, in order, monotonic, inside the audio, each spoken one longer than zero."""
    g2p = server_g2p
    ph, spans = g2p.phonemize_words(text, "en-us")
    assert ph == g2p.phonemize(text, "en-us")
    assert [text[s.start:s.end] for s in spans] == text.split()
    assert all(a.ph_end <= b.ph_start for a, b in itertools.pairwise(spans))
    d = frames(ph, per_char=2)
    n = int(d.sum()) * FRAME_SAMPLES
    words = segment_word_timings(text, ph, d, n, spans)
    check_timings(words, text, n / SAMPLE_RATE)
    assert all(w.end > w.start for w in words if any(c.isalnum() for c in w.word))


def test_a_number_is_timed_by_all_it_is_read_as(server_g2p):
    text = "Pi is 3.14 today."
    g2p = server_g2p
    ph, spans = g2p.phonemize_words(text, "en-us")
    said = {text[s.start:s.end]: ph[s.ph_start:s.ph_end] for s in spans}
    assert said["3.14"].split() == g2p.phonemize("three point one four", "en-us").split()
    assert said["today."] == g2p.phonemize("today", "en-us")


def test_words_run_together_by_espeak_each_get_their_own_part(server_g2p):
    """espeak-ng reads "of the" as one phoneme word; each word still gets its own share of it."""
    text = "a cup of the tea"
    g2p = server_g2p
    ph, spans = g2p.phonemize_words(text, "en-us")
    assert len(ph.split()) < len(text.split())  # the reading ran words together
    parts = [ph[s.ph_start:s.ph_end] for s in spans]
    assert all(parts) and "".join(parts) == ph.replace(" ", "")


def test_japanese_words_cover_the_text_in_order(server_g2p):
    text = "今日は2024年3月5日です。東京タワーに行きました！"
    g2p = server_g2p
    ph, spans = g2p.phonemize_words(text, "ja")
    assert ph == g2p.phonemize(text, "ja")
    assert len(spans) > 5
    assert "".join(text[s.start:s.end] for s in spans) == text  # the marks ride with the word before
    assert all(a.end <= b.start and a.ph_end <= b.ph_start for a, b in itertools.pairwise(spans))
    d = frames(ph, per_char=2)
    n = int(d.sum()) * FRAME_SAMPLES
    words = segment_word_timings(text, ph, d, n, spans)
    check_timings(words, text, n / SAMPLE_RATE)
    assert all(w.end > w.start for w in words) and all(w.joined for w in words[1:])

