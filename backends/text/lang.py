"""Languages: the codes Kokoro speaks, the scripts each reads, and the one rule that picks a
request's language (every route and protocol goes through :func:`resolve_lang`).

The rule:

1. an explicit ``lang`` wins (a few short forms are accepted: ``en`` -> ``en-us``, ``zh`` -> ``cmn``);
2. else the voice's language (official names: the first letter, ``af_heart`` -> ``en-us``; the five
   offline voices ``j*`` -> ``ja``) when the text is in that language's own script — Japanese text
   (kana or kanji) for a Japanese voice, Latin text for an English or Spanish voice, ...;
3. else the text's script: kana -> ``ja``; Han characters only -> the voice's CJK language
   (``ja`` or ``cmn``), ``cmn`` for any other voice; Devanagari -> ``hi``; Latin (or no letters
   at all) -> the server's default (``KOKORO_DEFAULT_LANG``).

So ``jm_kumo`` reads English text as English and Japanese text as Japanese. A letter of a script the
chosen language cannot read is refused (:func:`check_script`, ``language_mismatch``) instead of being
spelled out as its Unicode name ("Chinese letter", "Japanese letter").

Pure Python, no imports beyond the standard library: safe anywhere (the agent may use it too).
"""

from __future__ import annotations

import unicodedata

from backends.api import InvalidRequest

#: Kokoro's languages and the espeak-ng voice each uses (for the languages read by espeak-ng, and
#: for English words misaki's lexicon lacks).
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
#: Short forms a request may send for ``lang``.
LANG_ALIASES = {"en": "en-us", "zh": "cmn", "zh-cn": "cmn", "fr": "fr-fr", "pt": "pt-br", "ja-jp": "ja"}
#: The first letter of an official voice name says its language (af_heart -> a -> en-us).
VOICE_LANG_PREFIX = {
    "a": "en-us", "b": "en-gb", "e": "es", "f": "fr-fr", "h": "hi",
    "i": "it", "p": "pt-br", "j": "ja", "z": "cmn",
}
ENGLISH = frozenset({"en-us", "en-gb"})
CJK_LANGS = frozenset({"ja", "cmn"})

#: The scripts each language's G2P reads. A letter of another script it would read out as its
#: name ("Japanese letter", "Arabic mim", ...): a request with one is refused
#: (``language_mismatch``) instead of being answered with that audio. Unlisted scripts and
#: symbols are left alone.
_LATIN = frozenset({"LATIN", "GREEK"})  # Greek letters are read by their names (alpha, beta)
LANGUAGE_SCRIPTS = {
    **{lang: _LATIN for lang in ("en-us", "en-gb", "es", "fr-fr", "it", "pt-br")},
    "ja": _LATIN | {"HIRAGANA", "KATAKANA", "CJK"},
    "cmn": _LATIN | {"CJK", "BOPOMOFO"},
    "hi": _LATIN | {"DEVANAGARI"},
}
#: Each language's own script (rule 2: the text is "in the voice's language").
NATIVE_SCRIPTS = {
    **{lang: frozenset({"LATIN"}) for lang in ("en-us", "en-gb", "es", "fr-fr", "it", "pt-br")},
    "ja": frozenset({"HIRAGANA", "KATAKANA", "CJK"}),
    "cmn": frozenset({"CJK", "BOPOMOFO"}),
    "hi": frozenset({"DEVANAGARI"}),
}
#: Scripts checked, and the languages that read each (empty: no Kokoro language does).
SCRIPT_LANGUAGE: dict[str, tuple[str, ...]] = {
    "HIRAGANA": ("ja",), "KATAKANA": ("ja",), "CJK": ("ja", "cmn"), "BOPOMOFO": ("cmn",), "DEVANAGARI": ("hi",),
    **{s: () for s in ("HANGUL", "CYRILLIC", "ARABIC", "HEBREW", "THAI", "GEORGIAN", "ARMENIAN", "BENGALI",
                       "TAMIL", "ETHIOPIC")},
}
_KANA_MARKS = frozenset("ー々〆ヶ")  # prolonged sound mark, iteration marks: Japanese only


def script_of(char: str) -> str:
    """The Unicode script of a letter, from its name: ``LATIN``, ``HIRAGANA``, ``CJK`` (Han), ...;
    ``""`` for a character that is not a letter."""
    if char in _KANA_MARKS:
        return "KATAKANA"
    if not char.isalpha():
        return ""
    if char.isascii():
        return "LATIN"
    words = unicodedata.name(char, "").replace("-", " ").split()
    if not words:
        return ""
    return words[1] if len(words) > 1 and words[0] in ("FULLWIDTH", "HALFWIDTH") else words[0]


def scripts_in(text: str) -> set[str]:
    """The scripts of the letters in ``text``."""
    return {s for s in map(script_of, text) if s}


def canonical_lang(lang: str) -> str:
    """``lang`` as one of :data:`LANGUAGES` (short forms mapped); ``invalid_language`` otherwise."""
    code = LANG_ALIASES.get(lang, lang)
    if code not in LANGUAGES:
        raise InvalidRequest(
            f"unsupported language {lang!r}; supported: {', '.join(LANGUAGES)}", code="invalid_language"
        )
    return code


def voice_language(voice: str | None) -> str | None:
    """The language a voice name says (official names: the first letter; ``None`` when it says none).
    A blend speaks the language of its first part."""
    if not voice:
        return None
    name = voice.split("+", 1)[0].split("(", 1)[0].strip()
    if len(name) > 2 and name[1] in "fm" and name[2] == "_":
        return VOICE_LANG_PREFIX.get(name[0])
    return None


def resolve_lang(text: str, lang: str | None, voice_lang: str | None, default: str) -> str:
    """The language a request is read in (the module docstring's rule)."""
    if lang:
        return canonical_lang(lang)
    scripts = scripts_in(text)
    if voice_lang in NATIVE_SCRIPTS and _in_script(scripts, voice_lang):
        return voice_lang
    if scripts & {"HIRAGANA", "KATAKANA"}:
        return "ja"
    if "CJK" in scripts or "BOPOMOFO" in scripts:
        return voice_lang if voice_lang in CJK_LANGS and "BOPOMOFO" not in scripts else "cmn"
    if "DEVANAGARI" in scripts:
        return "hi"
    return canonical_lang(default)


def _in_script(scripts: set[str], lang: str) -> bool:
    """Whether text with letters of ``scripts`` is in ``lang``'s own script: it has some, and (for a
    Latin-script language) no letters of a script another language reads."""
    native = NATIVE_SCRIPTS[lang]
    if not scripts & native:
        return False
    if lang == "cmn" and scripts & {"HIRAGANA", "KATAKANA"}:
        return False  # kana: Japanese, whatever the voice
    return lang in CJK_LANGS or lang == "hi" or not (scripts - LANGUAGE_SCRIPTS[lang]) & set(SCRIPT_LANGUAGE)


def check_script(text: str, lang: str) -> None:
    """Raise ``InvalidRequest`` (``language_mismatch``) when ``text`` has letters of a script that
    ``lang`` cannot read — e.g. Japanese text sent with ``"lang": "en-us"``."""
    allowed = LANGUAGE_SCRIPTS.get(lang, _LATIN)
    for char in text:
        if char.isascii() or not char.isalpha():
            continue
        script = script_of(char)
        if script in SCRIPT_LANGUAGE and script not in allowed:
            readers = " or ".join(f'"{r}"' for r in SCRIPT_LANGUAGE[script])
            hint = f'; send "lang": {readers}' if readers else "; no supported language reads it"
            name = "CJK" if script == "CJK" else script.title()
            raise InvalidRequest(
                f"the text has {name} script ({char!r}), which lang {lang!r} cannot read{hint}",
                code="language_mismatch",
            )


#: The letters each CJK front end reads (OpenJTalk: kana, kanji, Latin; misaki's Mandarin: Han and,
#: through the English front end, Latin). Others would vanish silently: ``unreadable_text``.
READABLE_SCRIPTS = {
    "ja": frozenset({"HIRAGANA", "KATAKANA", "CJK", "LATIN"}),
    "cmn": frozenset({"CJK", "LATIN"}),
}


def check_readable(text: str, lang: str) -> None:
    """Raise ``InvalidRequest`` (``unreadable_text``) naming the letters of ``text`` that ``lang``'s
    front end would drop (Greek letters or bopomofo in Japanese or Mandarin text)."""
    readable = READABLE_SCRIPTS.get(lang)
    if readable is None:
        return
    bad = sorted({c for c in text if (script := script_of(c)) and script not in readable})
    if bad:
        raise unreadable(bad, lang)


def unreadable(words: list[str], lang: str) -> InvalidRequest:
    """The typed error for words or letters no front end of ``lang`` can read."""
    shown = ", ".join(repr(w) for w in words[:5])
    return InvalidRequest(f"lang {lang!r} cannot read {shown}; write it out, or give its phonemes as "
                          f"[word](/phonemes/)", code="unreadable_text")
