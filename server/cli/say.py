"""Synthesise text into an audio file in any of the API's formats, segment by segment, with progress.

The piece behind ``kokoro-serve say TEXT -o FILE``: audio is encoded and written as each segment is
done (memory stays flat for long texts), into a temporary file next to the target that is renamed
into place only on success, so a failure or Ctrl-C never leaves a truncated file under the asked
name. A WAV written to a seekable file gets its real sizes patched in at the end; to a pipe
(``-`` / stdout) it keeps the streaming header (sizes ``0xFFFFFFFF``).

It goes through the same synthesis pipeline as the server's routes (``server.pipeline.synthesis``: admission,
prepare, first chunk, the chunk stream, closing), without metrics. Threading: ``say`` is a
coroutine on the caller's loop; encoding and file writes run in worker threads, synthesis in the
backend's. The backend must already be started (else ``not_ready``). Cancelling ``say`` closes the
backend stream (pending segments are not synthesised) and removes the temporary file.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from backends.api import Backend, SynthesisRequest
from backends.audio.encoders import check_format, wav_header
from server.pipeline.synthesis import Synthesis

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
    backend: Backend,
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
    binary file object). Raises the backend's :class:`~backends.api.KokoroError` on bad input."""
    name = getattr(output, "name", "") if not isinstance(output, str | os.PathLike) else output
    fmt = format_for(str(name or ""), fmt)
    report: Progress | None = stderr_progress() if progress is True else (progress or None)
    async with Synthesis(backend, "say") as job:
        job.admit()
        encoder = job.use_encoder(fmt, sample_rate)
        first = await job.open(
            SynthesisRequest(text=text, voice=voice, speed=speed, lang=lang, request_id="say", fast_first=False)
        )
        total = 1
        async with _Sink(output) as sink:
            seconds = 0.0
            done = 0
            async for chunk in job.chunks(first):
                await sink.write(await job.encode(chunk.audio))
                done += 1
                total = max(chunk.count, done)  # the segments planned so far; the whole plan at the last
                seconds += chunk.seconds
                if report is not None:
                    report(done, total, seconds)
            await sink.write(await job.flush())
            if fmt == "wav":
                await sink.patch_wav_sizes(encoder.sample_rate)
            sink.ok = True
        job.record(200)
    return SayResult(fmt, encoder.sample_rate, seconds, total, sink.written)


class _Sink:
    """Where ``say`` writes: a temporary file renamed over the target only on success (``ok``),
    stdout, or the caller's file object. Writes run in a worker thread."""

    def __init__(self, output: str | os.PathLike[str] | BinaryIO):
        self.output = output
        self.target: Path | None = None
        self.tmp_path: Path | None = None
        self.file: BinaryIO | None = None
        self.written = 0
        self.ok = False

    async def __aenter__(self) -> _Sink:
        output = self.output
        if isinstance(output, str | os.PathLike) and str(output) != "-":
            self.target = Path(output)
            # A fresh name beside the target (same file system for the rename; the umask's permissions).
            self.tmp_path = self.target.with_name(f".{self.target.name}.{secrets.token_hex(4)}.part")
            self.file = await asyncio.to_thread(open, self.tmp_path, "xb")  # closed in __aexit__
        elif isinstance(output, str | os.PathLike):
            self.file = sys.stdout.buffer
        else:
            self.file = output
        return self

    async def write(self, data: bytes) -> None:
        if data:
            assert self.file is not None
            await asyncio.to_thread(self.file.write, data)
            self.written += len(data)

    async def patch_wav_sizes(self, sample_rate: int) -> None:
        """The real sizes into the header, where the target is a file of ours (seekable)."""
        if self.target is not None and self.file is not None:
            await asyncio.to_thread(_patch_wav_sizes, self.file, sample_rate, self.written)

    async def __aexit__(self, *exc: object) -> None:
        assert self.file is not None
        if self.target is None:
            self.file.flush()
            return
        self.file.close()
        assert self.tmp_path is not None
        if self.ok:
            os.replace(self.tmp_path, self.target)
        else:
            self.tmp_path.unlink(missing_ok=True)


def _patch_wav_sizes(f: BinaryIO, sample_rate: int, total: int) -> None:
    f.seek(0)
    f.write(wav_header(sample_rate, data_size=total - 44))
    f.seek(0, os.SEEK_END)
