"""Streaming sentence chunker: feed text deltas from a language model, get complete sentences back as
soon as they end, so speech can start while the model is still writing. The agent cuts its model's
reply with it, and the server's streaming-input sessions (``server.streaming.text_stream``) cut the text that
voice-agent plugins send in pieces.

Rules (what a listener would expect; docs/runtimes.md repeats them):

* Sentence ends are those of :mod:`backends.text.sentences`, the rules the server's text planner follows
  too: ``. ! ? …`` (then any closing quotes or brackets) before a word that starts a sentence, never
  after abbreviations, initialisms, initials, decimals, times or a line's list number (``Really?"
  she asked`` and ``Wait... what?`` are one chunk); newlines and CJK full stops always; a piece of
  punctuation alone is merged into the next chunk.
* ``max_chars``: a chunk that reaches this length without a sentence end is cut at its last clause
  mark (``, ; :``) or else its last space — never inside a word.
* ``first_clause_words``: optionally, the *first* chunk may end early at a clause mark once it holds
  that many words, so the first audio of a long answer starts sooner.
* :meth:`SentenceChunker.flush` returns whatever remains, even without a full stop.

A decision is only taken once the text that settles it has arrived (one character or one word of
lookahead), so the chunks do not depend on how the text was split into deltas. Joined with spaces the
chunks equal the input up to whitespace; no chunk is empty.

Pure Python (standard library only: the agent imports it), no I/O; one instance per stream, not thread-safe (use it from one task).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

from backends.text.sentences import CJK_TERMINATORS, CLOSERS, TERMINATORS, next_end, skip, speakable

CLAUSE_MARKS = ",;:，、；："


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

    def settle(self) -> list[str]:
        """The writer's message ended here: when the buffer ends with a sentence mark and whitespace
        (``"Hello there. "``; a CJK full stop needs none), decide that end now as if a sentence
        began next, instead of waiting for the next word, and return the chunks it completes. The
        other rules hold (``"Dr. "`` is no end); the rest stays buffered. The one cut this takes
        that waiting would not is before a lower-case word in the next message (``"Really? "`` +
        ``"she asked"``)."""
        stripped = self._buf.rstrip()
        core = stripped.rstrip(CLOSERS)
        if not core.endswith(tuple(TERMINATORS + CJK_TERMINATORS)):
            return []
        if stripped == self._buf and not core.endswith(tuple(CJK_TERMINATORS)):
            return []
        probe = " A" if stripped == self._buf else "A"  # the start of a sentence, never spoken
        self._buf += probe
        out: list[str] = []
        while (cut := self._next_cut(final=False)) is not None and cut <= len(self._buf) - len(probe):
            self._take(cut, out)
        self._buf = self._buf[: -len(probe)]
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
        # The buffer begins a line at the start of the stream; after a cut it does only when it
        # begins with the newline that ended the last chunk (which next_end sees itself).
        end, settled = next_end(self._buf, final=final, line_start=self._emitted == 0)
        early = self._early_cut(settled)
        return early if early is not None else end

    def _early_cut(self, limit: int) -> int | None:
        """A cut before ``limit`` (the first sentence end, or the first undecided mark): at the last
        clause mark or space once the chunk reaches ``max_chars``, or at the first clause mark of
        the first chunk once it holds ``first_clause_words`` words."""
        buf = self._buf
        n = len(buf)
        i = body_start = skip(buf, 0, " \t\r\n\f\v")
        words = 0
        in_word = False
        last_clause: int | None = None
        last_space: int | None = None
        while i < limit:
            ch = buf[i]
            if ch.isspace():
                words += in_word
                in_word = False
            else:
                in_word = True
            if i - body_start >= self.max_chars:
                cut = last_clause or last_space
                if cut is not None and speakable(buf[:cut]):
                    return cut
            if ch in TERMINATORS:  # a run the sentence rules did not cut at
                i = skip(buf, i, TERMINATORS)
                continue
            if ch.isspace():
                if ch != "\n":
                    last_space = i
                i += 1
                continue
            if ch in CLAUSE_MARKS:
                k = skip(buf, skip(buf, i, CLAUSE_MARKS), CLOSERS)
                if k < n and buf[k].isspace():
                    last_clause = k
                    if self._first_clause_due(words + 1):
                        return k
                i = k
                continue
            i += 1
        return None

    def _first_clause_due(self, words: int) -> bool:
        return self.first_clause_words is not None and self._emitted == 0 and words >= self.first_clause_words


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
