"""No word is lost between the text and the segments the model speaks: the phonemes of a request's
segments, joined, are the phonemes of the whole text (up to pauses — punctuation and whitespace — and stress marks),
over generated texts with numbers, money, decimals, abbreviations and every mark at a cut; and the
G2P speaks every word of a text that ends at a comma after a digit-grouped number."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.text.g2p.marks import MARKS, split_marks
from backends.text.planner import normalize

#: What may differ between a segment and the whole text without a word being lost: pauses (marks,
#: whitespace) and stress (espeak-ng weighs a word's stress against its neighbours).
PAUSES = re.compile(rf"[\sˈˌ{re.escape(MARKS)}'’‘-]+")

WORDS = (
    "we sold the invoice lists units at each and but when which from with before after report "
    "shows our team a small model reads it quickly today price rose to about over most of them"
).split()
NUMBERS = ("1,250", "12.50", "$12.50", "$1,250.75", "3.14", "2:30", "10%", "1,000,000", "0.5", "42", "2026")
ABBREVIATIONS = ("Dr.", "Mr.", "e.g.", "U.S.", "etc.", "approx.")
CUT_MARKS = (",", ";", ":", ".", "!", "?", "…", " —", " -", ")", '"')

token = st.one_of(st.sampled_from(WORDS), st.sampled_from(NUMBERS), st.sampled_from(ABBREVIATIONS))
marked = st.tuples(token, st.one_of(st.just(""), st.just(""), st.sampled_from(CUT_MARKS)))
texts = st.lists(marked, min_size=2, max_size=24).map(
    lambda pairs: " ".join(word + mark for word, mark in pairs).capitalize()
)


def without_pauses(phonemes: str) -> str:
    return PAUSES.sub("", phonemes)


def test_a_comma_after_a_grouped_number_keeps_every_word(g2p):
    said = g2p.phonemize("The invoice lists 1,250 units at $12.50 each,")
    assert said.endswith(",")
    for word in ("θˈaʊzənd", "fˈɪfti", "jˈuːnɪts", "dˈɑːlɚ", "twˈɛlv", "ˈiːtʃ"):  # thousand fifty units dollar twelve each
        assert word in said, said


def test_marks_split_where_they_stand():
    assert split_marks("1,250 units, at $12.50.") == [("1,250 units", ", "), ("at $12.50", "."), ("", "")]
    assert split_marks("Dr. Smith") == [("Dr", ". "), ("Smith", "")]


@pytest.mark.parametrize("short", [None, 5, 1])
def test_the_default_planner_speaks_every_word_of_the_comma_number_text(pipeline, short):
    text = "We sold 1,250 units, and the invoice lists 1,250 units at $12.50 each, which is more than last year."
    segments = pipeline.plan(text, voice="jm_kumo", short_first_words=short)
    joined = "".join(s.phonemes for s in segments)
    assert without_pauses(joined) == without_pauses(pipeline.phonemes(normalize(text), "en-us"))
    assert joined.count("θˈaʊzənd") == 2


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts, short=st.sampled_from([None, 1, 3, 5]))
def test_segments_join_to_the_phonemes_of_the_whole_text(pipeline, text, short):
    segments = pipeline.plan(text, voice="jm_kumo", short_first_words=short)
    joined = " ".join(s.phonemes for s in segments)
    whole = " ".join(pipeline.phonemes(sentence, "en-us") for sentence in [normalize(text)])
    assert without_pauses(joined) == without_pauses(whole), [s.text for s in segments]
