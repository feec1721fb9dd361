"""The `kokoro` package's ``KModel``, built offline and loaded strictly.

Three traps this module exists to avoid:

* ``import kokoro`` runs ``kokoro/__init__.py``, which imports ``KPipeline`` and with it ``misaki``
  (an optional G2P we do not install with its dependencies). :func:`kmodel_class` imports only
  ``kokoro.model`` and its own submodules, never the pipeline, so no misaki is needed.
* ``KModel(...)`` without both a config dict and a checkpoint downloads them from the model hub.
  :func:`build_kmodel` always passes both (an empty in-memory checkpoint), so it never touches the
  network.
* ``KModel``'s own loader retries with ``strict=False`` when a component does not load, silently
  leaving random weights in place. :func:`load_checkpoint` loads every component strictly itself.

Checkpoints (the official ``kokoro-v1_0.pth`` and our rebuilt one) are a dict of component name
(``bert``, ``bert_encoder``, ``predictor``, ``text_encoder``, ``decoder``) to a state dict whose
keys may carry the ``module.`` prefix of a ``DataParallel`` training run.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import sys
import threading
import types
import warnings
from pathlib import Path
from typing import Any

COMPONENTS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
OFFICIAL_PTH = "kokoro-v1_0.pth"
REBUILT_PTH = "kokoro-v1_0.rebuilt.pth"
REPO_ID = "hexgrad/Kokoro-82M"  # a label only: passing it silences KModel's warning, nothing is fetched
# Keys some checkpoints carry that current transformers keeps as non-persistent buffers.
_IGNORABLE = {"bert": {"embeddings.position_ids", "embeddings.token_type_ids"}}

_import_lock = threading.Lock()


def kmodel_class() -> type:
    """``kokoro.model.KModel`` without running ``kokoro/__init__.py`` (which needs misaki)."""
    with _import_lock:
        if "kokoro.model" in sys.modules:
            cached: type = sys.modules["kokoro.model"].KModel
            return cached
        spec = importlib.util.find_spec("kokoro")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(
                "the torch runtime needs the `kokoro` package: pip install kokoro==0.9.4 --no-deps "
                "(plus transformers, loguru, huggingface-hub)"
            )
        placeholder = "kokoro" not in sys.modules
        if placeholder:
            # A bare package object stands in for kokoro/__init__.py while the submodules import.
            package = types.ModuleType("kokoro")
            package.__path__ = list(spec.submodule_search_locations)
            package.__spec__ = spec
            sys.modules["kokoro"] = package
        try:
            from loguru import logger

            logger.disable("kokoro")  # what kokoro/__init__.py would have done
            module = importlib.import_module("kokoro.model")
        finally:
            if placeholder:
                # Leave no half-package behind: a later real `import kokoro` runs its __init__.
                sys.modules.pop("kokoro", None)
        kmodel: type = module.KModel
        return kmodel


def read_config(config_path: Path) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(Path(config_path).read_text(encoding="utf-8"))
    for key in ("vocab", "n_token", "plbert", "istftnet", "hidden_dim", "style_dim"):
        if key not in config:
            raise ValueError(f"{config_path}: not a Kokoro config (no {key!r})")
    return config


def build_kmodel(config: dict[str, Any]) -> Any:
    """A ``KModel`` with the architecture of ``config`` and untrained weights; never downloads."""
    import torch

    empty = io.BytesIO()
    torch.save({}, empty)
    empty.seek(0)
    cls = kmodel_class()
    with warnings.catch_warnings():
        # KModel's own construction warns about LSTM dropout and the deprecated weight_norm API.
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", FutureWarning)
        model = cls(repo_id=REPO_ID, config=config, model=empty)
    return model.eval()


def normalise_state_dict(component: str, state: dict[str, Any]) -> dict[str, Any]:
    """Strip a ``module.`` prefix and drop keys current transformers no longer persists."""
    out = {}
    for key, value in state.items():
        key = key[len("module.") :] if key.startswith("module.") else key
        if key in _IGNORABLE.get(component, ()):
            continue
        out[key] = value
    return out


def load_checkpoint(model: Any, checkpoint: Path | dict[str, Any]) -> None:
    """Load every component of ``checkpoint`` into ``model`` strictly (missing/unexpected keys or a
    shape mismatch raise). Non-finite weights are refused too: they would synthesise NaN audio."""
    import torch

    if not isinstance(checkpoint, dict):
        checkpoint = dict(torch.load(checkpoint, map_location="cpu", weights_only=True))
    missing = [c for c in COMPONENTS if c not in checkpoint]
    extra = [c for c in checkpoint if c not in COMPONENTS]
    if missing or extra:
        raise ValueError(f"checkpoint components: missing {missing}, unexpected {extra}")
    for component in COMPONENTS:
        state = normalise_state_dict(component, checkpoint[component])
        bad = [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]
        if bad:
            raise ValueError(f"checkpoint {component}: non-finite values in {bad[:5]}")
        getattr(model, component).load_state_dict(state, strict=True)


def find_checkpoint(model_dir: Path) -> Path | None:
    """The official checkpoint when present, else the rebuilt one, else None."""
    for name in (OFFICIAL_PTH, REBUILT_PTH):
        path = Path(model_dir) / name
        if path.is_file():
            return path
    return None
