"""Pack a model directory as SageMaker's ``model.tar.gz`` and upload it to S3.

SageMaker downloads ``ModelDataUrl`` and unpacks it into ``/opt/ml/model`` before the container
starts; the ``serve`` entry then uses that directory as ``KOKORO_MODEL_DIR``. So the archive
holds the model directory's files at its root (``kokoro-v1.0.onnx``, ``config.json``,
``voices.npz``, ...), not under a folder.

    python -m deploy.sagemaker.package_model --model-dir ~/.cache/kokoro-serve/models \
        --s3-uri s3://my-bucket/kokoro/model.tar.gz

The upload is skipped when the object already exists with the same content digest (stored as
object metadata), so re-running a deploy does not re-upload hundreds of megabytes. boto3 is
imported only when uploading.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tarfile
from pathlib import Path
from typing import Any

DIGEST_METADATA_KEY = "kokoro-sha256"


def model_files(model_dir: Path) -> list[Path]:
    """The files that go into the archive: regular, non-hidden files, sorted (relative paths)."""
    files = []
    for path in sorted(model_dir.rglob("*")):
        rel = path.relative_to(model_dir)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        files.append(rel)
    return files


def build_tarball(model_dir: Path, out: Path) -> str:
    """Write ``out`` (gzip tar, files at the root) and return the sha256 of the archive.

    The archive is reproducible: fixed mtimes, owners and modes, so the same directory gives
    the same digest and the upload can be skipped.
    """
    model_dir = Path(model_dir)
    files = model_files(model_dir)
    if not files:
        raise ValueError(f"{model_dir}: no model files to package")
    out.parent.mkdir(parents=True, exist_ok=True)
    import gzip

    with open(out, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel in files:
                info = tar.gettarinfo(str(model_dir / rel), arcname=rel.as_posix())
                info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, 0, 0, "", "", 0o644
                with open(model_dir / rel, "rb") as fh:
                    tar.addfile(info, fh)
    return sha256_file(out)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def split_s3_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        raise ValueError(f"not an s3://bucket/key URI: {uri!r}")
    bucket, key = uri[5:].split("/", 1)
    if not key or key.endswith("/"):
        key += "model.tar.gz"
    return bucket, key


def upload(archive: Path, s3_uri: str, s3: Any, *, digest: str | None = None) -> tuple[str, bool]:
    """Upload ``archive`` to ``s3_uri`` unless the same digest is already there.

    Returns ``(s3_uri_of_object, uploaded)``. ``s3`` is a boto3 S3 client.
    """
    bucket, key = split_s3_uri(s3_uri)
    digest = digest or sha256_file(archive)
    try:
        head = s3.head_object(Bucket=bucket, Key=key)
        if head.get("Metadata", {}).get(DIGEST_METADATA_KEY) == digest:
            return f"s3://{bucket}/{key}", False
    except s3.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
            raise
    s3.upload_file(str(archive), bucket, key, ExtraArgs={"Metadata": {DIGEST_METADATA_KEY: digest}})
    return f"s3://{bucket}/{key}", True


def package_and_upload(model_dir: Path, s3_uri: str, *, s3: Any = None, keep: Path | None = None,
                       region: str | None = None) -> str:
    """Build the archive (at ``keep``, or in a temp dir), upload it, return the object's URI."""
    import tempfile

    if s3 is None:
        import boto3

        s3 = boto3.client("s3", region_name=region)
    with tempfile.TemporaryDirectory() as tmp:
        archive = keep or Path(tmp) / "model.tar.gz"
        digest = build_tarball(model_dir, archive)
        uri, uploaded = upload(archive, s3_uri, s3, digest=digest)
    print(f"{'uploaded' if uploaded else 'already present'}: {uri} (sha256 {digest[:12]})", file=sys.stderr)
    return uri


def main(argv: list[str] | None = None) -> int:
    from backends.config import BackendConfig

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", type=Path, default=BackendConfig.from_env(os.environ).model_dir,
                   help="the model directory (default: $KOKORO_MODEL_DIR)")
    p.add_argument("--s3-uri", help="s3://bucket/key for model.tar.gz; omit to only build --out")
    p.add_argument("--out", type=Path, help="keep the archive here")
    p.add_argument("--region")
    args = p.parse_args(argv)
    if args.model_dir is None:
        p.error("--model-dir (or KOKORO_MODEL_DIR) is required")
    if args.s3_uri:
        print(package_and_upload(args.model_dir, args.s3_uri, keep=args.out, region=args.region))
    elif args.out:
        digest = build_tarball(args.model_dir, args.out)
        print(f"wrote {args.out} (sha256 {digest[:12]})", file=sys.stderr)
    else:
        p.error("give --s3-uri and/or --out")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
