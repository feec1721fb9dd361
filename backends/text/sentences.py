"""Where sentences end: one set of rules for the server's text planner and the agent's streaming chunker.

Rules (docs/runtimes.md states them for users):

* A sentence ends after ``. ! ? …`` (a run of them, then any closing quotes or brackets) when
  whitespace follows and the next word starts a sentence: after any opening quotes or brackets, a
  capital, a digit or a letter without case (CJK). ``Really?" she asked`` and ``Wait... what?``
  stay one sentence; so does anything followed by other punctuation.
* A single full stop never ends a sentence after an abbreviation or title (:data:`ABBREVIATIONS`:
  ``Dr.``, ``Mr.``, ``vs.``), an initialism (``U.S.``, ``e.g.``, ``p.m.``: dotted parts of one or
  two letters), a single-letter initial (``J. Smith``), or a number that opens its line (a list
  marker, ``1. First``). ``etc.`` may end a sentence. Decimals (``3.14``) and times (``2:30``)
  never cut, because no whitespace follows the mark.
* A newline always ends a sentence; CJK full stops (``。！？``) end one without needing whitespace.
* A piece with nothing speakable (no letter or digit: ``...``) is never a sentence of its own; it
  joins the next one.

A missed cut only makes a sentence longer; a false cut breaks its prosody, so ambiguous cases do not
cut. Streaming: with ``final=False`` a decision is only taken once the text that settles it has
arrived (one character or one word of lookahead), so a text split into deltas cuts where the whole
text cuts.

Pure Python, standard library only: the agent imports this module without numpy or any runtime.
"""

from __future__ import annotations

from collections.abc import Iterator

TERMINATORS = ".!?…"
CJK_TERMINATORS = "。！？"
CLOSERS = "\"'”’)]}»」』"
OPENERS = "\"'“‘([{«「『"
#: Words after which a single full stop never ends a sentence (lower case, without the stop).
ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt rev gen col lt sgt capt fig no vs cf viz approx dept est "
    "ca jan feb mar apr jun jul aug sep sept oct nov dec inc ltd co corp ave blvd".split()
)


def skip(text: str, i: int, chars: str) -> int:
    """The first offset at or after ``i`` whose character is not in ``chars``."""
    while i < len(text) and text[i] in chars:
        i += 1
    return i


def speakable(text: str) -> bool:
    return any(c.isalnum() for c in text)


def is_abbreviation(text: str, stop: int, *, line_start: bool = True) -> bool:
    """Whether the single full stop at ``text[stop]`` closes an abbreviation, initialism or initial.

    ``line_start``: whether ``text`` begins a line (a stream's buffer after a cut inside a line does not).
    """
    start = stop
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    # A CJK stop ends a sentence without whitespace: the word begins after it and its closers.
    cjk = max(text.rfind(c, start, stop) for c in CJK_TERMINATORS)
    if cjk >= 0:
        start = skip(text, cjk + 1, CLOSERS)
    word = text[start:stop].lstrip(OPENERS)
    if not word:
        return False
    low = word.lower()
    if low in ABBREVIATIONS:
        return True
    if len(word) == 1 and word.isalpha():  # an initial: "J. Smith"
        return True
    if "." in word and all(len(p) <= 2 and p.isalpha() for p in low.split(".")):  # U.S / e.g / a.m
        return True
    newline = text.rfind("\n", 0, start)  # a numbered list marker: "1. First step"
    if newline < 0 and not line_start:
        return False
    return word.isdigit() and not text[newline + 1 : start].strip()


def _starts_sentence(text: str, k: int, *, final: bool) -> bool | None:
    """Whether the word at ``text[k]`` can open a sentence; None until its first letter has arrived."""
    k = skip(text, k, OPENERS)
    if k >= len(text):
        return True if final else None
    c = text[k]
    return c.isdigit() or (c.isalpha() and not c.islower())


def _terminator_ends(text: str, start: int, end: int, after: int, *, final: bool, line_start: bool) -> bool | None:
    """Whether the mark run ``text[start:end]`` (closers up to ``after``) ends a sentence.

    None means the text that decides it has not arrived yet.
    """
    n = len(text)
    if after >= n:
        return True if final else None
    if not text[after].isspace():
        return False  # 3.14, e.g.x, example.com, "?!" inside a word
    k = after
    while k < n and text[k].isspace():
        if text[k] == "\n":
            return True
        k += 1
    if k >= n:
        return True if final else None
    starts = _starts_sentence(text, k, final=final)
    if not starts:
        return starts
    return not (text[start:end] == "." and is_abbreviation(text, start, line_start=line_start))


def _end_at(text: str, i: int, *, final: bool, line_start: bool) -> tuple[bool | None, int]:
    """The verdict on the character at ``i`` (True: a sentence ends at the returned offset; False:
    scanning goes on from it; None: undecided yet) and the offset to go on from."""
    ch = text[i]
    if ch == "\n":
        return True, i
    if ch in CJK_TERMINATORS:
        j = skip(text, skip(text, i, TERMINATORS + CJK_TERMINATORS), CLOSERS)
        if j >= len(text) and not final:
            return None, i  # more stops or closers may follow
        return True, j
    if ch in TERMINATORS:
        j = skip(text, i, TERMINATORS)
        k = skip(text, j, CLOSERS)
        verdict = _terminator_ends(text, i, j, k, final=final, line_start=line_start)
        return verdict, (i if verdict is None else k)
    return False, i + 1


def next_end(text: str, start: int = 0, *, final: bool = True, line_start: bool = True) -> tuple[int | None, int]:
    """The first sentence end in ``text[start:]``: ``(end, stop)``.

    ``end`` is the offset just after the sentence (before the newline that ends it), or None when
    ``text[start:]`` holds no complete sentence. ``stop`` is where the scan stopped: ``end``, or the
    end of the text, or — with ``final=False`` — the offset of the first mark that text still to come
    decides (everything before ``stop`` is settled). ``line_start``: whether ``text`` begins a line.
    """
    i = checked = start
    n = len(text)
    said = False  # whether text[start:checked] holds something to say
    while i < n:
        verdict, nxt = _end_at(text, i, final=final, line_start=line_start)
        if verdict is None:
            return None, nxt
        if verdict:
            said = said or speakable(text[checked:nxt])
            checked = max(checked, nxt)
            if said:
                return nxt, nxt
        i = nxt + 1 if verdict and nxt == i else max(nxt, i + 1)
    return None, n


def split_sentences(text: str) -> list[str]:
    """Split a whole text into sentences, stripped; joined they cover the text (up to whitespace)."""
    return list(iter_sentences(text))


def iter_sentences(text: str) -> Iterator[str]:
    """:func:`split_sentences` one sentence at a time, each found when it is asked for (a long
    text's first sentence costs the scan of that sentence only)."""
    start = 0
    while True:
        end, _ = next_end(text, start)
        if end is None:
            break
        piece = text[start:end].strip()
        if piece:
            yield piece
        start = end
    tail = text[start:].strip()
    if tail:
        yield tail
