"""Text -> segments: normalise, split into sentences, keep every segment within the model's phoneme
limit, and cut the first segment early so first audio comes soon.

Rules (docs/runtimes.md states them for users):

* Sentences end where :mod:`backends.text.sentences` says (the rules the agent's chunker follows too):
  at ``. ! ? …`` before a word that starts a sentence, at CJK full stops and at newlines; never
  after abbreviations (``Dr.``, ``e.g.``, ``U.S.``), initials, decimals (``3.14``) or times (``2:30``).
* Japanese and Mandarin clauses end at their own marks (``、，；：``) as well, and their words are
  counted by characters (two to a word: :func:`count_words`), so their first segment is cut early
  too.
* No segment exceeds :data:`~backends.api.MAX_PHONEMES` phonemes: a long sentence is cut at clause
  punctuation (``, ; : —``) first, then between words, and only as a last resort inside a word.
* The first segment of a request may stop at a clause boundary after a few words
  (``first_segment_words`` .. ``first_segment_max_words``). When no clause mark comes within that
  window, it may stop at a word boundary that keeps a natural phrase (:func:`phrase_boundaries`):
  before a preposition, a conjunction or a relative word, never after a determiner, possessive or
  intensifier (inside a noun phrase), never before ``of`` or ``to`` (they bind to the word before),
  before ``and``/``or``/``but`` only when a new clause or noun phrase follows, and only with at
  least three words left for the rest. For a short first segment (``short_first_words``: the
  engine asks for one when the listener hears nothing yet) the window shrinks to that many words
  and, when no clause mark or phrase boundary comes within it, the cut may fall at a word
  boundary that is not inside a noun phrase nor after a word that needs what follows it, such as
  a subject pronoun or an auxiliary (:func:`word_boundaries`); with no such cut in the short
  window, the usual one applies. After a short cut, the rest of that
  sentence is cut at its clause marks too, so the segments after the short first one grow step by
  step. The first sentence (or clause, or phrase) always stands alone, and later segments pack
  whole sentences, each segment at most twice the size of the one before, up to
  ``segment_phonemes``, so synthesis keeps ahead of playback without gaps.
* Nothing is lost or duplicated: the segment texts, joined, are the normalised text (up to
  whitespace), and their phonemes, joined, are the whole text's (up to pauses and stress).
* Each segment keeps the words of its text and their spans of its phonemes from the same G2P call
  (:attr:`~backends.api.Segment.words`, when the pipeline has ``read``): packing joins them, the
  vocabulary filter moves them, so word timings need no second reading.
* Each segment says where it ends (:attr:`~backends.api.Segment.ends`): ``sentence`` (the last
  piece of a sentence), ``clause`` (at ``, ; : —``) or ``phrase`` (a cut between words inside a
  clause); the engine puts the reading's pause for that kind after it (:mod:`backends.engine.joins`). A
  ``phrase`` segment's phonemes end with ``phrase_end_mark`` when one is set, so the model reads
  the fragment as going on.
* For a runtime that decodes windows of a sentence (``windowed``), the segments of a first
  sentence cut early each carry that sentence (:attr:`~backends.api.Segment.sentence`: its
  segments' phonemes joined by spaces, and each one's share): the runtime reads the sentence as one
  utterance and sends it piece by piece, so the early cut keeps the sentence's intonation. Those
  segments are not packed with the next sentence (and take no ``phrase_end_mark``).

Pure Python plus the G2P callable; call from a worker thread (phonemisation is CPU work).
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from backends.api import MAX_PHONEMES, EmptyText, Segment, SentenceContext, WordSpan
from backends.text.boundaries import phrase_boundaries, word_boundaries
from backends.text.g2p.spans import Reading, compact, joined
from backends.text.sentences import iter_sentences, split_sentences

__all__ = [
    "SegmentPlan", "TextPipeline", "boundary_kind", "clause_boundaries", "count_words", "normalize",
    "phrase_boundaries", "split_sentences",
    "word_boundaries",
]

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200b-\u200f\u2028\u2029\ufeff]")
_CLAUSE = re.compile(r"[,;:]+[\"'”’)\]]*(?=\s)|\s[—–-]{1,2}(?=\s)|—|[、，；：]+[」』”’）)]*(?=.)")
#: Han, kana and Hangul characters: CJK text has no spaces, so its "words" are counted by characters.
_CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
#: CJK characters per word, for the first segment's word window (a Japanese or Chinese word is
#: about two characters).
CJK_CHARS_PER_WORD = 2


def count_words(text: str) -> int:
    """Words in ``text``: whitespace-separated words, with CJK characters counted two to a word."""
    cjk = len(_CJK_CHAR.findall(text))
    if not cjk:
        return len(text.split())
    return cjk // CJK_CHARS_PER_WORD + len(_CJK_CHAR.sub(" ", text).split())


def normalize(text: str) -> str:
    """NFC, control characters dropped, runs of spaces folded; newlines kept (they end sentences)."""
    text = unicodedata.normalize("NFC", text)
    text = _CONTROL.sub(" ", text).replace("\r\n", "\n").replace("\r", "\n")
    lines = [" ".join(line.split()) for line in text.split("\n")]
    return "\n".join(line for line in lines if line).strip()


def clause_boundaries(sentence: str) -> list[int]:
    """Offsets just after each clause mark, where a sentence may be cut."""
    return [m.end() for m in _CLAUSE.finditer(sentence) if 0 < m.end() < len(sentence)]


def _split_at(sentence: str, cuts: list[int]) -> list[str]:
    pieces, prev = [], 0
    for cut in [*cuts, len(sentence)]:
        piece = sentence[prev:cut].strip()
        if piece:
            pieces.append(piece)
        prev = cut
    return pieces


_SENTENCE_END = frozenset(".!?…。！？")
_CLAUSE_END = frozenset(",;:—–-、，；：")


def boundary_kind(text: str) -> str:
    """The kind of boundary a piece of a sentence ends at, by its last mark (closing quotes and
    brackets aside): ``sentence``, ``clause`` or ``phrase`` (no mark: a cut between words)."""
    last = text.rstrip().rstrip("\"'”’)]}»")[-1:]
    return "sentence" if last in _SENTENCE_END else "clause" if last and last in _CLAUSE_END else "phrase"


@dataclass(frozen=True)
class SegmentPlan:
    text: str
    phonemes: str
    ends: str = "sentence"
    sentence: SentenceContext | None = None
    words: tuple[WordSpan, ...] | None = None

    def then(self, piece: SegmentPlan) -> SegmentPlan:
        """This piece and ``piece`` as one, a space between (it ends where ``piece`` ends)."""
        words = None
        if self.words is not None and piece.words is not None:
            words = tuple(joined((self.phonemes, list(self.words)), (piece.phonemes, list(piece.words)),
                                 len(self.text) + 1)[1])
        return SegmentPlan(f"{self.text} {piece.text}", f"{self.phonemes} {piece.phonemes}", piece.ends, words=words)

    def ending(self, ends: str, sentence: SentenceContext | None = None) -> SegmentPlan:
        return SegmentPlan(self.text, self.phonemes, ends, sentence, self.words)


class TextPipeline:
    """Plans the segments of a request. ``phonemize(text, lang) -> str``; ``vocab`` filters phonemes
    to what the model knows, so ``len(segment.phonemes)`` is its token count; ``check(text, lang)``
    raises for letters ``phonemize`` would refuse (the whole text is checked before it is planned
    segment by segment). ``read(text, lang) -> (phonemes, words)`` (the G2P's
    :meth:`~backends.text.g2p.frontends.G2P.phonemize_words`), when given, is used instead of
    ``phonemize``, and each segment keeps its words' spans (:attr:`~backends.api.Segment.words`);
    without it, segments carry none."""

    def __init__(
        self,
        phonemize: Callable[[str, str], str],
        vocab: dict[str, int],
        *,
        first_segment_words: int = 3,
        first_segment_max_words: int = 12,
        segment_phonemes: int = 300,
        max_phonemes: int = MAX_PHONEMES,
        preload: Callable[[str], None] | None = None,
        check: Callable[[str, str], None] | None = None,
        phrase_end_mark: str = "",
        read: Callable[[str, str], Reading] | None = None,
    ):
        self._phonemize = phonemize
        self._read = read
        self._check = check
        self._preload = preload
        #: Put after the phonemes of a segment cut between words inside a clause (``phrase``), so
        #: the model reads it as going on rather than ending (docs/speech-quality.md measures it).
        self.phrase_end_mark = "".join(c for c in phrase_end_mark if c in vocab)
        self._vocab = vocab
        self.first_segment_words = first_segment_words
        self.first_segment_max_words = first_segment_max_words
        self.segment_phonemes = min(segment_phonemes, max_phonemes)
        self.max_phonemes = max_phonemes
        #: Later segments may always grow to this many phonemes, however short the one before.
        self.min_pack = 64

    def preload(self, lang: str) -> None:
        """Build ``lang``'s G2P front end now (blocking; the engine does it while the model loads)."""
        if self._preload is not None:
            self._preload(lang)

    def phonemes(self, text: str, lang: str) -> str:
        if self._read is not None:
            return self.reading(text, lang)[0]
        ph = self._phonemize(text, lang)
        return "".join(c for c in ph if c in self._vocab).strip()

    def reading(self, text: str, lang: str) -> tuple[str, tuple[WordSpan, ...] | None]:
        """:meth:`phonemes` and, with ``read``, each word's span of them (vocabulary-filtered)."""
        if self._read is None:
            return self.phonemes(text, lang), None
        ph, words = compact(*self._read(text, lang), self._vocab.__contains__)
        return ph, tuple(words)

    # -- budget ---------------------------------------------------------------------------------
    def _fit(self, text: str, lang: str) -> list[SegmentPlan]:
        """Pieces of ``text`` each within the phoneme limit: clauses, then words, then characters."""
        ph, spans = self.reading(text, lang)
        if len(ph) <= self.max_phonemes:
            return [SegmentPlan(text, ph, words=spans)]
        clauses = _split_at(text, clause_boundaries(text))
        if len(clauses) == 1:
            words = text.split()
            if len(words) == 1:  # one enormous "word": cut by characters
                half = len(text) // 2
                return self._fit(text[:half], lang) + self._fit(text[half:], lang)
            clauses = [" ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2 :])]
        out: list[SegmentPlan] = []
        for clause in clauses:
            out.extend(self._fit(clause, lang))
        return self._pack(out, self.max_phonemes)

    @staticmethod
    def _pack(pieces: list[SegmentPlan], budget: int) -> list[SegmentPlan]:
        out: list[SegmentPlan] = []
        for piece in pieces:
            if out and len(out[-1].phonemes) + 1 + len(piece.phonemes) <= budget:
                out[-1] = out[-1].then(piece)
            else:
                out.append(piece)
        return out

    # -- first segment --------------------------------------------------------------------------
    def _first_cut(self, sentence: str, short_words: int | None = None) -> int | None:
        """Where the first segment ends: the first clause mark in the word window, else the first
        phrase boundary in it (with three words or more left), else None (the whole sentence).
        ``short_words``: a short first segment; first try a window ending there, where a word boundary
        outside a noun phrase may serve too, then the usual window."""
        rules: list[tuple[Callable[[str], list[int]], int]] = [(clause_boundaries, 2), (phrase_boundaries, 3)]
        windows = [(rules, self.first_segment_max_words)]
        if short_words:
            short = min(self.first_segment_max_words, max(short_words, self.first_segment_words))
            windows.insert(0, ([*rules, (word_boundaries, 3)], short))
        for window_rules, max_words in windows:
            for boundaries, rest in window_rules:
                cut = self._cut_in_window(sentence, boundaries(sentence), rest, max_words)
                if cut is not None:
                    return cut
        return None

    def _cut_in_window(self, sentence: str, cuts: list[int], rest: int, max_words: int) -> int | None:
        n_words = count_words(sentence)
        for cut in cuts:
            before = count_words(sentence[:cut])
            if before < self.first_segment_words:
                continue
            if before > max_words:
                break
            if n_words - before >= rest:
                return cut
        return None

    def plan(
        self, text: str, *, voice: str, speed: float = 1.0, lang: str = "en-us", fast_first: bool = True,
        short_first_words: int | None = None, windowed: bool = False,
    ) -> list[Segment]:
        """The request's segments (see the module docstring). ``short_first_words``: cut the first
        segment short, after at most this many words where a cut can go. ``windowed``: the runtime
        decodes windows of a sentence, so the segments of a first sentence cut early carry it
        (:class:`~backends.api.SentenceContext`) and are not packed with other sentences."""
        return list(self.plan_iter(text, voice=voice, speed=speed, lang=lang, fast_first=fast_first,
                                   short_first_words=short_first_words, windowed=windowed))

    def plan_iter(
        self, text: str, *, voice: str, speed: float = 1.0, lang: str = "en-us", fast_first: bool = True,
        short_first_words: int | None = None, windowed: bool = False,
    ) -> Iterator[Segment]:
        """:meth:`plan_steps` without the flags."""
        return (segment for segment, _ in self.plan_steps(
            text, voice=voice, speed=speed, lang=lang, fast_first=fast_first, short_first_words=short_first_words,
            windowed=windowed))

    def plan_steps(
        self, text: str, *, voice: str, speed: float = 1.0, lang: str = "en-us", fast_first: bool = True,
        short_first_words: int | None = None, windowed: bool = False,
    ) -> Iterator[tuple[Segment, bool]]:
        """:meth:`plan`'s segments one at a time, each phonemised only when it is asked for: the
        first segment costs the G2P of its own clause (of its sentence, ``windowed``), not the
        whole text's, and a later one the G2P of the sentences it packs (and of the one after it,
        to know it does not fit). The whole text's letters are checked first (``check``), so a
        letter no front end reads is refused before any segment. Raises
        :class:`~backends.api.EmptyText` at the first segment when nothing in the text is spoken.
        Each comes with whether it is known to be the last (a segment handed on before the rest of
        the text is read is not; the iterator then ends without another). Not thread-safe: advance
        it from one thread at a time."""
        text = normalize(text)
        if self._check is not None:
            self._check(text, lang)
        # (text, ends its sentence): the first sentence now, the rest found as planning reaches them
        sentences = iter_sentences(text)
        units = [(sentence, True) for sentence in itertools.islice(sentences, 1)]
        first_units = 1
        if fast_first and units:
            cut = self._first_cut(units[0][0], short_first_words)
            if cut is not None:
                first, *rest = _split_at(units[0][0], [cut])
                if short_first_words and rest:
                    rest = _split_at(rest[0], clause_boundaries(rest[0]))
                units[:1] = [(first, not rest), *((r, i == len(rest) - 1) for i, r in enumerate(rest))]
                first_units = 1 + len(rest)
        mark = self.phrase_end_mark
        later = ((sentence, True) for sentence in sentences)
        for i, (p, final) in enumerate(self._grow(self._pieces(itertools.chain(units, later), first_units, lang,
                                                               windowed))):
            yield Segment(text=p.text, phonemes=p.phonemes + mark if mark and p.ends == "phrase" and p.sentence is None
                          and len(p.phonemes) < self.max_phonemes else p.phonemes,
                          voice=voice, speed=speed, index=i, lang=lang, ends=p.ends, sentence=p.sentence,
                          words=p.words), final

    def _pieces(self, units: Iterable[tuple[str, bool]], first_units: int, lang: str,
                windowed: bool) -> Iterator[SegmentPlan]:
        """Each unit's pieces within the phoneme limit, unit by unit; the first sentence's held until
        all of it is read when it becomes windows, and everything held until something is spoken."""
        held: list[SegmentPlan] = []
        spoken = False
        windows = windowed and first_units > 1
        for u, (unit, closes) in enumerate(units):
            fitted = self._fit(unit, lang)
            ends = [boundary_kind(p.text) for p in fitted[:-1]] + ["sentence" if closes else boundary_kind(unit)]
            held.extend(p.ending(end) for p, end in zip(fitted, ends, strict=True) if p.phonemes)
            if windows and u < first_units - 1:
                continue
            if windows and u == first_units - 1:
                held = self._windows(held)
            spoken = spoken or any(any(c.isalpha() for c in p.phonemes) for p in held)
            if spoken:
                yield from held
                held = []
        if not spoken:
            raise EmptyText("text has nothing to pronounce")

    def _windows(self, pieces: list[SegmentPlan]) -> list[SegmentPlan]:
        """The pieces of one sentence, each with its share of the sentence (its phonemes and the
        space after them); as they are when the sentence is too long for one model call."""
        sentence = " ".join(p.phonemes for p in pieces)
        if len(pieces) < 2 or len(sentence) > self.max_phonemes:
            return pieces
        out, at = [], 0
        for p in pieces:
            end = min(len(sentence), at + len(p.phonemes) + 1)
            out.append(p.ending(p.ends, SentenceContext(sentence, at, end)))
            at = end
        return out

    def _grow(self, pieces: Iterable[SegmentPlan]) -> Iterator[tuple[SegmentPlan, bool]]:
        """Pack pieces into segments that at most double in size, up to ``segment_phonemes``.

        The first piece always stands alone (first audio: it is handed on as soon as it is read),
        and each later segment may hold at most twice the phonemes of the one before it: its
        synthesis then takes about as long as the previous segment plays (at a real-time factor up
        to ~0.5), so playback has no gaps, while short sentences still share a segment once the
        stream is under way. A segment is handed on once the piece after it does not fit in it,
        with whether it is the last.
        """
        before = 0  # phonemes of the segment before ``last``
        last: SegmentPlan | None = None
        first = True
        for piece in pieces:
            if first:
                yield piece, False
                before, first = len(piece.phonemes), False
                continue
            if last is not None and last.sentence is None and piece.sentence is None:
                budget = min(self.segment_phonemes, max(2 * before, self.min_pack))
                if len(last.phonemes) + 1 + len(piece.phonemes) <= budget:
                    last = last.then(piece)
                    continue
            if last is not None:
                yield last, False
                before = len(last.phonemes)
            last = piece
        if last is not None:
            yield last, True
