"""Grapheme-to-phoneme through espeak-ng, from the ``espeakng-loader`` wheel (fully offline).

espeak-ng keeps process-global state, so every call goes through one lock; a call takes well under a
millisecond per sentence, so the lock is never the bottleneck. Backends are created once per
language and reused. Call from a worker thread (``Backend.prepare`` does), never the event loop.
"""

from __future__ import annotations

import threading

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
                language_switch="remove-flags",
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
        with self._lock:
            out = self._backend(lang).phonemize([text], strip=True)
        return " ".join(out[0].split()) if out else ""
