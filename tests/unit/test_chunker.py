"""The streaming sentence chunker: each rule a listener would notice, plus properties over any split of
the deltas."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.text.chunker import SentenceChunker, chunk_stream
from backends.text.sentences import split_sentences


def chunks_of(text: str, *, step: int = 1, **kw) -> list[str]:
    """Feed ``text`` in deltas of ``step`` characters (token-like streaming), then flush."""
    chunker = SentenceChunker(**kw)
    out: list[str] = []
    for i in range(0, len(text), step):
        out += chunker.push(text[i : i + step])
    return out + chunker.flush()


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_plain_sentences(step):
    assert chunks_of("Hello there. How are you? I am fine!", step=step) == [
        "Hello there.",
        "How are you?",
        "I am fine!",
    ]


def test_sentence_is_emitted_as_soon_as_the_next_word_starts():
    chunker = SentenceChunker()
    assert chunker.push("The first sentence.") == []  # could still be "3.14" or "e.g."
    assert chunker.push(" ") == []
    assert chunker.push("The") == ["The first sentence."]
    assert chunker.push(" second one") == []
    assert chunker.flush() == ["The second one"]


@pytest.mark.parametrize(
    "text",
    [
        "I met Dr. Smith and Mr. Jones today.",
        "Bring fruit, e.g. apples or pears, to the picnic.",
        "Bring fruit, e.g. Apples or Pears, to the picnic.",
        "He moved to the U.S. Army base last year.",
        "She works vs. he plays all day.",
        "The letter was signed J. R. Tolkien in ink.",
        "It ends at 5 p.m. Tomorrow is another day.",
    ],
)
def test_abbreviations_do_not_cut(text):
    assert chunks_of(text) == [text]


def test_etc_can_end_a_sentence():
    assert chunks_of("We packed pens, paper, etc. Then we left.") == [
        "We packed pens, paper, etc.",
        "Then we left.",
    ]


def test_decimals_and_times_do_not_cut():
    text = "Pi is about 3.14 and the train leaves at 2:30 sharp. Version 1.2.3 is out."
    assert chunks_of(text) == [
        "Pi is about 3.14 and the train leaves at 2:30 sharp.",
        "Version 1.2.3 is out.",
    ]


def test_number_at_sentence_end_cuts():
    assert chunks_of("The total was 42. Then we paid.") == ["The total was 42.", "Then we paid."]


def test_ellipsis_cuts_only_before_a_new_sentence():
    assert chunks_of("Wait... what happened? I thought… Then it rang.") == [
        "Wait... what happened?",
        "I thought…",
        "Then it rang.",
    ]


def test_full_stop_before_closing_quote_or_bracket():
    assert chunks_of('He said "Stop." Then he left. (It was late.) We slept.') == [
        'He said "Stop."',
        "Then he left.",
        "(It was late.)",
        "We slept.",
    ]


def test_question_inside_quote_followed_by_lowercase_does_not_cut():
    assert chunks_of('"Really?" she asked. Yes.') == ['"Really?" she asked.', "Yes."]


def test_newlines_and_list_items_end_chunks():
    text = "Here is the plan:\n1. Open the box.\n2. Take out the radio\n- plug it in\n\nThat is all"
    assert chunks_of(text) == [
        "Here is the plan:",
        "1. Open the box.",
        "2. Take out the radio",
        "- plug it in",
        "That is all",
    ]


def test_remainder_is_flushed_without_a_full_stop():
    chunker = SentenceChunker()
    assert chunker.push("no full stop at the end") == []
    assert chunker.flush() == ["no full stop at the end"]
    assert chunker.flush() == []  # reset after flush


def test_punctuation_alone_is_never_a_chunk():
    assert chunks_of("...\n- \nOK then.") == ["...\n- \nOK then."]


def test_cjk_full_stops():
    assert chunks_of("こんにちは。元気ですか？はい") == ["こんにちは。", "元気ですか？", "はい"]


def test_early_first_clause():
    text = "Well, I think that, on balance, we should go now. Later, we rest."
    assert chunks_of(text, first_clause_words=4) == [
        "Well, I think that,",
        "on balance, we should go now.",
        "Later, we rest.",
    ]
    assert chunks_of(text) == ["Well, I think that, on balance, we should go now.", "Later, we rest."]


def test_long_sentence_is_cut_at_a_clause_mark_not_inside_a_word():
    text = "alpha beta gamma, " * 10 + "and the end"
    chunks = chunks_of(text, max_chars=60)
    assert all(len(c) <= 60 for c in chunks)
    assert all(c.endswith(",") for c in chunks[:-1])
    assert squash(" ".join(chunks)) == squash(text)


async def test_chunk_stream_adapter():
    async def deltas():
        for token in ["Hi", " there", ".", " Bye", " now"]:
            yield token

    assert [c async for c in chunk_stream(deltas())] == ["Hi there.", "Bye now"]


# ------------------------------------------------------------------------------------------------
# Properties: whatever the split of the deltas, nothing is lost, nothing is empty, and the chunks are
# the same as for the whole text at once.
# ------------------------------------------------------------------------------------------------
_pieces = st.sampled_from(
    [
        "Hello", "world", "Dr.", "e.g.", "U.S.", "3.14", "2:30", "...", "…", ".", "!", "?", ",", ";",
        '"', "'", ")", "(", "\n", "\n\n", " ", "  ", "- ", "1. ", "etc.", "The", "and", "it", "A",
        "は", "。", "x" * 30,
    ]
)
_texts = st.lists(_pieces, max_size=40).map("".join) | st.text(max_size=200)


@st.composite
def _split(draw):
    text = draw(_texts)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_split(), st.sampled_from([None, 3]), st.sampled_from([20, 400]))
def test_property_nothing_lost_nothing_empty_split_invariant(case, first_clause_words, max_chars):
    """What a user would lose: words of a streamed reply (dropped, cut inside a word, or spoken as an
    empty chunk), or the same speech whichever way the text arrived in pieces."""
    text, deltas = case
    kw = {"first_clause_words": first_clause_words, "max_chars": max_chars}
    chunker = SentenceChunker(**kw)
    chunks: list[str] = []
    for d in deltas:
        chunks += chunker.push(d)
    chunks += chunker.flush()

    assert all(c.strip() for c in chunks)
    assert all(c == c.strip() for c in chunks)
    assert "".join("".join(chunks).split()) == "".join(text.split())  # equal up to whitespace
    if not any(c in text for c in "。！？"):  # only CJK stops cut where no space is
        assert squash(" ".join(chunks)) == squash(text)  # and no cut inside a word
    whole = SentenceChunker(**kw)
    assert chunks == whole.push(text) + whole.flush()


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        # a number after a cut inside a line is no list marker, in the buffer as in the whole text
        ("Hello1. 1. Hello", ["Hello1.", "1.", "Hello"]),
        ("Hello。1. Hello", ["Hello。", "1.", "Hello"]),
        # the word before a stop begins after a CJK full stop
        ("Hello。Dr. Hello", ["Hello。", "Dr. Hello"]),
        ("Intro\n1. Hello", ["Intro", "1. Hello"]),
    ],
)
def test_the_buffer_decides_as_the_whole_text(text, sentences):
    assert split_sentences(text) == sentences
    for step in (1, 4, 100):
        assert chunks_of(text, step=step) == sentences


@settings(max_examples=300, deadline=None)
@given(_texts)
def test_property_the_chunker_cuts_where_the_server_splits_sentences(text):
    """One set of sentence rules: streamed through the chunker (no length or early-clause cuts), a text
    ends up in the sentences the server's planner splits it into. What a user would lose otherwise: the
    same intonation for the same text, whether it was sent whole or streamed."""
    assert chunks_of(text, step=7, max_chars=10**6) == split_sentences(text)


@pytest.mark.subprocess
def test_importing_the_chunker_loads_no_numerical_or_model_runtime():
    import subprocess
    import sys

    code = ("import sys, backends.text.chunker; heavy = {'numpy', 'onnxruntime', 'torch'} & set(sys.modules); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_settle_takes_a_message_that_ends_a_sentence_as_its_end():
    """A protocol message ending "… . " is cut at once (no waiting for the next message), and only then."""
    chunker = SentenceChunker()
    assert chunker.push("Hello there. ") + chunker.settle() == ["Hello there."]
    assert chunker.push("Dr. ") + chunker.settle() == []  # an abbreviation still never ends one
    assert chunker.push("Smith is here") + chunker.settle() == []  # no sentence mark at the end
    assert chunker.push(" at 3.") + chunker.settle() == []  # no whitespace: "3.14" may follow
    assert chunker.push("14 now. ") + chunker.settle() == ["Dr. Smith is here at 3.14 now."]
    assert chunker.push("你好。") + chunker.settle() == ["你好。"]  # a CJK stop needs no whitespace
    assert chunker.flush() == []
