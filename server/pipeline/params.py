"""Decode and validate client messages — shared by the WebSocket and POST routes.

Pure functions, no I/O: everything a client can send is checked here for type and range before
it reaches a backend, and every failure is a typed :class:`~backends.api.KokoroError`
(``invalid_json``, ``invalid_request``, ``empty_text``, ``text_too_long``). Voice names are only
checked for shape here; the backend checks them against the loaded set (``unknown_voice``).
Unknown fields are ignored, so clients may send more than this server understands.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass
from typing import Any

from backends.api import MAX_SPEED, MIN_SPEED, EmptyText, InvalidJSON, InvalidRequest, TextTooLong

#: Sample rates a client may ask for (``backends.audio.encoders`` resamples with soxr).
SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
HTTP_FORMATS = ("wav", "pcm", "mp3")
MAX_ID_CHARS = 128
MAX_VOICE_CHARS = 512


@dataclass(frozen=True, slots=True)
class SynthesisParams:
    """One validated synthesis request."""

    text: str
    request_id: str | int
    voice: str | None = None
    speed: float = 1.0
    lang: str | None = None
    sample_rate: int | None = None
    request_timestamp: Any = None


def decode_json(data: bytes | str) -> Any:
    """UTF-8 JSON from a text or binary frame (or a POST body). Raises :class:`InvalidJSON`."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidJSON(f"message is not UTF-8: {e.reason} at byte {e.start}") from None
    try:
        return json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise InvalidJSON(f"message is not valid JSON: {str(e)[:200]}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def decode_object(data: bytes | str) -> dict[str, Any]:
    obj = decode_json(data)
    if not isinstance(obj, dict):
        raise InvalidJSON(f"expected a JSON object, got {_kind(obj)}")
    return obj


def message_type(obj: dict[str, Any]) -> str:
    """``synthesize`` (the default), ``cancel`` or ``close``."""
    kind = obj.get("type", "synthesize")
    if kind is None:
        return "synthesize"
    if kind not in ("synthesize", "cancel", "close"):
        raise InvalidRequest(f"unknown message type {str(kind)[:40]!r}; expected synthesize, cancel or close")
    return str(kind)


def request_id_of(obj: Any) -> str | int | None:
    """The client's ``request_id`` when it is usable (str or int), else None."""
    if not isinstance(obj, dict):
        return None
    rid = obj.get("request_id")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        return None
    if isinstance(rid, str) and len(rid) > MAX_ID_CHARS:
        return None
    return rid


_ID_FIELD = re.compile(r'"request_id"\s*:\s*("(?:[^"\\]|\\.){0,128}"|-?\d{1,18})')  # MAX_ID_CHARS


def salvage_request_id(data: bytes | str) -> str | int | None:
    """The ``request_id`` of a message that is not valid JSON, when one can still be read from it
    (a ``NaN`` speed, a trailing comma, a cut-off message), so that its error names the request."""
    text = bytes(data).decode("utf-8", "replace") if isinstance(data, (bytes, bytearray, memoryview)) else data
    try:
        return request_id_of(json.loads(text))  # JSON but for NaN/Infinity, which this server refuses
    except (ValueError, RecursionError):
        pass
    match = _ID_FIELD.search(text)
    if match is None:
        return None
    try:
        return request_id_of({"request_id": json.loads(match.group(1))})
    except ValueError:
        return None


def parse_synthesis(obj: dict[str, Any], *, max_text_chars: int, text_field: str = "text") -> SynthesisParams:
    """Validate one synthesis request. Raises a :class:`KokoroError` naming the bad field."""
    rid = obj.get("request_id")
    if rid is None:
        rid = uuid.uuid4().hex
    elif isinstance(rid, bool) or not isinstance(rid, (str, int)) or (isinstance(rid, str) and len(rid) > MAX_ID_CHARS):
        raise InvalidRequest(f"'request_id' must be a string of at most {MAX_ID_CHARS} characters or an integer")

    if text_field not in obj:
        raise InvalidRequest(f"missing '{text_field}'")
    text = obj[text_field]
    if not isinstance(text, str):
        raise InvalidRequest(f"'{text_field}' must be a string, got {_kind(text)}")
    if len(text) > max_text_chars:
        raise TextTooLong(f"'{text_field}' has {len(text)} characters; the limit is {max_text_chars}")
    if not text.strip():
        raise EmptyText(f"'{text_field}' is empty")

    voice = obj.get("voice")
    if voice is not None and (not isinstance(voice, str) or not voice.strip() or len(voice) > MAX_VOICE_CHARS):
        raise InvalidRequest("'voice' must be a non-empty string naming a loaded voice or a blend")

    speed = obj.get("speed")
    if speed is None:
        speed = 1.0
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not _finite(speed):
        raise InvalidRequest(f"'speed' must be a number, got {_kind(speed)}")
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise InvalidRequest(f"'speed' must be between {MIN_SPEED} and {MAX_SPEED}, got {str(speed)[:40]}")

    rate = obj.get("sample_rate")
    if rate is not None:
        if isinstance(rate, float) and rate.is_integer():
            rate = int(rate)
        if isinstance(rate, bool) or not isinstance(rate, int) or rate not in SAMPLE_RATES:
            raise InvalidRequest(f"'sample_rate' must be one of {', '.join(map(str, SAMPLE_RATES))}")

    lang = obj.get("lang")
    if lang is not None and (not isinstance(lang, str) or not lang.strip() or len(lang) > 16):
        raise InvalidRequest("'lang' must be a language code such as 'en-us'")

    return SynthesisParams(
        text=text,
        request_id=rid,
        voice=voice,
        speed=float(speed),
        lang=lang,
        sample_rate=rate,
        request_timestamp=_timestamp(obj.get("request_timestamp")),
    )


def parse_http_options(obj: dict[str, Any], accept: str | None) -> tuple[str, bool]:
    """``format`` (or the Accept header when absent) and ``stream`` of a POST /invocations body."""
    fmt = obj.get("format")
    if fmt is None:
        fmt = _format_from_accept(accept)
    if not isinstance(fmt, str) or fmt.strip().lower() not in HTTP_FORMATS:
        raise InvalidRequest(f"'format' must be one of {', '.join(HTTP_FORMATS)}")
    stream = obj.get("stream", True)
    if stream is None:
        stream = True
    if not isinstance(stream, bool):
        raise InvalidRequest(f"'stream' must be true or false, got {_kind(stream)}")
    return fmt.strip().lower(), stream


def _format_from_accept(accept: str | None) -> str:
    for part in (accept or "").lower().split(","):
        media = part.split(";")[0].strip()
        if media in ("audio/wav", "audio/x-wav", "audio/wave"):
            return "wav"
        if media in ("audio/mpeg", "audio/mp3"):
            return "mp3"
        if media in ("audio/l16", "audio/pcm", "application/octet-stream"):
            return "pcm"
    return "wav"


def _timestamp(value: Any) -> Any:
    """Echo a client timestamp only when it is a plain number or a short string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and _finite(value) and abs(value) < 2**63:
        return value
    if isinstance(value, str) and len(value) <= 64:
        return value
    return None


def _finite(value: int | float) -> bool:
    """math.isfinite without its OverflowError on ints of hundreds of digits (valid JSON)."""
    return isinstance(value, int) or math.isfinite(value)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )
