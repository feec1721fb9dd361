"""``kokoro-serve say TEXT -o FILE --url URL``: the same file, synthesised by a server already running.

Nothing is loaded here: the text goes to the server's ``POST /v1/audio/speech`` (every format ``say``
writes, with ``sample_rate`` and ``lang`` as extras), with ``KOKORO_API_KEY`` as the bearer key when
set, and the body is written as it arrives into a temporary file beside the target, renamed into place
only on success. A WAV written to a file gets its real sizes patched in (the streamed body carries
the "unknown" sizes); to stdout (``-o -``) it is written as received.

Blocking (urllib; a CLI, never the event loop). A refusal from the server is a
:class:`~backends.api.KokoroError` with the server's code and message; a server that cannot be reached
is one too (``unreachable``), naming the URL.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from backends.api import KokoroError
from server.cli.say import SayResult, _patch_wav_sizes, format_for

BLOCK = 1 << 16


def _request(url: str, body: dict[str, Any], api_key: str | None) -> urllib.request.Request:
    headers = {"Content-Type": "application/json", "User-Agent": "kokoro-serve say"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return urllib.request.Request(url.rstrip("/") + "/v1/audio/speech", data=json.dumps(body).encode(),
                                  headers=headers, method="POST")


def _refusal(error: urllib.error.HTTPError) -> KokoroError:
    try:
        detail = json.loads(error.read() or b"{}").get("error") or {}
    except ValueError:
        detail = {}
    code = detail.get("code") or f"http_{error.code}"
    return KokoroError(str(detail.get("message") or error.reason), code=str(code))


def say_remote(url: str, text: str, output: str, fmt: str | None = None, *, voice: str | None = None,
               speed: float = 1.0, sample_rate: int | None = None, lang: str | None = None,
               api_key: str | None = None, timeout: float = 300.0) -> SayResult:
    """Synthesise ``text`` on the server at ``url`` into ``output`` (a path, or ``"-"`` for stdout)."""
    fmt = format_for(output, fmt)
    body: dict[str, Any] = {"model": "kokoro", "input": text, "response_format": fmt, "speed": speed}
    body.update({k: v for k, v in (("voice", voice), ("sample_rate", sample_rate), ("lang", lang)) if v is not None})
    try:
        response = urllib.request.urlopen(_request(url, body, api_key), timeout=timeout)
    except urllib.error.HTTPError as e:
        raise _refusal(e) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise KokoroError(f"cannot reach the server at {url} ({reason}); start one with `kokoro-serve serve`, "
                          "or leave out --url to synthesise here", code="unreachable") from None
    rate = sample_rate or 24000
    target = None if output == "-" else Path(output)
    tmp = None if target is None else target.with_name(f".{target.name}.{secrets.token_hex(4)}.part")
    written = 0
    try:
        with response, (open(tmp, "xb") if tmp is not None else os.fdopen(os.dup(sys.stdout.fileno()), "wb")) as out:
            while block := response.read(BLOCK):
                if written == 0 and fmt == "wav" and len(block) >= 28:
                    rate = int.from_bytes(block[24:28], "little")  # the rate the server answers at
                out.write(block)
                written += len(block)
            if fmt == "wav" and tmp is not None:
                _patch_wav_sizes(out, rate, written)
        if tmp is not None and target is not None:
            os.replace(tmp, target)
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    samples = {"wav": (written - 44) // 2, "pcm": written // 2}.get(fmt)
    return SayResult(fmt, rate, samples / rate if samples is not None else 0.0, 0, written)
