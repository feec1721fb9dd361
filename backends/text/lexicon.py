"""Pronunciation control: Kokoro's inline syntax ``[word](/phonemes/)`` and a lexicon file.

Inline: ``[Kokoro](/kˈOkəɹO/)`` reads ``Kokoro`` as the phonemes between the slashes, on every
route and in every language; the phonemes go to the model as written (characters outside the
model's vocabulary are dropped). misaki's other link forms (``[word](-1)`` stress, ``[word](#flags)``)
are left to misaki in English and read as the bare word elsewhere.

Lexicon (``KOKORO_LEXICON``): a JSON file of ``{language: {word: phonemes}}``, with ``"*"`` for
entries every language shares, e.g. ``{"en-us": {"Kokoro": "kˈOkəɹO"}, "ja": {"東京": "toːkʲoː"}}``.
In Latin, Greek and Devanagari text an entry matches whole words, case-insensitively; in Japanese
and Mandarin (no spaces between words) it matches wherever the characters occur, longest entry
first. Each match is read as an inline form would be (:meth:`Lexicon.runs`), so both paths are one.

Immutable after loading; safe to share across threads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from backends.api import InvalidRequest
from backends.text.lang import CJK_LANGS, canonical_lang

#: ``[word](/phonemes/)``: Kokoro's (and misaki's) inline pronunciation.
INLINE = re.compile(r"\[([^\]\n]+)\]\(/([^/\n]*)/?\)")
#: misaki's other link forms: ``[word](-1)``, ``[word](+2)``, ``[word](0.5)``, ``[word](#flags#)``.
OTHER_LINK = re.compile(r"\[([^\]\n]+)\]\((?:[+-]?\d+(?:\.\d+)?|#[^)\n]*)\)")


def inline_runs(text: str) -> Iterator[tuple[int, int, str, str | None]]:
    """``text`` in order as plain runs and inline overrides, each with where it stands:
    ``(start, end, run, None)`` for a plain run, ``(start, end, word, phonemes)`` for an override
    (its range is its whole ``[word](/phonemes/)`` form)."""
    last = 0
    for m in INLINE.finditer(text):
        if m.start() > last:
            yield last, m.start(), text[last:m.start()], None
        yield m.start(), m.end(), m.group(1), m.group(2)
        last = m.end()
    if last < len(text):
        yield last, len(text), text[last:], None


def strip_links(text: str) -> str:
    """Inline forms replaced by their bare words (what sentence rules and word timings read)."""
    return OTHER_LINK.sub(r"\1", INLINE.sub(r"\1", text))


class Lexicon:
    """Word -> phonemes per language (see the module docstring)."""

    def __init__(self, entries: Mapping[str, Mapping[str, str]] | None = None):
        self._entries: dict[str, dict[str, str]] = {}
        for lang, words in (entries or {}).items():
            code = lang if lang == "*" else canonical_lang(lang)
            if not isinstance(words, Mapping) or not all(
                isinstance(w, str) and w.strip() and isinstance(p, str) and p.strip() for w, p in words.items()
            ):
                raise ValueError(f"{lang!r} must map words to phoneme strings")
            self._entries.setdefault(code, {}).update({w.strip(): p.strip().strip("/") for w, p in words.items()})
        self._patterns: dict[str, tuple[re.Pattern[str], dict[str, str]] | None] = {}

    @classmethod
    def from_file(cls, path: str | Path) -> Lexicon:
        """The lexicon in ``path``; a one-line ``ValueError`` naming the file and what is wrong with it."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"lexicon {path}: no such file") from None
        except OSError as e:
            raise ValueError(f"lexicon {path}: {e.strerror or e}") from None
        except ValueError as e:
            raise ValueError(f"lexicon {path}: not valid JSON ({e})") from None
        if not isinstance(data, dict):
            raise ValueError(f"lexicon {path}: expected a JSON object of languages")
        try:
            return cls(data)
        except InvalidRequest as e:  # an unknown language code
            raise ValueError(f"lexicon {path}: {e.message}") from None
        except ValueError as e:
            raise ValueError(f"lexicon {path}: {e}") from None

    def __len__(self) -> int:
        return sum(len(words) for words in self._entries.values())

    def _pattern(self, lang: str) -> tuple[re.Pattern[str], dict[str, str]] | None:
        if lang not in self._patterns:
            words = {**self._entries.get("*", {}), **self._entries.get(lang, {})}
            if not words:
                self._patterns[lang] = None
            else:
                cjk = lang in CJK_LANGS
                table = words if cjk else {w.lower(): p for w, p in words.items()}
                alternatives = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
                pattern = rf"(?:{alternatives})" if cjk else rf"(?<![\w\[])(?:{alternatives})(?![\w\]])"
                self._patterns[lang] = (re.compile(pattern, 0 if cjk else re.IGNORECASE), table)
        return self._patterns[lang]

    def runs(self, text: str, lang: str) -> Iterator[tuple[int, int, str, str | None]]:
        """:func:`inline_runs` of ``text`` with every lexicon word (outside inline forms) a run of its
        own with its phonemes: ``(start, end, run, phonemes)``, ``phonemes`` None for a run the G2P
        reads."""
        found = self._pattern(lang)
        for start, end, run, phonemes in inline_runs(text):
            if phonemes is not None or found is None:
                yield start, end, run, phonemes
                continue
            pattern, table = found
            cjk = lang in CJK_LANGS
            last = 0
            for m in pattern.finditer(run):
                if m.start() > last:
                    yield start + last, start + m.start(), run[last:m.start()], None
                yield start + m.start(), start + m.end(), m.group(0), table[m.group(0) if cjk else m.group(0).lower()]
                last = m.end()
            if last < len(run):
                yield start + last, end, run[last:], None
