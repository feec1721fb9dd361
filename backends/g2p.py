"""Grapheme-to-phoneme through espeak-ng, from the ``espeakng-loader`` wheel (fully offline).

espeak-ng keeps process-global state, so every call goes through one lock; a call takes well under a
millisecond per sentence, so the lock is never the bottleneck. Backends are created once per
language and reused. Call from a worker thread (``Backend.prepare`` does), never the event loop.
"""

from __future__ import annotations

import logging
import threading
import unicodedata

from .base import InvalidRequest

#: Kokoro's languages and the espeak-ng voice each uses.
LANGUAGES = {
    "en-us": "en-us",
    "en-gb": "en-gb",
    "es": "es",
    "fr-fr": "fr-fr",
    "hi": "hi",
    "it": "it",
    "pt-br": "pt-br",
    "ja": "ja",
    "cmn": "cmn",
}
#: The first letter of an official voice name says its language (af_heart -> a -> en-us).
VOICE_LANG_PREFIX = {
    "a": "en-us", "b": "en-gb", "e": "es", "f": "fr-fr", "h": "hi",
    "i": "it", "p": "pt-br", "j": "ja", "z": "cmn",
}


#: The scripts each language's espeak-ng voice reads. A letter of another script it would read
#: out as its name ("Japanese letter", "Arabic mim", ...): a request with one is refused
#: (``language_mismatch``) instead of being answered with that audio. Unlisted scripts and
#: symbols are left alone.
_LATIN = frozenset({"LATIN", "GREEK"})  # Greek letters are read by their names (alpha, beta)
LANGUAGE_SCRIPTS = {
    **{lang: _LATIN for lang in ("en-us", "en-gb", "es", "fr-fr", "it", "pt-br")},
    "ja": _LATIN | {"HIRAGANA", "KATAKANA", "CJK"},
    "cmn": _LATIN | {"CJK", "BOPOMOFO"},
    "hi": _LATIN | {"DEVANAGARI"},
}
#: Scripts checked, and the language that reads each (None: no Kokoro language does).
SCRIPT_LANGUAGE: dict[str, tuple[str, ...]] = {
    "HIRAGANA": ("ja",), "KATAKANA": ("ja",), "CJK": ("ja", "cmn"), "BOPOMOFO": ("cmn",), "DEVANAGARI": ("hi",),
    **{s: () for s in ("HANGUL", "CYRILLIC", "ARABIC", "HEBREW", "THAI", "GEORGIAN", "ARMENIAN", "BENGALI",
                       "TAMIL", "ETHIOPIC")},
}


def check_script(text: str, lang: str) -> None:
    """Raise ``InvalidRequest`` (``language_mismatch``) when ``text`` has letters of a script that
    ``lang`` cannot read — e.g. Japanese text with the default ``en-us``, which the offline
    (Japanese) voices make an easy mistake."""
    allowed = LANGUAGE_SCRIPTS.get(lang, _LATIN)
    for char in text:
        if char.isascii() or not char.isalpha():
            continue
        words = unicodedata.name(char, "").replace("-", " ").split()
        script = words[1] if len(words) > 1 and words[0] in ("FULLWIDTH", "HALFWIDTH") else words[0] if words else ""
        if script in SCRIPT_LANGUAGE and script not in allowed:
            readers = " or ".join(f'"{r}"' for r in SCRIPT_LANGUAGE[script])
            hint = f'; send "lang": {readers}' if readers else "; no supported language reads it"
            name = "CJK" if script == "CJK" else script.title()
            raise InvalidRequest(
                f"the text has {name} script ({char!r}), which lang {lang!r} cannot read{hint}",
                code="language_mismatch",
            )


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

    def _backend(self, lang: str):
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
        if lang not in LANGUAGES:
            raise InvalidRequest(
                f"unsupported language {lang!r}; supported: {', '.join(LANGUAGES)}", code="invalid_language"
            )
        if not text.strip():
            return ""
        check_script(text, lang)
        with self._lock:
            out = self._backend(lang).phonemize([text], strip=True)
        return " ".join(out[0].split()) if out else ""
