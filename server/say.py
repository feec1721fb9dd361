"""Synthesise text into an audio file in any of the API's formats, segment by segment, with progress.

The piece behind ``kokoro-serve say TEXT -o FILE``: audio is encoded and written as each segment is
done (memory stays flat for long texts), into a temporary file next to the target that is renamed
into place only on success, so a failure or Ctrl-C never leaves a truncated file under the asked
name. A WAV written to a seekable file gets its real sizes patched in at the end; to a pipe
(``-`` / stdout) it keeps the streaming header (sizes ``0xFFFFFFFF``).

Threading: ``say`` is a coroutine on the caller's loop; encoding and file writes run in worker
threads, synthesis in the backend's. The backend must already be started. Cancelling ``say`` closes
the backend stream (pending segments are not synthesised) and removes the temporary file.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from backends.audio import check_format, make_encoder, wav_header
from backends.base import SynthesisRequest

Progress = Callable[[int, int, float], None]


@dataclass(frozen=True, slots=True)
class SayResult:
    format: str
    sample_rate: int
    seconds: float
    segments: int
    bytes_written: int


def format_for(path: str | os.PathLike[str], fmt: str | None = None) -> str:
    """``fmt`` if given, else the file's suffix when it names a format, else ``wav``."""
    if not fmt:
        suffix = Path(path).suffix.lstrip(".").lower()
        fmt = {"ogg": "opus", "raw": "pcm"}.get(suffix, suffix) if suffix else "wav"
    return check_format(fmt)  # InvalidRequest naming the formats


def stderr_progress(stream: TextIO | None = None) -> Progress:
    """A one-line progress display (``segment 3/12 · 14.2 s of audio``) for a terminal."""
    out = stream or sys.stderr

    def show(done: int, total: int, seconds: float) -> None:
        end = "\n" if done == total else ""
        out.write(f"\rsegment {done}/{total} · {seconds:.1f} s of audio{end}")
        out.flush()

    return show


async def say(
    backend: Any,
    text: str,
    output: str | os.PathLike[str] | BinaryIO,
    fmt: str | None = None,
    *,
    voice: str | None = None,
    speed: float = 1.0,
    sample_rate: int | None = None,
    lang: str | None = None,
    progress: bool | Progress = True,
) -> SayResult:
    """Synthesise ``text`` with ``backend`` into ``output`` (a path, ``"-"`` for stdout, or a
    binary file object). Raises the backend's :class:`~backends.base.KokoroError` on bad input."""
    name = getattr(output, "name", "") if not isinstance(output, str | os.PathLike) else output
    fmt = format_for(str(name or ""), fmt)
    encoder = make_encoder(fmt, sample_rate)
    request = await backend.prepare(
        SynthesisRequest(text=text, voice=voice, speed=speed, lang=lang, request_id="say", fast_first=False)
    )
    report: Progress | None = stderr_progress() if progress is True else (progress or None)

    target: Path | None = None
    tmp_path: Path | None = None
    if isinstance(output, str | os.PathLike) and str(output) != "-":
        target = Path(output)
        # A fresh name beside the target (same file system for the rename; the umask's permissions).
        tmp_path = target.with_name(f".{target.name}.{secrets.token_hex(4)}.part")
        sink: BinaryIO = await asyncio.to_thread(open, tmp_path, "xb")  # closed in the finally below
    elif isinstance(output, str | os.PathLike):
        sink = sys.stdout.buffer
    else:
        sink = output

    written, seconds, total = 0, 0.0, len(request.segments)

    def put(data: bytes) -> None:
        nonlocal written
        if data:
            sink.write(data)
            written += len(data)

    ok = False
    try:
        async with aclosing(backend.stream(request)) as chunks:
            done = 0
            async for chunk in chunks:
                await asyncio.to_thread(lambda a=chunk.audio: put(encoder.encode(a)))
                done += 1
                seconds += chunk.seconds
                if report is not None:
                    report(done, total, seconds)
        await asyncio.to_thread(lambda: put(encoder.flush()))
        if fmt == "wav" and target is not None:
            await asyncio.to_thread(_patch_wav_sizes, sink, encoder.sample_rate, written)
        ok = True
    finally:
        if not ok:
            encoder.close()
        if target is not None:
            sink.close()
            if ok:
                os.replace(tmp_path, target)  # type: ignore[arg-type]
            else:
                tmp_path.unlink(missing_ok=True)  # type: ignore[union-attr]
        else:
            sink.flush()
    return SayResult(fmt, encoder.sample_rate, seconds, total, written)


def _patch_wav_sizes(f: BinaryIO, sample_rate: int, total: int) -> None:
    f.seek(0)
    f.write(wav_header(sample_rate, data_size=total - 44))
    f.seek(0, os.SEEK_END)
