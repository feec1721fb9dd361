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

Call with the lock the G2P holds around espeak-ng (it keeps process-global state).
"""

from __future__ import annotations

import re
from typing import Any, Protocol

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


def phonemize_keeping_marks(backend: PhonemizerBackend, text: str) -> str:
    """The phonemes of ``text`` with its punctuation in place, whitespace folded to single spaces."""
    pairs = split_marks(text)
    pieces = [words for words, _ in pairs if words.strip()]
    said = backend.phonemize(pieces, strip=True) if pieces else []
    if len(said) != len(pieces):  # never pair a piece with another's phonemes: one call per piece
        said = [" ".join(backend.phonemize([p], strip=True)) for p in pieces]
    spoken = iter(said)
    out = "".join((next(spoken) if words.strip() else "") + marks for words, marks in pairs)
    return " ".join(out.split())
