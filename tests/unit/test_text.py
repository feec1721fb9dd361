"""The segmenter: sentence rules, the 510-phoneme limit, the fast first clause, and no text lost."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.api import MAX_PHONEMES, EmptyText
from backends.text.planner import TextPipeline, normalize, phrase_boundaries, split_sentences


def words(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dr. Smith arrived. He sat down.", ["Dr. Smith arrived.", "He sat down."]),
        ("Pi is 3.14 today. Yes.", ["Pi is 3.14 today.", "Yes."]),
        ("Meet at 2:30 p.m. sharp. Then go.", ["Meet at 2:30 p.m. sharp.", "Then go."]),
        ("Use e.g. a fork. Or not.", ["Use e.g. a fork.", "Or not."]),
        ('He said "stop." Then he left.', ['He said "stop."', "Then he left."]),
        ("Wait... what? Fine!", ["Wait... what?", "Fine!"]),
        ("(It works.) Next one.", ["(It works.)", "Next one."]),
        ("first line\nsecond line", ["first line", "second line"]),
        ("no full stop at the end", ["no full stop at the end"]),
        ('"Really?" she asked. Yes.', ['"Really?" she asked.', "Yes."]),
        ("He moved to the U.S. Army base. Then home.", ["He moved to the U.S. Army base.", "Then home."]),
        ("We packed pens, etc. Then we left.", ["We packed pens, etc.", "Then we left."]),
        ("Version 1.2. Next one.", ["Version 1.2.", "Next one."]),
        ("Plan:\n1. Open the box.\n2. Done", ["Plan:", "1. Open the box.", "2. Done"]),
        ("こんにちは。元気ですか？はい", ["こんにちは。", "元気ですか？", "はい"]),
        ("Fin. Élan vital.", ["Fin.", "Élan vital."]),
        ("He said it's. Then left.", ["He said it's.", "Then left."]),
        ("はい。Dr. Who came.", ["はい。", "Dr. Who came."]),
    ],
)
def test_sentence_split(text, expected):
    assert split_sentences(normalize(text)) == expected


def test_normalize_drops_control_characters_and_folds_spaces():
    assert normalize("a\x00b   c\u200b\r\nd") == "a b c\nd"


def test_no_segment_exceeds_the_phoneme_limit(pipeline):
    text = "This sentence has no end but goes on and on, " * 40 + "until here."
    segments = pipeline.plan(text, voice="jm_kumo")
    assert len(segments) > 1
    assert all(0 < len(s.phonemes) <= MAX_PHONEMES for s in segments)
    assert words(" ".join(s.text for s in segments)) == words(text)


def test_a_giant_word_is_cut_rather_than_dropped(pipeline):
    text = "x" * 3000
    segments = pipeline.plan(text, voice="jm_kumo")
    assert all(len(s.phonemes) <= MAX_PHONEMES for s in segments)
    assert "".join(s.text for s in segments) == text


def test_first_segment_stops_at_an_early_clause(pipeline):
    text = "Welcome back, everyone, to the show about streaming speech. Today we measure latency."
    first, *rest = pipeline.plan(text, voice="jm_kumo", fast_first=True)
    assert first.text == "Welcome back, everyone,"
    assert rest and words(" ".join(s.text for s in [first, *rest])) == words(text)


def test_fast_first_can_be_turned_off(pipeline):
    text = "Welcome back, everyone, to the show about streaming speech."
    segments = pipeline.plan(text, voice="jm_kumo", fast_first=False)
    assert [s.text for s in segments] == [text]


def test_later_segments_are_packed_larger_than_the_first(pipeline):
    text = "Hello there, my friend, how are you. " + "It is fine. " * 20
    segments = pipeline.plan(text, voice="jm_kumo")
    assert len(segments[0].phonemes) < max(len(s.phonemes) for s in segments[1:])
    assert len(segments) < 21  # short sentences were packed together


@pytest.mark.parametrize("text", ["", "   ", "!!!", "...", "\n\n"])
def test_nothing_to_pronounce_is_an_error(pipeline, text):
    with pytest.raises(EmptyText):
        pipeline.plan(text, voice="jm_kumo")


def test_segments_are_numbered_in_order_and_carry_voice_and_speed(pipeline):
    segments = pipeline.plan("One, two, three, four. Five six.", voice="jf_alpha", speed=1.3)
    assert [s.index for s in segments] == list(range(len(segments)))
    assert {(s.voice, s.speed) for s in segments} == {("jf_alpha", 1.3)}


_word = st.sampled_from(
    ["hello", "world", "Dr.", "3.14", "2:30", "e.g.", "U.S.", "stop.", "go!", "why?", "well...",
     "yes,", "no;", '"quoted."', "(aside)", "—", "and", "The", "A", "\n", "x" * 40]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_word, min_size=1, max_size=60), st.booleans())
def test_no_text_lost_or_duplicated(pipeline, tokens, fast_first):
    """What a user would lose: words of their text never spoken or spoken twice, or a segment the model
    cannot take (empty, or over its phoneme limit: the request fails)."""
    text = " ".join(tokens)
    try:
        segments = pipeline.plan(text, voice="jm_kumo", fast_first=fast_first)
    except EmptyText:
        assert not any(c.isalpha() for c in text)
        return
    joined = " ".join(s.text for s in segments)
    assert words(joined) == words(normalize(text))
    assert all(s.phonemes and len(s.phonemes) <= MAX_PHONEMES for s in segments)


def test_pipeline_limits_are_configurable(g2p, vocab):
    pipe = TextPipeline(g2p.phonemize, vocab, max_phonemes=60, segment_phonemes=60)
    segments = pipe.plan("A fairly long sentence that certainly needs more than sixty phonemes to say.", voice="v")
    assert len(segments) > 1 and all(len(s.phonemes) <= 60 for s in segments)


def test_segments_at_most_double_so_playback_never_waits(pipeline):
    """Regression: a 4-sentence paragraph without the fast first clause was packed into ONE segment,
    so 'streaming' sent nothing until the whole paragraph was synthesised."""
    text = ("Streaming speech starts early. The first sentence plays while the second is made. "
            "Then the third one follows. And the fourth sentence ends the paragraph here.")
    for fast_first in (True, False):
        segments = pipeline.plan(text, voice="jm_kumo", fast_first=fast_first)
        assert len(segments) >= 3
        if not fast_first:
            assert segments[0].text == "Streaming speech starts early."
        for before, after in itertools.pairwise(segments):
            packed = len(split_sentences(after.text)) > 1
            assert not packed or len(after.phonemes) <= max(2 * len(before.phonemes), pipeline.min_pack)


@pytest.mark.parametrize(
    ("sentence", "first"),
    [
        # no clause mark in the word window: the cut goes before a preposition ...
        ("The quick brown fox jumps over the lazy dog near the old barn today.", "The quick brown fox jumps"),
        # ... never between a determiner and its noun, never before "of"
        ("My neighbour down the road has a cup of tea in the garden every morning.",
         "My neighbour down the road has a cup of tea"),
        # ... before a conjunction or relative word
        ("The report arrived late because the printer in the office had broken down again.",
         "The report arrived late"),
        ("We visited the museum which opened last spring in the old harbour building.", "We visited the museum"),
        # ... before "and" only when a new clause follows, not inside "salt and pepper"
        ("I bought salt and pepper yesterday and we cooked a large dinner for everyone.",
         "I bought salt and pepper yesterday"),
    ],
)
def test_first_segment_without_a_clause_mark_ends_at_a_phrase_boundary(pipeline, sentence, first):
    text = sentence + " A second sentence follows."
    segments = pipeline.plan(text, voice="jm_kumo", fast_first=True)
    assert segments[0].text == first
    assert words(" ".join(s.text for s in segments)) == words(text)


@pytest.mark.parametrize(
    "sentence",
    [
        "Streaming speech starts early today.",  # too short: three words must be left after the cut
        # the first phrase word comes after the 12-word window
        "Seven big grey dogs ran home quickly yesterday evening carrying long sticks happily beside the lake.",
        "The very old and rather tired grey cat sleeps.",  # only cuts inside noun phrases
    ],
)
def test_no_phrase_boundary_in_the_window_keeps_the_whole_sentence(pipeline, sentence):
    segments = pipeline.plan(sentence + " Next one.", voice="jm_kumo", fast_first=True)
    assert segments[0].text == sentence


def test_a_clause_mark_in_the_window_wins_over_a_phrase_boundary(pipeline):
    text = "We walked along the river, then turned back towards the town centre at dusk."
    assert pipeline.plan(text, voice="jm_kumo")[0].text == "We walked along the river,"


def test_phrase_boundaries_never_follow_a_determiner_or_a_phrase_word():
    sentence = "She said that the man with the hat was here as soon as we left."
    cuts = [sentence[:c].split()[-1] for c in phrase_boundaries(sentence)]
    assert cuts == ["said", "man", "here"]  # not inside "as soon as"


@pytest.mark.parametrize(
    ("sentence", "first"),
    [
        # no clause mark or phrase word within five words: any word boundary outside a noun phrase
        ("When you ask a voice assistant a question, the silence before it answers is long.", "When you ask"),
        # a phrase boundary within the window still comes first
        ("Our company builds speech software for hospitals and schools.", "Our company builds speech software"),
        # never after a subject pronoun, a question word or an auxiliary, never inside a noun phrase
        ("I think that we should go to the store today.", None),
        ("It was a dark and stormy night in the city.", "It was a dark and stormy night"),  # (the idle cut)
    ],
)
def test_a_busy_server_cuts_the_first_segment_shorter(pipeline, sentence, first):
    text = sentence + " A second sentence follows."
    segments = pipeline.plan(text, voice="jm_kumo", short_first_words=5)
    assert segments[0].text == (first or sentence)
    assert words(" ".join(s.text for s in segments)) == words(text)
    idle = pipeline.plan(text, voice="jm_kumo")
    assert len(idle[0].text) >= len(segments[0].text)


def test_after_a_short_busy_cut_the_rest_of_the_sentence_is_cut_at_its_clause_marks(pipeline):
    text = "When you ask a voice assistant a question, the silence before it answers is what you notice most."
    segments = pipeline.plan(text, voice="jm_kumo", short_first_words=5)
    assert [s.text for s in segments] == [
        "When you ask", "a voice assistant a question,", "the silence before it answers is what you notice most."]


def test_each_segment_says_where_it_ends(pipeline):
    text = "When you ask a voice assistant a question, the silence before it answers is what you notice most. Then"
    segments = pipeline.plan(text, voice="v", short_first_words=5)
    assert [(s.text, s.ends) for s in segments] == [
        ("When you ask", "phrase"),  # a cut between words inside the clause
        ("a voice assistant a question,", "clause"),
        ("the silence before it answers is what you notice most. Then", "sentence"),  # the text's end
    ]


def test_a_cut_inside_a_clause_can_end_with_a_mark(g2p, vocab):
    pipe = TextPipeline(g2p.phonemize, vocab, phrase_end_mark=",")
    first, *rest = pipe.plan("Kokoro is a small text to speech model.", voice="v", short_first_words=5)
    assert first.ends == "phrase" and first.phonemes.endswith(",") and not rest[0].phonemes.endswith(",,")
    assert TextPipeline(g2p.phonemize, vocab, phrase_end_mark="\u0000").phrase_end_mark == ""  # not in vocab


def test_for_a_runtime_that_decodes_windows_the_first_sentences_segments_carry_the_sentence(pipeline):
    text = "When you ask a voice assistant a question, the silence before it answers is what you notice most. Then"
    segments = pipeline.plan(text, voice="v", short_first_words=5, windowed=True)
    first = segments[:3]
    assert [(s.text, s.ends) for s in first] == [
        ("When you ask", "phrase"), ("a voice assistant a question,", "clause"),
        ("the silence before it answers is what you notice most.", "sentence")]  # not packed with "Then"
    sentence = first[0].sentence
    assert sentence is not None and sentence.phonemes == " ".join(s.phonemes for s in first)
    assert all(s.sentence is not None and s.sentence.phonemes == sentence.phonemes for s in first)
    for s in first:  # each share is the segment's phonemes (and the space after them): together the sentence
        assert s.sentence is not None and s.sentence.phonemes[s.sentence.start : s.sentence.end].strip() == s.phonemes
    assert first[0].sentence.first and first[-1].sentence.last and first[-1].sentence.end == len(sentence.phonemes)
    assert segments[3].text == "Then" and segments[3].sentence is None
    assert all(s.sentence is None for s in pipeline.plan(text, voice="v", short_first_words=5))


@pytest.mark.parametrize("windowed", [False, True])
def test_each_segment_keeps_its_words_spans_through_cuts_packing_and_the_phrase_mark(server_g2p, vocab, windowed):
    """The spans the G2P gave survive the planner: every segment's words are its text's, in order,
    each on phonemes of its own inside the segment's (packed segments' spans joined, the
    vocabulary filter and a phrase mark applied), and the phonemes are those planned without spans."""
    text = ("When you ask a voice assistant a question, the silence before it answers is what you notice most. "
            "It costs $12.50 on 2024-03-05. Short one. Another short one! And a third, at 3.14 percent.")
    pipe = TextPipeline(server_g2p.phonemize, vocab, segment_phonemes=80, phrase_end_mark=",",
                        read=server_g2p.phonemize_words)
    plain = TextPipeline(server_g2p.phonemize, vocab, segment_phonemes=80, phrase_end_mark=",")
    segments = pipe.plan(text, voice="v", short_first_words=4, windowed=windowed)
    assert [s.phonemes for s in segments] == [s.phonemes for s in plain.plan(text, voice="v", short_first_words=4,
                                                                          windowed=windowed)]
    assert any(" " in s.text and s.text.count(".") > 1 for s in segments)  # sentences were packed together
    for s in segments:
        assert s.words is not None
        assert [s.text[w.start:w.end] for w in s.words] == s.text.split()
        assert all(0 <= w.ph_start < w.ph_end <= len(s.phonemes) for w in s.words)
        assert all(a.ph_end <= b.ph_start for a, b in itertools.pairwise(s.words))
