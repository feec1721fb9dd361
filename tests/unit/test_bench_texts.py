"""The benchmark's fixed texts are what the results claim they are."""

from backends.text.planner import normalize, split_sentences
from benchmarks.texts import (
    CLIPS,
    PARAGRAPH,
    PLAIN_SENTENCES,
    SENTENCES,
    THROUGHPUT_TEXTS,
    WRITTEN_SENTENCES,
    check_paragraph,
)


def test_paragraph_is_267_characters_in_four_sentences():
    assert len(PARAGRAPH) == 267
    assert split_sentences(normalize(PARAGRAPH)) == list(SENTENCES)
    assert len(SENTENCES) == 4
    check_paragraph()


def test_first_sentence_has_a_clause_boundary_for_the_fast_first_segment():
    first = SENTENCES[0]
    before_comma = first[: first.index(",")]
    assert 3 <= len(before_comma.split()) <= 12


def test_24_payload_clips_and_two_sentence_throughput_texts():
    assert len(CLIPS) == 24 and len(set(CLIPS)) == 24
    assert all(len(split_sentences(t)) == 2 for t in THROUGHPUT_TEXTS)


def test_the_languages_sets_are_one_sentence_each_and_held_out_from_the_others():
    assert len(set(PLAIN_SENTENCES)) == 20 and len(set(WRITTEN_SENTENCES)) == 16
    assert all(len(split_sentences(normalize(t))) == 1 for t in PLAIN_SENTENCES)
    assert not set(PLAIN_SENTENCES + WRITTEN_SENTENCES) & set(CLIPS + SENTENCES + THROUGHPUT_TEXTS)
