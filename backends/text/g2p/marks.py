"""Punctuation kept around an espeak-ng call, cut at the marks' own places.

espeak-ng drops punctuation, so the G2P hides the marks from it and puts them back: the text is cut
at each run of marks (``, ; : . ! ? — …`` quotes and brackets, with the spaces around them), the
pieces between are phonemised in one call, and each mark follows the phonemes of the piece before
it. A ``,`` or ``.`` between two digits is part of a number (``1,250``, ``12.50``), not a mark, so
the number reaches espeak-ng whole.

The ``phonemizer`` package does the same with ``preserve_punctuation=True``, but it finds each
piece by splitting the line at the first occurrence of the mark's text rather than at the mark
itself. A mark that also occurs inside an earlier number therefore cuts the line there, and the
rest of it is lost: ``"The invoice lists 1,250 units at $12.50 each,"`` came back as
``"The invoice lists one,"``. Cutting at the matched positions keeps every word.

Word spans (:func:`phonemize_words_keeping_marks`): espeak-ng reads each piece in context and
separates its words by spaces, but not always one phoneme word per text word — it runs unstressed
function words into the next (``of the`` -> ``ʌvðə``) and reads a number as several words
(``3.14`` -> ``θɹˈiː pɔɪnt wˈʌn fˈɔːɹ`` where no normaliser wrote it out first). Where the counts
agree, word k was read as phoneme word k. Where they do not, the piece's words are matched to its
phoneme words in order (:func:`align_words`): each text word takes one or more phoneme words, or
several text words share one, whichever pairing keeps each word's share of the phonemes closest
to its share of the letters (a dynamic programme over the two sequences, a few microseconds a
word); a shared phoneme word is divided by letters. No word is phonemised again on its own.

Call with the lock the G2P holds around espeak-ng (it keeps process-global state).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, Protocol

from backends.api import WordSpan
from backends.text.g2p.spans import Reading, compact, whole

#: The marks phonemizer keeps (its default set); ``,`` and ``.`` only where no digit is on both sides.
MARKS = ';:,.!?¡¿—…"«»“”(){}[]'
_DECIMAL = ",."
_OTHERS = "".join(m for m in MARKS if m not in _DECIMAL)
MARK_RUN = re.compile(
    rf"(?:\s*(?:[{re.escape(_OTHERS)}]|(?<![0-9])[{_DECIMAL}]|[{_DECIMAL}](?![0-9]))+\s*)+"
)


class PhonemizerBackend(Protocol):
    def phonemize(self, text: list[str], separator: Any = None, strip: bool = False, njobs: int = 1) -> list[str]: ...


def split_marks(text: str) -> list[tuple[str, str]]:
    """``text`` as (words, the marks after them) pairs, in order; joined, they are ``text``."""
    pairs, pos = [], 0
    for m in MARK_RUN.finditer(text):
        pairs.append((text[pos : m.start()], m.group()))
        pos = m.end()
    pairs.append((text[pos:], ""))
    return pairs


def read_pieces(backend: PhonemizerBackend, pieces: list[str]) -> list[str]:
    """espeak-ng's phonemes of each piece (one call; one per piece where the count comes back wrong)."""
    said = backend.phonemize(pieces, strip=True) if pieces else []
    if len(said) != len(pieces):
        said = [" ".join(backend.phonemize([p], strip=True)) for p in pieces]
    return list(said)


def phonemize_words_keeping_marks(read: Callable[[list[str]], list[str]], text: str) -> Reading:
    """The phonemes of ``text`` with its punctuation in place, whitespace folded to single spaces,
    and each word's span of them (marks belong to no word). ``read``: :func:`read_pieces` under the G2P's lock (the
    alignment runs after it, outside the lock)."""
    pairs = split_marks(text)
    spoken = iter(read([words for words, _ in pairs if words.strip()]))
    parts: list[str] = []
    spans: list[WordSpan] = []
    at = ph_at = 0
    for words, marks in pairs:
        if words.strip():
            ph = next(spoken)
            spans.extend(s.shifted(at, ph_at) for s in align_words(words, ph))
            parts.append(ph)
            ph_at += len(ph)
        parts.append(marks)
        ph_at += len(marks)
        at += len(words) + len(marks)
    return compact("".join(parts), spans, fold=True)


_WORD = re.compile(r"\S+")
_SPLIT, _JOIN = 6, 4  # the most phoneme words one word becomes, the most words one phoneme word holds
_PENALTY = 0.15  # per word beyond one to one: an even pairing wins a tie
_UNPAIRED = 2.0  # a word read as nothing, or a phoneme word of no word


def _letters(word: str) -> float:
    return sum(1.0 if c.isalpha() else 3.0 if c.isdigit() else 0.0 for c in word)  # a digit says ~3 phonemes


def align_words(text: str, phonemes: str) -> list[WordSpan]:
    """The words of ``text`` (split at spaces) and their spans of ``phonemes`` (espeak-ng's reading
    of ``text``, its words split at spaces), matched in order (see the module docstring)."""
    words = [m.span() for m in _WORD.finditer(text)]
    said = [m.span() for m in _WORD.finditer(phonemes)]
    if not words or not said:
        return []
    if len(words) == len(said):
        return [WordSpan(a, b, p, q) for (a, b), (p, q) in zip(words, said, strict=True)]
    est = [_letters(text[a:b]) for a, b in words]
    size = [q - p for p, q in said]
    scale = sum(size) / (sum(est) or 1.0)
    steps = _pairing([e * scale for e in est], size)
    if not steps:  # (never expected: the band holds a path) the words then share the piece by letters
        return whole(text, phonemes)
    out: list[WordSpan] = []
    i = j = 0
    for di, dj in steps:
        if dj == 0:
            out.append(WordSpan(*words[i], said[j][0] if j < len(said) else len(phonemes),
                                said[j][0] if j < len(said) else len(phonemes)))
        elif di == 1:
            out.append(WordSpan(*words[i], said[j][0], said[j + dj - 1][1]))
        elif di > 1:
            out.extend(_divided(words[i:i + di], est[i:i + di], said[j]))
        i, j = i + di, j + dj
    return out


def _pairing(est: list[float], size: list[int]) -> list[tuple[int, int]]:
    """The cheapest steps (words taken, phoneme words taken) through both sequences, within a band
    around the diagonal as wide as the difference of the counts and a little more."""
    n, m = len(est), len(size)
    e_at = [0.0]
    for e in est:
        e_at.append(e_at[-1] + e)
    s_at = [0.0]
    for z in size:
        s_at.append(s_at[-1] + z)
    # one to one, two to one either way; more only where the counts differ by that much
    moves = [(1, 1, 0.0), (1, 2, _PENALTY), (2, 1, _PENALTY)]
    moves += [(1, k, (k - 1) * _PENALTY) for k in range(3, _SPLIT + 1) if m - n >= k - 1]
    moves += [(k, 1, (k - 1) * _PENALTY) for k in range(3, _JOIN + 1) if n - m >= k - 1]
    inf = math.inf
    log = math.log
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    back = [[(0, 0)] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = 0.0
    band = abs(n - m) + 2
    for i in range(n + 1):
        centre = i * m // n
        row = cost[i]
        skip = 0.0 if i < n and est[i] == 0 else _UNPAIRED
        for j in range(max(0, centre - band), min(m, centre + band) + 1):
            c = row[j]
            if c == inf:
                continue
            if i < n and c + skip < cost[i + 1][j]:  # a word read as nothing (free for one with no letters)
                cost[i + 1][j], back[i + 1][j] = c + skip, (1, 0)
            if j < m and c + _UNPAIRED < row[j + 1]:  # a phoneme word of no word
                row[j + 1], back[i][j + 1] = c + _UNPAIRED, (0, 1)
            e0, s0 = e_at[i] - 0.5, s_at[j] - 0.5
            for di, dj, pen in moves:
                a, b = i + di, j + dj
                if a <= n and b <= m:
                    step = c + pen + log((s_at[b] - s0) / (e_at[a] - e0)) ** 2
                    if step < cost[a][b]:
                        cost[a][b], back[a][b] = step, (di, dj)
    if cost[n][m] == inf:
        return []
    steps = []
    i, j = n, m
    while i or j:
        di, dj = back[i][j]
        steps.append((di, dj))
        i, j = i - di, j - dj
    return steps[::-1]


def _divided(words: list[tuple[int, int]], est: list[float], said: tuple[int, int]) -> list[WordSpan]:
    """One phoneme word shared by several words, by their letters."""
    p, q = said
    total = sum(est) or 1.0
    out, acc = [], 0.0
    for (a, b), e in zip(words, est, strict=True):
        lo = p + round(acc / total * (q - p))
        acc += e
        hi = p + round(acc / total * (q - p))
        out.append(WordSpan(a, b, lo, hi))
    return out
