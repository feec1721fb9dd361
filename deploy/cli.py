"""Small pieces the deploy command lines share (standard library only: `deploy` imports nothing heavy)."""

from __future__ import annotations


def env_pairs(pairs: list[str]) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` from repeated ``--env`` flags -> a dict; a malformed pair exits with a message."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--env wants KEY=VALUE, got {pair!r}")
        out[key] = value
    return out
