"""Streaming sentence chunker: feed text deltas from a language model, get complete sentences back as
soon as they end, so speech can start while the model is still writing.

Rules (what a listener would expect; the README repeats them):

* A chunk ends after ``. ! ? …`` (a run of them, then any closing quotes or brackets) when whitespace
  follows and the next word does not start with a lower-case letter. ``Really?" she asked`` stays one
  chunk.
* No cut at abbreviations and titles (``Dr.``, ``Mr.``, ``e.g.``, ``vs.``), initialisms (``U.S.``,
  ``p.m.``), single-letter initials (``J. Smith``), decimals (``3.14``), times (``2:30``), or numbered
  list markers at the start of a line (``1. First``). A missed cut only makes a chunk longer; a false
  cut breaks the prosody of a sentence, so ambiguous cases do not cut.
* An ellipsis ends a chunk only when the next word starts a new sentence (``Wait... what?`` is one).
* Newlines always end a chunk, so list items and paragraphs are spoken separately.
* CJK full stops (``。！？``) end a chunk without needing whitespace.
* A chunk never consists of punctuation alone; such a piece is merged into the next one.
* ``max_chars``: a chunk that reaches this length without a sentence end is cut at its last clause
  mark (``, ; :``) or else its last space — never inside a word.
* ``first_clause_words``: optionally, the *first* chunk may end early at a clause mark once it holds
  that many words, so the first audio of a long answer starts sooner.
* :meth:`SentenceChunker.flush` returns whatever remains, even without a full stop.

A decision is only taken once the text that settles it has arrived (one character or one word of
lookahead), so the chunks do not depend on how the text was split into deltas. Joined with spaces the
chunks equal the input up to whitespace; no chunk is empty.

Pure Python, no I/O; one instance per stream, not thread-safe (use it from one task).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

TERMINATORS = ".!?…"
CJK_TERMINATORS = "。！？"
CLOSERS = "\"'”’)]}»」』"
CLAUSE_MARKS = ",;:，、；："
#: Words after which a full stop never ends a sentence (lower case, without the stop).
NEVER_ENDS = frozenset(
    "mr mrs ms dr prof sr st mt rev gen col lt sgt capt fig no vs cf viz approx dept est "
    "ca jan feb mar apr jun jul aug sep sept oct nov dec inc ltd co corp ave blvd".split()
)
_OPENERS = "\"'“‘([{«「『"


def _is_abbreviation(buf: str, stop: int) -> bool:
    """Whether the single full stop at ``buf[stop]`` closes an abbreviation, initialism or initial."""
    start = stop
    while start > 0 and not buf[start - 1].isspace():
        start -= 1
    word = buf[start:stop].lstrip(_OPENERS)
    if not word:
        return False
    low = word.lower()
    if low in NEVER_ENDS:
        return True
    if len(word) == 1 and word.isalpha():  # an initial: "J. Smith"
        return True
    if "." in word and all(len(p) <= 2 and p.isalpha() for p in low.split(".")):  # U.S / e.g / a.m
        return True
    # A numbered list marker at the start of a line: "1. First step".
    line_start = buf.rfind("\n", 0, start) + 1
    return word.isdigit() and not buf[line_start:start].strip()


class SentenceChunker:
    """Turns a stream of text deltas into speakable chunks (see the module docstring for the rules).

    ``push(delta)`` returns the chunks completed by that delta (often none); ``flush()`` returns the
    rest at the end of the stream and resets the chunker for reuse.
    """

    def __init__(self, *, max_chars: int = 400, first_clause_words: int | None = None) -> None:
        if max_chars < 20:
            raise ValueError("max_chars must be at least 20")
        if first_clause_words is not None and first_clause_words < 1:
            raise ValueError("first_clause_words must be positive")
        self.max_chars = max_chars
        self.first_clause_words = first_clause_words
        self._buf = ""
        self._emitted = 0

    def push(self, delta: str) -> list[str]:
        """Add a delta; return the chunks it completes, in order."""
        self._buf += delta
        out: list[str] = []
        while True:
            cut = self._next_cut(final=False)
            if cut is None:
                break
            self._take(cut, out)
        return out

    def flush(self) -> list[str]:
        """Return every remaining chunk (the last one possibly without a full stop) and reset."""
        out: list[str] = []
        while True:
            cut = self._next_cut(final=True)
            if cut is None:
                break
            self._take(cut, out)
        self._take(len(self._buf), out)
        self._buf = ""
        self._emitted = 0
        return out

    # ----------------------------------------------------------------------------------------
    def _take(self, cut: int, out: list[str]) -> None:
        chunk = self._buf[:cut].strip()
        self._buf = self._buf[cut:]
        if chunk:
            out.append(chunk)
            self._emitted += 1

    def _next_cut(self, *, final: bool) -> int | None:
        """Offset in the buffer where the first chunk ends, or None when not (yet) decidable."""
        buf = self._buf
        i = 0
        n = len(buf)
        while i < n and buf[i].isspace():
            i += 1
        body_start = i
        words = 0
        in_word = False
        last_clause = last_space = None
        while i < n:
            ch = buf[i]
            if ch.isspace():
                if in_word:
                    words += 1
                in_word = False
            elif not in_word:
                in_word = True
            if i - body_start >= self.max_chars:
                cut = last_clause or last_space
                if cut is not None and self._speakable(buf[:cut]):
                    return cut
            if ch == "\n":
                if self._speakable(buf[:i]):
                    return i
                i += 1
                continue
            if ch.isspace():
                last_space = i
                i += 1
                continue
            if ch in CJK_TERMINATORS:
                j = self._skip(buf, i, TERMINATORS + CJK_TERMINATORS)
                j = self._skip(buf, j, CLOSERS)
                if j >= n and not final:
                    return None  # more stops or closers may follow
                if self._speakable(buf[:j]):
                    return j
                i = j
                continue
            if ch in TERMINATORS:
                j = self._skip(buf, i, TERMINATORS)
                k = self._skip(buf, j, CLOSERS)
                verdict = self._sentence_ends(buf, i, j, k, final=final)
                if verdict is None:
                    return None
                if verdict and self._speakable(buf[:k]):
                    return k
                i = k
                continue
            if ch in CLAUSE_MARKS:
                k = self._skip(buf, self._skip(buf, i, CLAUSE_MARKS), CLOSERS)
                if k < n and buf[k].isspace():
                    last_clause = k
                    if (
                        self.first_clause_words is not None
                        and self._emitted == 0
                        and words + 1 >= self.first_clause_words
                    ):
                        return k
                i = k
                continue
            i += 1
        return None

    @staticmethod
    def _skip(buf: str, i: int, chars: str) -> int:
        while i < len(buf) and buf[i] in chars:
            i += 1
        return i

    @staticmethod
    def _speakable(text: str) -> bool:
        return any(c.isalnum() for c in text)

    @staticmethod
    def _sentence_ends(buf: str, start: int, end: int, after: int, *, final: bool) -> bool | None:
        """Whether the terminator run ``buf[start:end]`` (closers up to ``after``) ends a sentence.

        None means the text that decides it has not arrived yet.
        """
        n = len(buf)
        if after >= n:
            return True if final else None
        if not buf[after].isspace():
            return False  # 3.14, e.g.x, example.com, "?!" inside a word
        k = after
        while k < n and buf[k].isspace():
            if buf[k] == "\n":
                return True
            k += 1
        if k >= n:
            return True if final else None
        nxt = buf[k]
        if nxt.islower():
            return False
        run = buf[start:end]
        return not (run == "." and _is_abbreviation(buf, start))


async def chunk_stream(
    deltas: AsyncIterable[str], *, max_chars: int = 400, first_clause_words: int | None = None
) -> AsyncIterator[str]:
    """Async adapter: yield chunks as the deltas complete them, then the flushed remainder."""
    chunker = SentenceChunker(max_chars=max_chars, first_clause_words=first_clause_words)
    async for delta in deltas:
        for chunk in chunker.push(delta):
            yield chunk
    for chunk in chunker.flush():
        yield chunk
