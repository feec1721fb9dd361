"""The errors the platform reports to a client: each carries a stable wire ``code``, the HTTP
``status`` it maps to, and whether a retry helps (``retryable``; compare livekit-agents'
``APIError.retryable``). Re-exported by :mod:`backends.api`."""

from __future__ import annotations

from typing import Any


class KokoroError(Exception):
    """Base of every error the platform reports to a client.

    ``code`` is the wire-level error code, ``status`` the HTTP status it maps to, and
    ``retryable`` says whether sending the same request again can succeed.
    """

    code = "internal_error"
    status = 500
    retryable = False

    def __init__(self, message: str, *, code: str | None = None, retryable: bool | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


class InvalidRequest(KokoroError):
    code, status = "invalid_request", 400


class InvalidJSON(InvalidRequest):
    code = "invalid_json"


class EmptyText(InvalidRequest):
    code = "empty_text"


class UnknownVoice(KokoroError):
    code, status = "unknown_voice", 404


class TextTooLong(KokoroError):
    code, status = "text_too_long", 413


class NotReady(KokoroError):
    code, status, retryable = "not_ready", 503, True


class Overloaded(KokoroError):
    code, status, retryable = "overloaded", 503, True


class SynthesisTimeout(KokoroError):
    code, status, retryable = "timeout", 504, True


class BackendFault(KokoroError):
    """The runtime failed on a request that was valid; the server itself stays up."""

    code, status, retryable = "backend_error", 500, True


class Unsupported(KokoroError):
    code, status = "unsupported", 501
