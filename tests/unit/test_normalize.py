"""English normalisation: written forms -> the words a reader says (table-driven), and the
invoice sentence whose words espeak-ng used to lose after the comma of ``1,250``."""

from __future__ import annotations

import pytest

from backends.text.normalize import normalize_english, normalize_english_mapped

CASES = [
    # cardinals, thousands separators, signs
    ("I have 3 cats.", "I have three cats."),
    ("It costs 1,250 units.", "It costs one thousand two hundred and fifty units."),
    ("It is -5 outside.", "It is minus five outside."),
    ("Room 221B.", "Room two hundred and twenty one B."),
    # ordinals
    ("the 21st floor", "the twenty first floor"),
    ("her 2nd try", "her second try"),
    # decimals
    ("pi is 3.14", "pi is three point one four"),
    # money
    ("$12.50 each", "twelve dollars and fifty cents each"),
    ("only $0.99", "only ninety nine cents"),
    ("£5 and €1", "five pounds and one euro"),
    ("$3.5 million", "three point five million dollars"),
    # percentages
    ("up 12.5%", "up twelve point five percent"),
    # times
    ("at 2:30 pm", "at two thirty pee em"),
    ("at 14:05", "at fourteen oh five"),
    ("at 9am.", "at nine ay em."),
    ("at 5 p.m. Then", "at five pee em. Then"),
    ("at 7:00", "at seven o'clock"),
    # dates and years
    ("on 2024-03-05", "on March fifth, twenty twenty four"),
    ("on 3/5/2024", "on March fifth, twenty twenty four"),
    ("March 5th, 2024", "March fifth, twenty twenty four"),
    ("born in 1999", "born in nineteen ninety nine"),
    ("the 1990s", "the nineteen nineties"),
    ("since 2005", "since two thousand and five"),
    # units
    ("5 kg of flour", "five kilograms of flour"),
    ("1 km away", "one kilometer away"),
    ("20°C today", "twenty degrees Celsius today"),
    ("a 3.5GB file", "a three point five gigabytes file"),
    ("60 mph", "sixty miles per hour"),
    # phone numbers
    ("Call 555-123-4567.", "Call five five five, one two three, four five six seven."),
    ("Call 555-1234.", "Call five five five, one two three four."),
    # URLs and e-mail
    ("See https://example.com/docs today.", "See example dot com slash docs today."),
    ("Mail bob.smith@example.org now.", "Mail bob dot smith at example dot org now."),
    # abbreviations
    ("Dr. Smith and Mr. Jones", "Doctor Smith and Mister Jones"),
    ("Baker St. is near St. Paul's.", "Baker Street is near Saint Paul's."),
    ("apples, pears, etc.", "apples, pears, et cetera."),
    ("cats vs. dogs, e.g. mine", "cats versus dogs, for example mine"),
    ("No. 7 & No. 8", "number seven and number eight"),
]


@pytest.mark.parametrize(("written", "spoken"), CASES)
def test_written_forms_become_spoken_words(written, spoken):
    assert normalize_english(written) == spoken


def test_plain_text_is_left_as_it_is():
    text = "The garden looks lovely after the rain, doesn't it?"
    assert normalize_english(text) == text


INVOICE = "The invoice lists 1,250 units at $12.50 each, and ships today."


@pytest.mark.parametrize("english", ["espeak", "misaki"])
def test_no_words_are_lost_after_a_number_with_a_comma(english, server_g2p):
    """espeak-ng cut "1,250" at its comma and the rest of the clause was lost
    ("The invoice lists one,"): numbers are written out before they reach the G2P."""
    from backends.text.g2p.frontends import G2P

    g2p = server_g2p if english == server_g2p.english else G2P(english=english)
    phonemes = g2p.phonemize(INVOICE, "en-us")
    for word in ("thousand", "fifty", "units", "dollars", "cents", "each", "ships", "today"):
        assert g2p.phonemize(word, "en-us").strip(".") in phonemes, word


@pytest.mark.parametrize(("written", "spoken"), CASES)
def test_the_mapped_form_is_the_same_text_and_points_back_at_what_was_written(written, spoken):
    mapped = normalize_english_mapped(written)
    assert mapped.text == spoken
    for k in range(len(mapped.text)):  # each character stands for a range of the written text
        lo, hi = mapped.span(k, k + 1)
        assert 0 <= lo <= hi <= len(written)


def test_misaki_words_are_timed_by_what_they_were_read_as():
    """misaki's tokens carry their phonemes; mapped back through the normaliser they name the words
    the client wrote ("3.14," spans all of "three point one four")."""
    from backends.text.g2p.frontends import G2P

    text = "Pi is about 3.14, and it's 20% off!"
    g2p = G2P(english="misaki", torch_free=True)
    ph, spans = g2p.phonemize_words(text, "en-us")
    assert ph == g2p.phonemize(text, "en-us")
    assert [text[s.start:s.end] for s in spans] == text.split()
    assert all(ph[s.ph_start:s.ph_end] for s in spans)
    assert len(ph[spans[3].ph_start:spans[3].ph_end].split()) == 4
