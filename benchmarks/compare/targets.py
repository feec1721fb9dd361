"""Targets of ``python -m benchmarks compare``: ``NAME=URL[#voice=V&format=F&FIELD=VALUE...]`` parsed
into a :class:`Target`. docs/benchmarks.md ("Compare with your current TTS server") lists the URL
forms and what the fragment's fields do; the fragment is this tool's, never sent with the URL.

Every client (:mod:`.http`, :mod:`.bidi`) offers ``session()`` (whose ``request(texts)`` returns one
:class:`benchmarks.clients.Timing` per text, times from the first send), ``health()``,
``bad_input(case, text, next_text)`` and ``aclose()``; what a protocol cannot do raises
:class:`benchmarks.clients.Unsupported`, which the row reports instead of failing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

KINDS = {
    "ws": "ws", "wss": "ws", "http": "invocations", "https": "invocations",
    "openai+http": "openai", "openai+https": "openai",
    "sagemaker": "sagemaker", "sagemaker+invocations": "sagemaker-invocations",
}
#: The kinds of malformed input row 6 sends, in order.
BAD_CASES = ("invalid_json", "whitespace_text", "unknown_voice", "over_limit")
UNKNOWN_VOICE = "no_such_voice_xx"


@dataclass
class Target:
    """One ``NAME=URL`` of the command line; ``url`` without its ``#...`` fragment."""

    name: str
    url: str
    kind: str
    voice: str | None = None
    #: a SageMaker target's ``?region=R``
    region: str | None = None
    #: ``pcm`` or ``wav``: the format asked of an HTTP target (``None``: ``pcm``, then ``wav`` if refused)
    audio_format: str | None = None
    #: fields added to every synthesis request (``lang``, ``speed``, ...)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def host(self) -> str:
        """The endpoint name of a SageMaker target, else ``host:port``."""
        return urlsplit(self.url).netloc

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "kind": self.kind, "voice": self.voice,
                "format": self.audio_format, "extra": self.extra}


def parse_target(spec: str, *, default_voice: str | None = None) -> Target:
    """``NAME=URL[#voice=V&format=F&FIELD=VALUE...]`` -> :class:`Target` (``ValueError`` with the
    accepted forms when not)."""
    name, sep, url = spec.partition("=")
    if not sep or not name or not url:
        raise ValueError(f"--target wants NAME=URL, not {spec!r}")
    url, _, fragment = url.partition("#")
    frag = parse_qs(fragment)
    scheme = urlsplit(url).scheme
    if scheme not in KINDS:
        raise ValueError(f"{name}: unknown URL scheme {scheme!r}; use one of {', '.join(KINDS)}")
    kind = KINDS[scheme]
    if kind == "invocations" and not urlsplit(url).path.rstrip("/").endswith("/invocations"):
        url = url.rstrip("/") + "/invocations"
    region = parse_qs(urlsplit(url).query).get("region", [None])[-1]
    voice = frag.pop("voice", [default_voice])[-1]
    audio_format = frag.pop("format", [None])[-1]
    if audio_format not in (None, "pcm", "wav"):
        raise ValueError(f"{name}: #format= takes pcm or wav, not {audio_format!r}")
    extra = {k: _json_value(v[-1]) for k, v in frag.items()}
    return Target(name=name, url=url, kind=kind, voice=voice, region=region, audio_format=audio_format, extra=extra)


def _json_value(text: str) -> Any:
    """``1.0`` -> 1.0, ``true`` -> True, anything else the string itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float | bool) else text


def over_limit_text(chars: int) -> str:
    """A text of ``chars`` characters made of whole sentences (what a runaway reply looks like)."""
    sentence = "This sentence repeats until the request is longer than the server accepts. "
    return (sentence * (chars // len(sentence) + 1))[:chars]
