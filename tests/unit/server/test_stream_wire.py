"""The shared pieces of the Cartesia and ElevenLabs mappers: joining text sent in pieces, and the
word and character times of a segment."""

from __future__ import annotations

import itertools

import pytest

from server.pipeline.word_timings import WordTiming
from server.providers.alignment import char_alignment, estimate_words, joined, words_of
from server.streaming.text_stream import Audio


@pytest.mark.parametrize(("tail", "text", "want"), [
    ("first one.", "Second one.", " Second one."),  # Pipecat's sentence mode: no space between
    ('he said."', "Then", " Then"),
    ("3", ".", "."),  # tokens join as sent
    ("3.", "14", "14"),
    ("Hello", " there", " there"),
    ("word ", "Next", "Next"),
    ("", "Start.", "Start."),
    ("e.g.", "lower", "lower"),
])
def test_joined_separates_sentences_only(tail, text, want):
    assert joined(tail, text) == want


def test_estimated_words_share_the_audio_by_letters_in_order():
    words = estimate_words("Hi there, everyone.", 1.0, 2.0)
    assert [w.word for w in words] == ["Hi", "there,", "everyone."]
    assert words[0].start == 1.0 and words[-1].end == pytest.approx(3.0)
    assert all(a.end == b.start for a, b in itertools.pairwise(words))


def test_the_model_s_word_times_are_used_and_kept_inside_the_audio():
    audio = Audio(b"\0" * 4800, 1.0, 0.1, "a b", (WordTiming("a", 1.0, 1.04), WordTiming("b", 1.05, 1.3)))
    words = words_of(audio)
    assert [(w.start, w.end) for w in words] == [(1.0, 1.04), (1.05, pytest.approx(1.1))]


def test_character_alignment_covers_the_text_and_ends_with_the_audio():
    audio = Audio(b"", 2.0, 1.2, "Hello big world", (
        WordTiming("Hello", 2.1, 2.4), WordTiming("big", 2.5, 2.7), WordTiming("world", 2.75, 3.1)))
    a = char_alignment(audio, 1.25)
    assert "".join(a["chars"]) == "Hello big world "
    starts, durations = a["charStartTimesMs"], a["charDurationsMs"]
    assert starts[0] == 100 and starts[6] == 500 and starts[10] == 750  # each word starts where the model says
    assert starts == sorted(starts) and min(durations) >= 0
    assert starts[-1] + durations[-1] == 1250
