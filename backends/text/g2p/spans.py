"""Word spans: which phonemes of a reading belong to which word of its text.

A front end that knows its words (misaki's tokens, OpenJTalk's morphemes, espeak-ng's words
aligned per clause: :mod:`backends.text.g2p.marks`) reports *raw spans* — a range of the text it
read and the range of its phonemes said for it — as :class:`~backends.api.WordSpan` values over
its own input and output. This module turns them into the words of a segment and keeps them true
while the phonemes are edited:

* :func:`compact` drops characters (the model's vocabulary), folds whitespace and strips, and
  moves the spans with the characters;
* :func:`text_words` groups raw spans into the words of the text: each whitespace-separated
  token (``"Hello,"``, ``"3.14"``) takes the phonemes of the spans that fall on it; tokens that
  share one span (``"2:30 pm"`` is read as one expression) share its phonemes by their letters; a
  token nothing was said for (a lone ``—``) gets an empty span. In Japanese and Mandarin (no
  spaces) the front end's own words are the words, each with the marks that follow it, so the
  words still cover the text. Spans of punctuation alone belong to no word.
* :func:`joined` concatenates the readings of two pieces the way the planner packs segments.

Pure functions, no state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from backends.api import WordSpan

_TOKEN = re.compile(r"\S+")

Reading = tuple[str, list[WordSpan]]


def compact(
    phonemes: str, spans: Sequence[WordSpan], keep: Callable[[str], bool] | None = None, *, fold: bool = False,
) -> Reading:
    """``phonemes`` without the characters ``keep`` refuses, stripped (and with each run of
    whitespace folded to one space when ``fold``), and ``spans`` on the result (a span loses the
    characters dropped from it, and any space at its edges)."""
    if _unchanged(phonemes, keep, fold):
        return phonemes, list(spans)  # (the front ends give spans without spaces at their edges)
    kept: list[int] = []
    chars: list[str] = []
    for i, c in enumerate(phonemes):
        if keep is not None and not keep(c):
            continue
        if c.isspace():
            if not chars or (fold and chars[-1] == " "):
                continue
            c = " " if fold else c
        kept.append(i)
        chars.append(c)
    while chars and chars[-1].isspace():
        chars.pop()
        kept.pop()
    index = [0] * (len(phonemes) + 1)
    j = 0
    for i in range(len(phonemes) + 1):
        while j < len(kept) and kept[j] < i:
            j += 1
        index[i] = j
    out = "".join(chars)
    return out, [_trimmed(out, WordSpan(s.start, s.end, index[s.ph_start], index[s.ph_end])) for s in spans]


_FOLDED = re.compile(r"\s\s|[^\S ]")


def _unchanged(phonemes: str, keep: Callable[[str], bool] | None, fold: bool) -> bool:
    """Whether :func:`compact` would leave ``phonemes`` as it is (most calls: a quick check)."""
    if phonemes != phonemes.strip() or (fold and _FOLDED.search(phonemes)):
        return False
    return keep is None or all(map(keep, set(phonemes)))


def _trimmed(phonemes: str, span: WordSpan) -> WordSpan:
    a, b = span.ph_start, span.ph_end
    while a < b and phonemes[a].isspace():
        a += 1
    while b > a and phonemes[b - 1].isspace():
        b -= 1
    return span if (a, b) == (span.ph_start, span.ph_end) else WordSpan(span.start, span.end, a, b)


def joined(first: Reading, second: Reading, text_shift: int, glue: str = " ") -> Reading:
    """The reading ``first + glue + second``, ``second``'s text starting ``text_shift`` characters
    into the joined text."""
    ph, spans = first
    shift = len(ph) + len(glue)
    return f"{ph}{glue}{second[0]}", [*spans, *(s.shifted(text_shift, shift) for s in second[1])]


def _spoken(text: str) -> bool:
    return any(c.isalnum() for c in text)


def _weight(token: str) -> int:
    return sum(c.isalnum() for c in token)


def text_words(text: str, phonemes: str, spans: Sequence[WordSpan], *, own_words: bool = False) -> list[WordSpan]:
    """The words of ``text`` with their phonemes, from the raw ``spans`` of its reading (see the
    module docstring). ``own_words``: the front end's words are the words (text without spaces)."""
    raw = [s for s in spans if s.end > s.start and _spoken(text[s.start:s.end])]
    if own_words:
        return _tiled(text, _merged(raw))
    tokens = [m.span() for m in _TOKEN.finditer(text)]
    # clusters: a run of tokens and the phonemes of the spans that fall on them
    clusters: list[list[int]] = []  # [first token, last token, ph_start, ph_end]
    t = 0
    for s in raw:
        while t < len(tokens) and tokens[t][1] <= s.start:
            t += 1
        last = t
        while last + 1 < len(tokens) and tokens[last + 1][0] < s.end:
            last += 1
        if t >= len(tokens):
            break
        if clusters and clusters[-1][1] >= t:
            c = clusters[-1]
            c[1], c[3] = max(c[1], last), max(c[3], s.ph_end)
        else:
            clusters.append([t, last, s.ph_start, s.ph_end])
    words: list[WordSpan] = []
    at = 0
    k = 0
    for first, last, p0, p1 in clusters:
        for i in range(k, first):  # tokens nothing was said for
            words.append(WordSpan(*tokens[i], at, at))
        at = max(at, p0)
        words.extend(_shared(phonemes, tokens[first:last + 1], text, at, max(at, p1)))
        at = max(at, p1)
        k = last + 1
    words.extend(WordSpan(*tokens[i], at, at) for i in range(k, len(tokens)))
    return words


def _merged(raw: list[WordSpan]) -> list[WordSpan]:
    out: list[WordSpan] = []
    for s in raw:
        if out and s.start < out[-1].end:
            last = out[-1]
            out[-1] = WordSpan(last.start, max(last.end, s.end), last.ph_start, max(last.ph_end, s.ph_end))
        else:
            out.append(s)
    return out


def _tiled(text: str, words: list[WordSpan]) -> list[WordSpan]:
    """Words that cover ``text``: the marks after a word (``、`` ``。``) and before the first are
    its own, as a token's marks are (``"Hello,"``); spaces stay between words."""
    out = []
    for k, w in enumerate(words):
        start = len(text) - len(text.lstrip()) if k == 0 else w.start
        end = words[k + 1].start if k + 1 < len(words) else len(text)
        piece = text[start:end]
        start += len(piece) - len(piece.lstrip())
        end = start + len(piece.strip())
        out.append(WordSpan(start, max(end, start), w.ph_start, w.ph_end))
    return out


def _shared(phonemes: str, tokens: list[tuple[int, int]], text: str, p0: int, p1: int) -> list[WordSpan]:
    """``phonemes[p0:p1]`` shared by ``tokens`` by their letters (one token takes it all)."""
    if len(tokens) == 1:
        return [_trimmed(phonemes, WordSpan(*tokens[0], p0, p1))]
    spoken = [i for i in range(p0, p1) if not phonemes[i].isspace()]
    weights = [_weight(text[a:b]) for a, b in tokens]
    total = sum(weights) or 1
    out, acc, at = [], 0, p0
    for (a, b), w in zip(tokens, weights, strict=True):
        lo = round(acc / total * len(spoken))
        acc += w
        hi = round(acc / total * len(spoken))
        if hi > lo:
            out.append(WordSpan(a, b, spoken[lo], spoken[hi - 1] + 1))
            at = spoken[hi - 1] + 1
        else:
            out.append(WordSpan(a, b, at, at))
    return out


def whole(text: str, phonemes: str) -> list[WordSpan]:
    """One raw span for all of ``text`` (a front end that reports no words: its tokens then share
    the phonemes by their letters)."""
    t = text.strip()
    if not t or not phonemes.strip():
        return []
    lead = len(text) - len(text.lstrip())
    return [WordSpan(lead, lead + len(t), 0, len(phonemes))]
