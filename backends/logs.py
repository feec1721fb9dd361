"""One log format per process: plain lines or JSON lines, on stderr (``KOKORO_LOG_FORMAT``).

:func:`configure` gives the root logger one handler and routes the libraries that install their
own (uvicorn, bedrock-agentcore) through it, so every line of a process — the server's or the
agent's — comes once, in one format. ``plain``: ``time LEVEL logger: message``; ``json``: one
object per line with ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, each field the
call passed as ``extra`` (``log.info("backend ready: ...", extra={"backend": "onnx"})`` gives a
``"backend"`` key, so a collector queries fields, not text) and, for an exception, ``error`` and
``traceback`` (what a log collector such as CloudWatch parses).

Pure Python, importable by the agent (no runtime, no server).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

FORMATS = ("plain", "json")
PLAIN = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: Loggers that carry their own handlers: routed to the root's (one line, one format).
ROUTED = ("uvicorn", "uvicorn.error", "uvicorn.access", "bedrock_agentcore", "bedrock_agentcore.app")
#: Loggers shown under another name: uvicorn's general logger is called ``uvicorn.error`` though
#: most of what it says is not (a refused WebSocket upgrade, a server started), and a log search
#: for errors should not find an ordinary 401 there.
RENAMED = {"uvicorn.error": "uvicorn"}


class _Rename(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.name = RENAMED.get(record.name, record.name)
        return True


#: The attributes every LogRecord has (and uvicorn's terminal-coloured copy of its message): anything
#: else on a record came from the call's ``extra``.
_RECORD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime",
                                                                                     "color_message"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with the call's ``extra`` fields as keys of their own."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRS and k not in entry
                      and not k.startswith("_")})
        if record.exc_info and record.exc_info[1] is not None:
            entry["error"] = f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def formatter(fmt: str) -> logging.Formatter:
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of {', '.join(FORMATS)}")
    return JsonFormatter() if fmt == "json" else logging.Formatter(PLAIN)


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]  # typeshed: generic only in stubs
    """A stream handler on whatever ``sys.stderr`` is when a record is written (not when the
    handler was made), so that code replacing stderr — a test's capture — never leaves it
    writing to a closed stream."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def configure(level: str = "info", fmt: str = "plain") -> logging.Handler:
    """Route every log line of this process through one handler on stderr. A handler
    ``logging.basicConfig`` or an earlier call installed is replaced; others (a test runner's
    capture) are left alone."""
    handler = StderrHandler()
    handler.setFormatter(formatter(fmt))
    handler.addFilter(_Rename())
    root = logging.getLogger()
    for old in list(root.handlers):
        if type(old) is logging.StreamHandler or isinstance(old, StderrHandler):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ROUTED:
        routed = logging.getLogger(name)
        for old in list(routed.handlers):
            routed.removeHandler(old)
        # A handler that drops nothing and writes nothing: a library that adds its own handler only
        # when it finds none (bedrock-agentcore's app does) leaves the logger to the root's. A level
        # it set before (an app built earlier in this process) goes too: the root's level decides.
        routed.addHandler(logging.NullHandler())
        routed.setLevel(logging.NOTSET)
        routed.propagate = True
    return handler
