"""The official Kokoro v1.0 assets by name, and the verified, resumable HTTP download behind them.

:func:`fetch_official` brings the upstream ONNX model (``kokoro-v1.0.onnx``, float32) and the 54
voices (``voices-v1.0.bin``, one ``.npz``) of the kokoro-onnx release ``model-files-v1.0`` into a
model directory. Both files are pinned by size and SHA-256 (:data:`RELEASE`); the release itself
publishes no checksum file, so the values are the ones independent projects that pin these exact
URLs agree on (docs/models-and-voices.md says where they come from). The base URL is a setting
(``KOKORO_OFFICIAL_URL``), so a mirror or a test's local server can stand in for the upstream.

:func:`fetch_assets` copies whatever official assets a directory, an HTTPS URL or an ``s3://`` prefix
holds (``assets --source``), checked against its ``SHA256SUMS`` where it has one.

:func:`download` is the one HTTP download of the package (also used by ``fetch_assets``):

* streamed in 1 MiB blocks into ``.<name>.download`` beside the destination, never into memory;
* interrupted transfers resume with an HTTP ``Range`` request where the server honours it (206),
  else start over; network errors and 5xx answers are retried with a growing pause, a 404 or
  another 4xx is not (retrying cannot help);
* verified (size, then SHA-256) before anything is installed: a mismatch deletes the partial file
  and raises :class:`AssetError` naming the file, both digests and what to do;
* installed by an atomic rename, so the destination is either the old file or the verified new one.

Blocking (call it from a thread or a CLI, never the event loop); no retry sleeps past ``attempts``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path
from typing import Any, BinaryIO

#: The kokoro-onnx GitHub release that publishes the Kokoro v1.0 ONNX files.
OFFICIAL_BASE_URL = "https://github.com/thewh1teagle/kokoro-onnx/releases/download/model-files-v1.0"
BLOCK = 1 << 20
#: The files of the official release a source may hold (``fetch_assets``).
OFFICIAL_FILES = ("kokoro-v1.0.onnx", "voices-v1.0.bin", "config.json", "kokoro-v1_0.pth")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ReleaseFile:
    """One pinned file of the official release."""

    name: str
    sha256: str
    size: int


#: What ``kokoro-serve assets --official`` fetches: the float32 model and the 54 voice packs.
RELEASE = (
    ReleaseFile("kokoro-v1.0.onnx", "7d5df8ecf7d4b1878015a32686053fd0eebe2bc377234608764cc0ef3636a6c5", 325_532_387),
    ReleaseFile("voices-v1.0.bin", "bca610b8308e8d99f32e6fe4197e7ec01679264efed0cac9140fe9c29f1fbf7d", 28_214_398),
)


class AssetError(RuntimeError):
    """Assets are missing, corrupt or could not be fetched; the message says which and how to fix it.
    (Also importable from :mod:`backends.assets.build`.)"""


def _asset_error(message: str) -> Exception:
    return AssetError(message)


#: What to do when the upstream cannot be reached: the documented ways round it.
ELSEWHERE = ("take the files from a place you can reach: `kokoro-serve assets --source DIR|https://...|s3://...`, "
             "or KOKORO_OFFICIAL_URL=<a mirror of the model-files-v1.0 release> (docs/models-and-voices.md)")


class NotFound(Exception):
    """The server answered 404 (the caller decides whether a missing file is an error)."""


class _Retry(Exception):
    """A transient failure: the partial file is kept and the transfer resumed."""


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def atomic_write(dest: Path, mode: str = "wb") -> Iterator[Any]:
    """Write to a temporary file beside ``dest`` and rename it into place only on success."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def verified(path: Path, sha256: str, size: int | None = None) -> bool:
    """Whether ``path`` exists with this size (when given) and SHA-256."""
    path = Path(path)
    if not path.is_file() or (size is not None and path.stat().st_size != size):
        return False
    return sha256_file(path) == sha256


def _transfer(url: str, part: Path, size: int | None, timeout: float, progress: Progress, label: str) -> None:
    """One attempt: append to ``part`` from where it stops (or restart when the server ignores Range)."""
    offset = part.stat().st_size if part.is_file() else 0
    if size is not None and offset >= size:
        offset = 0  # all there yet unverified, or longer than it should be: start over
    request = urllib.request.Request(url, headers={"User-Agent": "kokoro-serve", "Range": f"bytes={offset}-"}
                                     if offset else {"User-Agent": "kokoro-serve"})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise NotFound(url) from e
        if e.code == 416:  # nothing past our offset: start over rather than guess
            part.unlink(missing_ok=True)
            raise _Retry(f"HTTP 416 for a resumed range of {url}") from e
        if e.code >= 500 or e.code == 429:
            raise _Retry(f"HTTP {e.code} from {url}") from e
        raise _asset_error(f"{url}: HTTP {e.code} {e.reason}; check the URL (KOKORO_OFFICIAL_URL or --source)") from e
    except (urllib.error.URLError, OSError, HTTPException) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, socket.gaierror):  # no DNS answer: offline, or a wrong host; retrying cannot help
            host = urllib.parse.urlparse(url).hostname
            raise _asset_error(f"cannot resolve {host} ({reason.strerror or reason}): offline? {ELSEWHERE}") from None
        raise _Retry(f"{url}: {reason}") from e
    with response:
        resumed = offset and response.status == 206
        if offset and not resumed:
            offset = 0
        expected = size or (offset + int(response.headers["Content-Length"])
                            if response.headers.get("Content-Length") else None)
        done, next_mark = offset, 0.0
        if resumed:
            progress(f"  {label}: resuming at {offset / 1e6:.1f} MB")
        try:
            with open(part, "ab" if resumed else "wb") as out:
                while block := response.read(BLOCK):
                    out.write(block)
                    done += len(block)
                    if expected and done / expected >= next_mark:
                        progress(f"  {label}: {done / 1e6:.1f} / {expected / 1e6:.1f} MB")
                        next_mark = done / expected + 0.1
                out.flush()
                os.fsync(out.fileno())
        except (OSError, HTTPException) as e:
            raise _Retry(f"{url}: transfer cut at {done / 1e6:.1f} MB ({e})") from e
    if size is not None and done < size:
        raise _Retry(f"{url}: transfer ended at {done} of {size} bytes")


def download(
    url: str,
    dest: Path,
    *,
    sha256: str | None = None,
    size: int | None = None,
    attempts: int = 4,
    timeout: float = 60.0,
    progress: Progress = lambda _m: None,
    sleep: Callable[[float], None] = time.sleep,
    checksum_from: str = "pinned",
    hint: str = f"Run the command again, or {ELSEWHERE}",
) -> Path:
    """Download ``url`` to ``dest``, verified against ``sha256``/``size`` when given; see the module doc.

    Raises :class:`NotFound` on a 404, :class:`AssetError` on anything else that
    fails for good (a checksum mismatch, a 4xx, ``attempts`` transient failures in a row).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f".{dest.name}.download")
    label = dest.name
    for attempt in range(1, attempts + 1):
        try:
            _transfer(url, part, size, timeout, progress, label)
            break
        except _Retry as e:
            if attempt == attempts:
                raise _asset_error(f"{label}: giving up after {attempts} attempts: {e}; run the command again "
                                   f"to resume, or {ELSEWHERE}") from None
            pause = min(2.0 ** (attempt - 1), 30.0)
            progress(f"  {label}: {e}; retrying in {pause:.0f}s ({attempt}/{attempts - 1})")
            sleep(pause)
    got_size = part.stat().st_size
    if size is not None and got_size != size:
        part.unlink(missing_ok=True)
        raise _asset_error(f"{label} from {url}: {got_size} bytes, expected {size}; nothing was installed. {hint}")
    if sha256 is not None:
        digest = sha256_file(part)
        if digest != sha256:
            part.unlink(missing_ok=True)
            raise _asset_error(
                f"{label} from {url} is corrupt: sha256 {digest} != {checksum_from} {sha256}; it was deleted "
                f"and nothing was installed. {hint}"
            )
    os.replace(part, dest)
    return dest


def fetch_official(
    model_dir: Path,
    *,
    base_url: str = OFFICIAL_BASE_URL,
    files: tuple[ReleaseFile, ...] | None = None,
    progress: Progress = lambda _m: None,
    **download_options: Any,
) -> list[str]:
    """Bring the pinned official files into ``model_dir``; returns the names downloaded (a file already
    there and verified is kept as it is)."""
    model_dir = Path(model_dir)
    fetched = []
    for item in files if files is not None else RELEASE:
        dest = model_dir / item.name
        if verified(dest, item.sha256, item.size):
            progress(f"{item.name}: present, sha256 verified")
            continue
        url = base_url.rstrip("/") + "/" + item.name
        progress(f"fetching {item.name} ({item.size / 1e6:.0f} MB) from {url}")
        try:
            download(url, dest, sha256=item.sha256, size=item.size, progress=progress, **download_options)
        except NotFound as e:
            raise _asset_error(f"{url}: not found (404); KOKORO_OFFICIAL_URL must be a base URL holding "
                               f"{', '.join(f.name for f in RELEASE)}") from e
        progress(f"{item.name}: sha256 verified")
        fetched.append(item.name)
    return fetched


# ------------------------------------------------------------------------------------------------
# Official assets from a directory, an HTTPS URL or an S3 prefix
# ------------------------------------------------------------------------------------------------
def _parse_sums(text: str) -> dict[str, str]:
    sums = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and len(parts[0]) == 64:
            sums[parts[1].lstrip("*")] = parts[0].lower()
    return sums


class _Source:
    """Reads named files from a directory, an HTTP(S) base URL or an s3:// prefix."""

    def __init__(self, source: str):
        self.source = source
        parsed = urllib.parse.urlparse(source)
        self.kind = {"http": "http", "https": "http", "s3": "s3"}.get(parsed.scheme, "dir")
        if self.kind == "s3":
            import boto3

            self._s3 = boto3.client("s3")
            self._bucket, self._prefix = parsed.netloc, parsed.path.lstrip("/").rstrip("/")

    def _url(self, name: str) -> str:
        return self.source.rstrip("/") + "/" + urllib.parse.quote(name)

    def open(self, name: str) -> BinaryIO | None:
        """A binary stream of ``name``, or None when the source does not have it."""
        if self.kind == "dir":
            path = Path(self.source) / name
            return open(path, "rb") if path.is_file() else None
        if self.kind == "http":
            try:
                response: BinaryIO = urllib.request.urlopen(self._url(name), timeout=60)
                return response
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    return None
                raise AssetError(f"{self._url(name)}: HTTP {e.code}") from e
            except urllib.error.URLError as e:
                raise AssetError(f"{self._url(name)}: {e.reason}") from e
        key = f"{self._prefix}/{name}" if self._prefix else name
        try:
            body: BinaryIO = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"]
            return body
        except self._s3.exceptions.NoSuchKey:
            return None

    def list_voice_files(self) -> list[str]:
        """Names of ``voices/*.pt`` at the source (directory and S3 only; HTTP has no listing)."""
        if self.kind == "dir":
            folder = Path(self.source) / "voices"
            return sorted(f"voices/{p.name}" for p in folder.glob("*.pt")) if folder.is_dir() else []
        if self.kind == "s3":
            prefix = f"{self._prefix}/voices/" if self._prefix else "voices/"
            pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=prefix)
            return sorted(
                "voices/" + o["Key"][len(prefix):] for page in pages for o in page.get("Contents", [])
                if o["Key"].endswith(".pt")
            )
        return []


@contextlib.contextmanager
def _aws_errors(source: str) -> Iterator[None]:
    """botocore's errors (no credentials, access denied, no such bucket, no network) as one-line AssetErrors."""
    try:
        yield
    except Exception as e:
        if not type(e).__module__.startswith("botocore"):
            raise
        if type(e).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
            raise AssetError(f"{source}: no AWS credentials found; set AWS_PROFILE (or AWS_ACCESS_KEY_ID and "
                             "AWS_SECRET_ACCESS_KEY) for an identity that may read it, or give --source a "
                             "directory or an https:// URL") from None
        detail = getattr(e, "response", {}).get("Error", {})
        what = f"{detail.get('Code')}: {detail.get('Message')}" if detail else str(e)
        raise AssetError(f"{source}: {what}; check the prefix and that your AWS identity may read it "
                         "(s3:GetObject, s3:ListBucket)") from None


def fetch_assets(source: str, model_dir: Path, *, progress: Progress = lambda _m: None) -> list[str]:
    """Copy the official assets that ``source`` has into ``model_dir``; returns the names fetched."""
    with _aws_errors(source):
        return _fetch_assets(source, model_dir, progress)


def _fetch_assets(source: str, model_dir: Path, progress: Progress) -> list[str]:
    src = _Source(source)
    sums_stream = src.open("SHA256SUMS")
    sums = _parse_sums(sums_stream.read().decode()) if sums_stream else {}
    if sums_stream:
        sums_stream.close()
    fetched = []
    for name in [*OFFICIAL_FILES, "kokoro-v1.0.fp16.onnx", *src.list_voice_files()]:
        if src.kind == "http":  # streamed, resumed or retried, verified, renamed into place
            try:
                download(src._url(name), model_dir / name, sha256=sums.get(name), progress=progress,
                         checksum_from="SHA256SUMS", hint="Check the source, then run the command again")
            except NotFound:
                continue
            progress(f"fetched {name} from {source}")
            fetched.append(name)
            continue
        stream = src.open(name)
        if stream is None:
            continue
        dest = model_dir / name
        progress(f"fetching {name} from {source}")
        h = hashlib.sha256()
        with stream, atomic_write(dest) as out:
            while block := stream.read(1 << 20):
                h.update(block)
                out.write(block)
            if name in sums and h.hexdigest() != sums[name]:
                raise AssetError(f"{name} from {source}: sha256 {h.hexdigest()} != SHA256SUMS {sums[name]}")
        fetched.append(name)
    if not fetched:
        raise AssetError(f"{source} has none of {', '.join(OFFICIAL_FILES)}")
    return fetched
