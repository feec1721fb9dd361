"""No word is lost between the text and the segments the model speaks: a request's segments, joined,
speak the words of the whole text, in order, each with its consonants, over generated texts with
numbers, money, decimals, abbreviations and every mark at a cut; and the G2P speaks every word of a
text that ends at a comma after a digit-grouped number.

A word at a cut may be said as it is said at the end of an utterance rather than inside one: "it" before
a cut keeps its [t] where the whole sentence has a flap [ɾ], "a" may be [eɪ] or [ɐ], "to" [tuː] or [tʊ].
A listener hears the same words, so the property compares words, not allophones."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from backends.text.g2p.marks import MARKS, split_marks
from backends.text.planner import normalize

#: What may differ between a segment and the whole text without a word being lost: pauses (marks,
#: whitespace) and stress (espeak-ng weighs a word's stress against its neighbours).
PAUSES = re.compile(rf"[\sˈˌ{re.escape(MARKS)}'’‘-]+")
#: Where one spoken word ends and the next begins: whitespace, marks, apostrophes and hyphens.
WORD_BREAKS = re.compile(rf"[\s{re.escape(MARKS)}'’‘-]+")
#: What a word's sound may change at a cut without becoming another word: its vowels (reduced or full:
#: "a" [ɐ]/[eɪ], "to" [tʊ]/[tuː]), their length, stress, and the alveolar stop's allophones (a flap [ɾ]
#: or a glottal stop [ʔ] between words, [t]/[d] before a pause). What is left is the word's consonants.
ALLOPHONES = str.maketrans({"ɾ": "t", "ʔ": "t", "d": "t", "ː": None, "ˈ": None, "ˌ": None,
                            **dict.fromkeys("aeiouyæɑɐɒɔəɚɛɜɝɪɨʊʌʉᵻɘɵøœɤɯʏ")})

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


def spoken_words(phonemes: str) -> list[str]:
    """The words a listener hears, in order: each word's consonants, alveolar stops as one."""
    return [word.translate(ALLOPHONES) for word in WORD_BREAKS.split(phonemes) if word]


def test_spoken_words_ignore_allophones_but_not_a_lost_or_changed_word():
    """The comparison below is not blind: it takes a flap for a [t] and a reduced "a" for a full one,
    and still sees a word gone or replaced."""
    assert spoken_words("wiː wiː ɪɾ æt wiː wiː") == spoken_words("wiː wiː ɪt, æt wiː wiː")
    assert spoken_words("ɐ smˈɔːl tʊ") == spoken_words("eɪ smˈɔːl. tˈuː")
    assert spoken_words("wiː wiː ɪɾ æt wiː wiː") != spoken_words("wiː wiː æt wiː wiː")
    assert spoken_words("fˈɪfti jˈuːnɪts") != spoken_words("fˈɪfti sˈɛnts")


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
@example(text="We we it at we we", short=3)  # cut between "it" and "at": [ɪt] alone, [ɪɾ] in the sentence
def test_segments_speak_every_word_of_the_whole_text(pipeline, text, short):
    """What a user would lose: a word of their text never spoken, or spoken as another word, because
    the server cut the text into segments (at a mark, after the first few words, around a number)."""
    segments = pipeline.plan(text, voice="jm_kumo", short_first_words=short)
    joined = " ".join(s.phonemes for s in segments)
    whole = pipeline.phonemes(normalize(text), "en-us")
    assert spoken_words(joined) == spoken_words(whole), ([s.text for s in segments], joined, whole)
