"""Voice packs: listing, loading (as data only) and blending.

A voice pack is a float32 array of shape (510, 1, 256): one style vector per phoneme count.
Packs come from one ``.npz`` (``allow_pickle=False``) or a folder of official ``.pt`` files, which
are read with ``torch.load(weights_only=True)`` — tensors only, never arbitrary pickles.

Blends: ``"af_heart(2)+am_adam(1)"`` mixes packs with weights normalised to sum to one. The
expression is parsed by a regular grammar, never evaluated; each part must be a loaded voice.

Languages: an official voice name's first letter says its language (``af_heart``: American English,
``jf_alpha``: Japanese); :meth:`VoiceStore.language` reads it, for the request's language rule
(:mod:`backends.text.lang`) and the voice listings.

Aliases (``KOKORO_VOICE_ALIASES``): extra names for a loaded voice or a blend, e.g. ``nova`` for
``jf_nezumi``, so clients that only send OpenAI's voice names reach the voices they mean. The store
resolves them wherever a voice is named (every route), also inside a blend (``nova(1)+jm_kumo(1)``);
an alias must not shadow a loaded voice, and its target must be loaded, or the store refuses to be
built (the server does not start). :class:`VoiceStore` is immutable after construction and safe to
share across threads.
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from backends.api import InvalidRequest, UnknownVoice
from backends.text.lang import voice_language

PACK_SHAPE = (510, 1, 256)
#: Preferred default voices, first present wins. af_heart is the official pack's flagship; of the
#: five offline (registry) voices jm_kumo reads English most intelligibly.
DEFAULT_PREFERENCE = ("af_heart", "jm_kumo")

_NAME = r"[A-Za-z0-9][A-Za-z0-9_\-]{0,63}"
_ALIAS = re.compile(rf"^{_NAME}$")
_PART = re.compile(rf"^\s*({_NAME})\s*(?:\(\s*([0-9]+(?:\.[0-9]+)?)\s*\))?\s*$")
MAX_BLEND_PARTS = 8
#: Blended packs kept (least recently used dropped): clients choose the weights, so without a
#: bound every distinct blend would stay in memory for good.
MAX_CACHED_BLENDS = 8


def parse_blend(spec: str) -> list[tuple[str, float]]:
    """``"a(2)+b(1)"`` -> ``[("a", 2/3), ("b", 1/3)]``. Raises InvalidRequest on bad syntax."""
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidRequest("voice must be a non-empty string", code="invalid_voice")
    parts = spec.split("+")
    if len(parts) > MAX_BLEND_PARTS:
        raise InvalidRequest(f"a blend may mix at most {MAX_BLEND_PARTS} voices", code="invalid_voice")
    out: list[tuple[str, float]] = []
    for part in parts:
        m = _PART.match(part)
        if not m:
            raise InvalidRequest(
                f"invalid voice expression {spec!r}: expected name or name(weight)+name(weight)",
                code="invalid_voice",
            )
        weight = float(m.group(2)) if m.group(2) is not None else 1.0
        out.append((m.group(1), weight))
    total = sum(w for _, w in out)
    if not math.isfinite(total):  # "a(1e400 digits)" parses to inf; inf/inf would blend to NaN
        raise InvalidRequest(f"voice weights in {spec[:80]!r} are too large", code="invalid_voice")
    if total <= 0:
        raise InvalidRequest(f"voice weights in {spec!r} must sum to more than 0", code="invalid_voice")
    return [(name, w / total) for name, w in out]


def _fixed(weights: list[float]) -> list[str]:
    """The weights in fixed point with six decimals (never "1e-07", which the grammar refuses),
    summing to exactly one — the largest takes the rounding — so the canonical form parses back
    to itself (1/12 + 1/12 + 10/12 written 0.083333 + 0.083333 + 0.833333 read back as 0.833334)."""
    units = [round(w * 1_000_000) for w in weights]
    largest = max(range(len(weights)), key=weights.__getitem__)
    units[largest] += 1_000_000 - sum(units)
    return [f"{u / 1_000_000:.6f}".rstrip("0").rstrip(".") or "0" for u in units]


def _check_pack(name: str, arr: np.ndarray) -> np.ndarray:
    arr = np.asarray(arr, dtype=np.float32)
    if arr.shape == (510, 256):
        arr = arr.reshape(PACK_SHAPE)
    if arr.shape != PACK_SHAPE or not np.isfinite(arr).all():
        raise ValueError(f"voice {name!r}: expected finite float32 {PACK_SHAPE}, got {arr.shape}")
    return arr


def load_voice_packs(path: Path) -> dict[str, np.ndarray]:
    """Read packs from an ``.npz`` file or a folder of ``.npy``/``.pt`` files, as data only."""
    path = Path(path)
    packs: dict[str, np.ndarray] = {}
    if path.is_file():
        with np.load(path, allow_pickle=False) as npz:
            for name in npz.files:
                packs[name] = _check_pack(name, npz[name])
        return packs
    if path.is_dir():
        for f in sorted(path.iterdir()):
            if f.suffix == ".npy":
                packs[f.stem] = _check_pack(f.stem, np.load(f, allow_pickle=False))
            elif f.suffix == ".pt":
                import torch  # only for official .pt packs; weights_only refuses code

                packs[f.stem] = _check_pack(f.stem, torch.load(f, map_location="cpu", weights_only=True).numpy())
        return packs
    raise FileNotFoundError(f"no voice packs at {path}")


class VoiceStore:
    """The loaded voices. ``get(spec)`` returns a (510, 1, 256) float32 pack for a name or a blend."""

    def __init__(
        self, packs: dict[str, np.ndarray], default: str | None = None, aliases: Mapping[str, str] | None = None
    ):
        if not packs:
            raise ValueError("no voices loaded")
        self._packs = {name: _check_pack(name, arr) for name, arr in packs.items()}
        if default is None:
            default = next((v for v in DEFAULT_PREFERENCE if v in self._packs), sorted(self._packs)[0])
        if default not in self._packs:
            raise UnknownVoice(f"default voice {default!r} is not loaded; available: {', '.join(self.names())}")
        self.default = default
        self._aliases = {name: self._alias_parts(name, target) for name, target in (aliases or {}).items()}
        self._alias_targets = {name: target.strip() for name, target in (aliases or {}).items()}
        self._blends: OrderedDict[str, np.ndarray] = OrderedDict()  # LRU, at most MAX_CACHED_BLENDS
        self._lock = threading.Lock()

    @classmethod
    def from_path(cls, path: Path, default: str | None = None, aliases: Mapping[str, str] | None = None) -> VoiceStore:
        return cls(load_voice_packs(path), default, aliases)

    def with_aliases(self, aliases: Mapping[str, str]) -> VoiceStore:
        """The same packs (shared, not copied) under ``aliases``."""
        return VoiceStore(self._packs, self.default, aliases)

    def _alias_parts(self, name: str, target: str) -> list[tuple[str, float]]:
        """Check one alias at construction (raises a typed error naming it) and return its parts."""
        if not isinstance(name, str) or not _ALIAS.match(name):
            raise InvalidRequest(f"voice alias {name!r}: a name is letters, digits, '_' and '-'", code="invalid_voice")
        if name in self._packs:
            raise InvalidRequest(f"voice alias {name!r} would hide the loaded voice of that name", code="invalid_voice")
        try:
            parts = parse_blend(target)
        except InvalidRequest as e:
            raise InvalidRequest(f"voice alias {name}={target}: {e.message}", code="invalid_voice") from None
        missing = [voice for voice, _ in parts if voice not in self._packs]
        if missing:
            raise UnknownVoice(
                f"voice alias {name}={target}: {missing[0]!r} is not a loaded voice; available: {', '.join(self.names())}"
            )
        return parts

    def names(self) -> list[str]:
        return sorted(self._packs)

    def language(self, spec: str | None) -> str | None:
        """The language a voice (or alias, or blend: its first part) says it speaks, from its name
        (``af_heart`` -> ``en-us``, ``jm_kumo`` -> ``ja``); ``None`` for a name that says none."""
        return voice_language(self.resolve(spec))

    def languages(self) -> dict[str, str | None]:
        """``{voice: language}`` for every loaded voice."""
        return {name: voice_language(name) for name in self.names()}

    @property
    def aliases(self) -> dict[str, str]:
        """``{alias: target}`` as configured (a voice or a blend)."""
        return dict(self._alias_targets)

    def __contains__(self, spec: object) -> bool:
        try:
            self.resolve(spec)  # type: ignore[arg-type]
        except (InvalidRequest, UnknownVoice):
            return False
        return True

    def resolve(self, spec: str | None) -> str:
        """Validate a voice name or blend and return its canonical form. Raises a typed error."""
        if spec is None:
            return self.default
        parts = self._expand(parse_blend(spec))
        missing = [name for name, _ in parts if name not in self._packs]
        if missing:
            raise UnknownVoice(
                f"unknown voice {missing[0]!r}; available: {', '.join(self.names())}"
            )
        if len(parts) == 1:
            return parts[0][0]
        weights = _fixed([weight for _, weight in parts])  # the canonical form parses back to itself
        return "+".join(f"{name}({weight})" for (name, _), weight in zip(parts, weights, strict=True))

    def _expand(self, parts: list[tuple[str, float]]) -> list[tuple[str, float]]:
        """Replace aliases by their voices (weights multiplied), a voice named twice merged."""
        if not self._aliases:
            return parts
        merged: dict[str, float] = {}
        for name, weight in parts:
            for voice, share in self._aliases.get(name, [(name, 1.0)]):
                merged[voice] = merged.get(voice, 0.0) + weight * share
        return list(merged.items())

    def get(self, spec: str | None) -> np.ndarray:
        name = self.resolve(spec)
        if name in self._packs:
            return self._packs[name]
        with self._lock:
            pack = self._blends.get(name)
            if pack is None:
                pack = _mix([(w, self._packs[n]) for n, w in parse_blend(name)])
                self._blends[name] = pack
                if len(self._blends) > MAX_CACHED_BLENDS:  # every distinct weight is a new 0.5 MB pack
                    self._blends.popitem(last=False)
            else:
                self._blends.move_to_end(name)
            return pack

    def style(self, spec: str | None, n_tokens: int) -> np.ndarray:
        """The (1, 256) style vector for an utterance of ``n_tokens`` phoneme tokens. A blend's row
        is mixed on the spot (a few hundred multiplications), never a whole pack kept."""
        name = self.resolve(spec)
        row = max(1, min(n_tokens, PACK_SHAPE[0])) - 1
        if name in self._packs:
            style: np.ndarray = self._packs[name][row]
            return style
        return _mix([(w, self._packs[n][row]) for n, w in parse_blend(name)])


def _mix(weighted: list[tuple[float, np.ndarray]]) -> np.ndarray:
    """The weighted sum of same-shaped arrays, float32 (a blend of voice packs or of their rows)."""
    total: np.ndarray = sum((weight * array for weight, array in weighted), start=np.zeros((), np.float32))
    return total.astype(np.float32)
