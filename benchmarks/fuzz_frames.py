"""Random and malformed WebSocket frames, and what each protocol may answer to them.

:func:`frame` draws one frame from a seeded :class:`random.Random`: random bytes, invalid UTF-8,
random text, JSON of every wrong shape, a valid message of the protocol with a field replaced by a
nasty value or with fields added, deep nesting, truncated JSON, an oversized message, a valid
message. :data:`PROTOCOLS` holds, per WebSocket protocol of the server, its path, valid messages,
the probe that must be answered after every fuzzed frame (the session is still up, in order), and
which server messages are typed answers. Used by the ``fuzz`` suite (``benchmarks.fuzz``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

NASTY: list[Any] = [
    None, True, 0, -1, 0.5, 2.5, 1e308, -1e308, 2**63, 10**400, 1e-320, "", " ", "\x00", "\u202e", "🙂" * 8,
    "../../etc/passwd", "af_test(1e400)+x(1)", "(" * 200, "x" * 5000, [], {}, [[[]]], {"a": {"b": None}},
    "NaN", "Infinity", "-0", "cancel", "close", "Close", "Clear", "Flush", "\ud800".encode("utf-8", "surrogatepass").decode(
        "utf-8", "replace"),
]


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(7 if depth < 3 else 4)
    if kind == 0:
        return rng.choice(NASTY)
    if kind == 1:
        return rng.randint(-(2**70), 2**70)
    if kind == 2:
        return "".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(12)))
    if kind == 3:
        return rng.random() * rng.choice([1, 1e6, -1e-6])
    if kind == 4:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["text", "type", "voice", "context_id", "transcript", "flush", "cancel", "continue", "close_context",
            "request_id", "speed", "sample_rate", "output_format", "voice_settings", "x"]
    return {rng.choice(keys): _value(rng, depth + 1) for _ in range(rng.randrange(5))}


def frame(rng: random.Random, valid: list[dict[str, Any]], max_bytes: int) -> bytes | str:
    """One fuzzed frame (``bytes``: a binary frame, ``str``: a text frame)."""
    kind = rng.randrange(11)
    message = dict(rng.choice(valid))
    if kind == 0:
        return rng.randbytes(rng.randrange(300))
    if kind == 1:
        raw = json.dumps(message).encode()
        cut = rng.randrange(1, len(raw))
        return raw[:cut] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80\x80"]) + raw[cut:]
    if kind == 2:
        return "".join(chr(rng.randrange(1, 0xD7FF)) for _ in range(rng.randrange(80)))
    if kind == 3:
        return json.dumps(_value(rng))
    if kind in (4, 5):  # a valid message with one field made nasty
        message[rng.choice(list(message))] = rng.choice(NASTY) if kind == 4 else _value(rng)
        return _encoded(rng, message)
    if kind == 6:
        message.update({rng.choice(["extra", "type", "flush", "cancel", "voice", "text"]): _value(rng)})
        return _encoded(rng, message)
    if kind == 7:
        n = rng.randrange(1, 3000)
        return rng.choice(["[", "{\"a\":"]) * n + "1" + rng.choice(["]", "}"]) * n
    if kind == 8:
        raw = json.dumps(message)
        return raw[: rng.randrange(len(raw))]
    if kind == 9:  # oversized: past the server's message limit
        return json.dumps({**message, "text": "word " * (max_bytes // 5 + 10)})
    return _encoded(rng, message)


def _encoded(rng: random.Random, message: dict[str, Any]) -> bytes | str:
    raw = json.dumps(message)
    return raw.encode() if rng.random() < 0.5 else raw  # SageMaker delivers binary frames


@dataclass(frozen=True)
class Protocol:
    """One WebSocket protocol as the fuzzer drives it."""

    path: str
    valid: list[dict[str, Any]]
    #: The probe's messages for probe number ``n``, and a predicate on a server message: its answer.
    probe: Callable[[int], list[dict[str, Any]]]
    answered: Callable[[int, dict[str, Any]], bool]
    #: Whether a server text message is one the protocol defines (a typed event, warning or error).
    typed: Callable[[dict[str, Any]], bool]
    #: Close codes the protocol sends on purpose (a client's close message, a limit).
    closes: tuple[int, ...] = (1000, 1008, 1009)


def _bidi_typed(m: dict[str, Any]) -> bool:
    return m.get("type") in ("synthesis_start", "synthesis_complete") or (
        m.get("type") == "error" and isinstance(m.get("code"), str) and bool(m.get("message")))


def _eleven_typed(m: dict[str, Any]) -> bool:
    return ("audio" in m and m.get("isFinal") is False) or m.get("isFinal") is True or (
        isinstance(m.get("error"), str) and isinstance(m.get("message"), str))


FMT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}


def protocols(voice: str) -> dict[str, Protocol]:
    """The four WebSocket protocols, for a server whose voices include ``voice``."""
    return {
        "bidi": Protocol(
            "/invocations-bidirectional-stream",
            [{"text": "Hi.", "voice": voice, "request_id": "f"}, {"type": "cancel"}, {"type": "cancel", "request_id": "f"},
             {"text": "Hello there.", "speed": 1.2, "sample_rate": 16000}],
            lambda n: [{"text": "Ok.", "request_id": f"probe-{n}"}],
            lambda n, m: m.get("type") in ("synthesis_complete", "error") and m.get("request_id") == f"probe-{n}",
            _bidi_typed),
        "deepgram": Protocol(
            f"/v1/speak?model={voice}&encoding=linear16&sample_rate=24000",
            [{"type": "Speak", "text": "Hi there."}, {"type": "Flush"}, {"type": "Clear"}, {"type": "KeepAlive"},
             {"type": "Speak", "text": "Hello"}],
            # (Flushed counts the socket's flushes, fuzzed ones too: an unknown type names the probe)
            lambda n: [{"type": "Flush"}, {"type": f"probe-{n}"}],
            lambda n, m: m.get("type") == "Warning" and f"'probe-{n}'" in str(m.get("description")),
            lambda m: m.get("type") in ("Metadata", "Flushed", "Cleared", "Warning")),
        "cartesia": Protocol(
            "/tts/websocket?cartesia_version=2025-04-16",
            [{"context_id": "f", "transcript": "Hi. ", "continue": True, "model_id": "sonic",
              "voice": {"mode": "id", "id": voice}, "output_format": FMT},
             {"context_id": "f", "cancel": True}, {"context_id": "f", "transcript": "", "continue": False}],
            lambda n: [{"context_id": f"probe-{n}", "transcript": "Ok.", "continue": False, "model_id": "sonic",
                        "voice": {"mode": "id", "id": voice}, "output_format": FMT}],
            lambda n, m: m.get("context_id") == f"probe-{n}" and (m.get("type") == "done" or (
                m.get("type") == "error" and m.get("done") is True)),
            lambda m: m.get("type") in ("chunk", "timestamps", "flush_done", "done") or (
                m.get("type") == "error" and isinstance(m.get("error"), str))),
        "elevenlabs": Protocol(
            f"/v1/text-to-speech/{voice}/multi-stream-input?output_format=pcm_24000",
            [{"text": " ", "context_id": "f"}, {"text": "Hi there. ", "context_id": "f"},
             {"context_id": "f", "flush": True}, {"context_id": "f", "close_context": True}, {"text": ""}],
            lambda n: [{"text": "Ok. ", "context_id": f"probe-{n}", "flush": True},
                       {"context_id": f"probe-{n}", "close_context": True}],
            lambda n, m: (m.get("contextId") == f"probe-{n}" and m.get("isFinal") is True) or (
                isinstance(m.get("error"), str) and f"probe-{n}" in str(m.get("message"))),
            _eleven_typed),
    }
