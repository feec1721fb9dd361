"""A string rewritten by regular-expression substitutions that still knows, for each of its
characters, which characters of the original it came from.

The English normaliser (:mod:`backends.text.normalize`) writes ``3.14`` as ``three point one
four`` and ``Dr.`` as ``Doctor`` before G2P; the word spans a front end finds in the rewritten
text are mapped back through this so word timings name the words the client wrote. A character
that a substitution wrote stands for the whole match it replaced; a character left alone stands
for itself. Pure Python, no state shared between instances.
"""

from __future__ import annotations

import re
from collections.abc import Callable

Replacement = Callable[[re.Match[str]], str] | str


class MappedText:
    """``text`` and, per character, the range ``[lo, hi)`` of the original it stands for."""

    __slots__ = ("hi", "lo", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.lo = list(range(len(text)))
        self.hi = list(range(1, len(text) + 1))

    def sub(self, pattern: re.Pattern[str], repl: Replacement) -> MappedText:
        """``pattern.sub(repl, text)`` in place, keeping the map (same matches, same result)."""
        text = self.text
        matches = list(pattern.finditer(text))
        if not matches:
            return self
        parts: list[str] = []
        lo: list[int] = []
        hi: list[int] = []
        pos = 0
        for m in matches:
            a, b = m.span()
            parts.append(text[pos:a])
            lo += self.lo[pos:a]
            hi += self.hi[pos:a]
            new = repl(m) if callable(repl) else m.expand(repl)
            o_lo = self.lo[a] if a < len(text) else (self.hi[-1] if text else 0)
            o_hi = self.hi[b - 1] if b > a else o_lo
            parts.append(new)
            lo += [o_lo] * len(new)
            hi += [o_hi] * len(new)
            pos = b
        parts.append(text[pos:])
        lo += self.lo[pos:]
        hi += self.hi[pos:]
        self.text, self.lo, self.hi = "".join(parts), lo, hi
        return self

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original range the characters ``text[start:end]`` stand for (``end > start``)."""
        return self.lo[start], self.hi[end - 1]
