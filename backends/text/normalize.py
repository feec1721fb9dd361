"""English text normalisation: written forms -> the words a reader says, before G2P.

Handled (in this order, each a regular expression and ``num2words`` for the numbers): URLs and
e-mail addresses; ISO and US dates (``2024-03-05``, ``3/5/2024``); times (``2:30 pm``, ``14:05``,
``9am``); phone numbers (``555-123-4567``, ``+1 (555) 123-4567``); money (``$12.50``, ``£5``,
``€3.5 million``, ``$0.99``); percentages; numbers with a unit (``5 km``, ``20°C``, ``3.5GB``);
ordinals (``21st``); years (``1999``, ``2024`` next to a month or after ``in``/``since``/..., and
decades ``1990s``); decimals; cardinals, with thousands separators (``1,250``) and signs; ``&``,
``#5`` and ``No. 5``; common abbreviations (``Dr.``, ``Mr.``, ``St.``, ``e.g.``, ``etc.``, ``vs.``,
months). Numbers never reach the phonemiser as digits, so a comma inside ``1,250`` can no longer
end what espeak-ng reads.

Sentence splitting runs on the original text; this runs on each segment's text just before G2P
(``backends.text.g2p.frontends``), so segment texts (and word timings) keep what the client wrote.
:func:`normalize_english_mapped` gives the same text with each character's origin
(:mod:`backends.text.offsets`), so the G2P's word spans map back onto the segment's words.
Pure Python plus ``num2words``; thread-safe (no state).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from num2words import num2words

from backends.text.offsets import MappedText

__all__ = ["normalize_english", "normalize_english_mapped"]

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
_MONTH_ABBR = {m[:3]: m for m in MONTHS} | {"Sept": "September"}
_MONTH = "|".join(MONTHS + list(_MONTH_ABBR))

_CURRENCIES = {"$": ("dollar", "dollars", "cent", "cents"), "£": ("pound", "pounds", "penny", "pence"),
               "€": ("euro", "euros", "cent", "cents"), "¥": ("yen", "yen", "sen", "sen"),
               "₹": ("rupee", "rupees", "paisa", "paise")}
_SCALES = "thousand|million|billion|trillion"
_UNITS = {
    "km/h": "kilometers per hour", "kph": "kilometers per hour", "mph": "miles per hour",
    "km": "kilometers", "cm": "centimeters", "mm": "millimeters", "mi": "miles", "ft": "feet",
    "kg": "kilograms", "mg": "milligrams", "g": "grams", "lbs": "pounds", "lb": "pounds", "oz": "ounces",
    "ml": "milliliters", "mL": "milliliters", "L": "liters",
    "°C": "degrees Celsius", "°F": "degrees Fahrenheit", "°": "degrees",
    "TB": "terabytes", "GB": "gigabytes", "MB": "megabytes", "KB": "kilobytes", "kB": "kilobytes",
    "GHz": "gigahertz", "MHz": "megahertz", "kHz": "kilohertz", "Hz": "hertz",
    "kWh": "kilowatt hours", "kW": "kilowatts", "ms": "milliseconds", "min": "minutes", "hrs": "hours",
    "hr": "hours", "h": "hours", "sec": "seconds", "x": "times",
}
_SINGULAR = {"feet": "foot", "hertz": "hertz", "Celsius": "Celsius", "Fahrenheit": "Fahrenheit", "times": "time"}
_ABBREVIATIONS = {
    "Dr.": "Doctor", "Mr.": "Mister", "Mrs.": "Missus", "Ms.": "Miz", "Prof.": "Professor",
    "Jr.": "Junior", "Sr.": "Senior", "Mt.": "Mount", "Ave.": "Avenue", "Rd.": "Road", "Blvd.": "Boulevard",
    "Gov.": "Governor", "Sen.": "Senator", "Rep.": "Representative", "Gen.": "General", "Capt.": "Captain",
    "Lt.": "Lieutenant", "Sgt.": "Sergeant", "Inc.": "Incorporated", "Ltd.": "Limited", "Corp.": "Corporation",
    "Co.": "Company", "Dept.": "Department", "Univ.": "University", "approx.": "approximately",
    "vs.": "versus", "vs": "versus", "etc.": "et cetera", "e.g.": "for example", "i.e.": "that is",
    "a.m.": "ay em", "p.m.": "pee em", "U.S.": "U S", "U.K.": "U K", "Jan.": "January", "Feb.": "February",
    "Aug.": "August", "Sept.": "September", "Oct.": "October", "Nov.": "November", "Dec.": "December",
}
#: Abbreviations that precede a name: their period never ends a sentence.
_TITLES = frozenset("Dr. Mr. Mrs. Ms. Prof. Mt. Gov. Sen. Rep. Gen. Capt. Lt. Sgt. St. No.".split())
_YEAR_CUES = r"in|since|from|until|till|by|of|year|circa|before|after|during|around|early|late|mid|back"


def _words(text: str) -> str:
    """num2words output as plain words: no commas, no hyphens (both G2Ps read spaces best)."""
    return text.replace(",", "").replace("-", " ")


def _cardinal(number: str) -> str:
    return _words(num2words(int(number.replace(",", ""))))


def _number(number: str) -> str:
    """A written number (``1,250``, ``3.14``, ``.5``) as words."""
    number = number.replace(",", "")
    if "." in number:
        whole, _, frac = number.partition(".")
        head = _words(num2words(int(whole or "0")))
        return f"{head} point {' '.join(_words(num2words(int(d))) for d in frac)}" if frac else head
    return _words(num2words(int(number)))


def _year(number: str) -> str:
    return _words(num2words(int(number), to="year"))


def _ordinal(number: str) -> str:
    return _words(num2words(int(number.replace(",", "")), to="ordinal"))


def _digits(number: str) -> str:
    return " ".join(_words(num2words(int(d))) for d in number if d.isdigit())


_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"


def _url(m: re.Match[str]) -> str:
    url = re.sub(r"^https?://", "", m.group(0)).rstrip("/")
    parts = re.split(r"([./\-_:?=&#@])", url)
    names = {".": "dot", "/": "slash", "-": "dash", "_": "underscore", ":": "colon", "?": "question mark",
             "=": "equals", "&": "and", "#": "hash", "@": "at"}
    spoken = [names.get(p, _read_token(p)) for p in parts if p]
    return " ".join(spoken)


def _read_token(token: str) -> str:
    if token.lower() == "www":
        return "w w w"
    return re.sub(r"\d+", lambda m: f" {_digits(m.group(0))} ", token).strip()


def _email(m: re.Match[str]) -> str:
    user, _, domain = m.group(0).partition("@")
    return f"{_url(re.match(r'.+', user))} at {_url(re.match(r'.+', domain))}"  # type: ignore[arg-type]


def _date_iso(m: re.Match[str]) -> str:
    year, month, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return m.group(0)
    return f"{MONTHS[month - 1]} {_ordinal(str(day))}, {_year(str(year))}"


def _date_us(m: re.Match[str]) -> str:
    month, day, year = int(m.group(1)), int(m.group(2)), m.group(3)
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return m.group(0)
    year = str(2000 + int(year)) if len(year) == 2 else year
    return f"{MONTHS[month - 1]} {_ordinal(str(day))}, {_year(year)}"


def _time(m: re.Match[str]) -> str:
    hour, minute, meridiem = int(m.group(1)), m.group(2), (m.group(3) or "").lower().replace(".", "")
    spoken = _cardinal(str(hour))
    if minute and minute != "00":
        spoken += f" oh {_cardinal(minute[1])}" if minute[0] == "0" else f" {_cardinal(minute)}"
    elif not meridiem:
        spoken += " o'clock" if hour <= 12 else " hundred"
    if meridiem:
        spoken += " ay em" if meridiem.startswith("a") else " pee em"
        if m.group(3).endswith(".") and re.match(r"\s*$|\s+[A-Z]", m.string[m.end():m.end() + 2]):
            spoken += "."  # "p.m." also ended the sentence
    return spoken


def _phone(m: re.Match[str]) -> str:
    groups = [g for g in re.split(r"\D+", m.group(0)) if g]
    lead = "plus " if m.group(0).lstrip().startswith("+") else ""
    return lead + ", ".join(_digits(g) for g in groups)


def _money(m: re.Match[str]) -> str:
    symbol, amount, scale = m.group(1), m.group(2).replace(",", ""), m.group(3)
    one, many, sub_one, sub_many = _CURRENCIES[symbol]
    if scale:
        return f"{_number(amount)} {scale} {many}"
    whole, _, frac = amount.partition(".")
    units = int(whole or "0")
    cents = int((frac + "00")[:2]) if frac else 0
    parts = []
    if units or not cents:
        parts.append(f"{_cardinal(str(units))} {one if units == 1 else many}")
    if cents:
        parts.append(f"{_cardinal(str(cents))} {sub_one if cents == 1 else sub_many}")
    return " and ".join(parts)


def _unit(m: re.Match[str]) -> str:
    amount, unit = m.group(1), m.group(2)
    name = _UNITS[unit]
    if amount.replace(",", "") in ("1", "1.0"):
        head, _, tail = name.partition(" ")
        head = _SINGULAR.get(head, head[:-1] if head.endswith("s") else head)
        name = f"{head} {tail}".strip()
    return f"{_number(amount)} {name}"


def _decade(m: re.Match[str]) -> str:
    year = _year(m.group(1))  # "nineteen ninety" -> "nineteen nineties"
    return year[:-1] + "ies" if year.endswith("y") else year + "s"


def _abbreviation(m: re.Match[str]) -> str:
    word = m.group(0)
    if word == "St.":  # "St. Louis" (a name follows) is Saint; "Baker St." is Street
        after = m.string[m.end():m.end() + 2]
        return "Saint" if re.match(r" [A-Z]", after) else "Street"
    spoken = _ABBREVIATIONS.get(word, word)
    if word.endswith(".") and word not in _TITLES and re.match(r"\s*$|\s+[A-Z]", m.string[m.end():m.end() + 2]):
        return spoken + "."  # the abbreviation's period also ended the sentence
    if word == "No." and re.match(r" ?\d", m.string[m.end():m.end() + 2]):
        return "number"
    return spoken


_abbr_keys = sorted([*_ABBREVIATIONS, "St.", "No."], key=len, reverse=True)
_unit_keys = sorted(_UNITS, key=len, reverse=True)

#: (pattern, replacement), applied in order.
RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str] | str]] = [
    (re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b"), _email),
    (re.compile(r"\b(?:https?://|www\.)[^\s<>\"]+[^\s<>\".,;:!?)]"), _url),
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), _date_iso),
    (re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})\b"), _date_us),
    (re.compile(r"\b(\d{1,2}):(\d{2})(?:\s?([AaPp](?:\.[Mm]\.|[Mm]))(?=\W|$))?"), _time),
    (re.compile(r"\b(\d{1,2})()\s?([AaPp](?:\.[Mm]\.|[Mm]))(?=\W|$)"), _time),
    (re.compile(r"(?<![\w.])(?:\+\d{1,3}[\s.-]?)?(?:\(\d{3}\)\s?|\d{3}[\s.-])\d{3}[.-]\d{4}\b"), _phone),
    (re.compile(r"(?<![\w.])\d{3}-\d{4}\b"), _phone),
    (re.compile(rf"([$£€¥₹])\s?({_NUM})(?:\s({_SCALES})\b)?"), _money),
    (re.compile(rf"({_NUM})\s?%"), lambda m: f"{_number(m.group(1))} percent"),
    (re.compile(rf"({_NUM})\s?({'|'.join(map(re.escape, _unit_keys))})(?![\w/])"), _unit),
    (re.compile(r"\b(\d+)(?:st|nd|rd|th)\b"), lambda m: _ordinal(m.group(1))),
    (re.compile(r"\b(1[1-9]\d0|20[0-9]0)s\b"), _decade),
    (re.compile(rf"\b((?:{_MONTH}),? |\w+(?:st|nd|rd|th), |(?:{_YEAR_CUES}) )(1[1-9]\d\d|20\d\d)\b(?![.,]\d)"),
     lambda m: m.group(1) + _year(m.group(2))),
    (re.compile(r"\b(1[1-9]\d\d|20\d\d)\s?(BC|AD|BCE|CE)\b"), lambda m: f"{_year(m.group(1))} {' '.join(m.group(2))}"),
    (re.compile(r"(?:(?<=\s)|^)#(\d+)\b"), lambda m: f"number {_cardinal(m.group(1))}"),
    (re.compile("(?<![\\w.])(?:" + "|".join(map(re.escape, _abbr_keys)) + r")(?=\W|$)"), _abbreviation),
    (re.compile(r"(?<![\w.])(\d+)([A-Z])\b"), lambda m: f"{_cardinal(m.group(1))} {m.group(2)}"),
    (re.compile(rf"(?:(?<=\s)|^)[-−]({_NUM})\b"), lambda m: f"minus {_number(m.group(1))}"),
    (re.compile(rf"(?<![\w.])({_NUM})(?![\w])"), lambda m: _number(m.group(1))),
    (re.compile(r"\s&\s"), " and "),
]


_SPACES = re.compile(r"[ \t]{2,}")


def normalize_english(text: str) -> str:
    """``text`` with numbers, money, dates, times, units, URLs and abbreviations written out."""
    for pattern, repl in RULES:
        text = pattern.sub(repl, text)
    return _SPACES.sub(" ", text)


def normalize_english_mapped(text: str) -> MappedText:
    """:func:`normalize_english` of ``text`` (the same string) with, for each of its characters,
    the characters of ``text`` it was written for (word timings name the client's words)."""
    mapped = MappedText(text)
    for pattern, repl in RULES:
        mapped.sub(pattern, repl)
    return mapped.sub(_SPACES, " ")
