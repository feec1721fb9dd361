"""`kokoro-serve assets --official` against a local stand-in of the upstream release (no network):
pinned files verified, the 54-voice set joining the offline five with `af_heart` the default, a
corrupt download refused and not installed, an interrupted download resumed."""

from __future__ import annotations

import hashlib
import http.server
import io
import threading
from typing import ClassVar

import numpy as np
import pytest

import backends.assets.build as assets
import backends.assets.official as official
from backends.assets.official import ReleaseFile, download
from server.cli.main import main

PACK = (510, 1, 256)
RELEASE_PATH = "/releases/download/model-files-v1.0"


class _Release(http.server.BaseHTTPRequestHandler):
    """Serves ``files`` (name -> bytes) with Range support; ``cut_after`` bytes of the first answer
    to each file are sent before the connection is dropped (an interrupted transfer)."""

    files: ClassVar[dict[str, bytes]] = {}
    cut_after: int | None = None
    status: int | None = None  # answer every request with this error status
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self):
        folder, _, name = self.path.rpartition("/")
        self.seen.append((name, self.headers.get("Range")))
        if self.status:
            self.send_error(self.status)
            return
        body = self.files.get(name) if folder == RELEASE_PATH else None
        if body is None:
            self.send_error(404)
            return
        start = int(self.headers["Range"].split("=")[1].rstrip("-")) if self.headers.get("Range") else 0
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        first = sum(1 for n, _ in self.seen if n == name) == 1
        if first and self.cut_after is not None:
            self.wfile.write(body[start:self.cut_after])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body[start:])

    def log_message(self, *args):
        pass


def _npz(voices: dict[str, float]) -> bytes:
    out = io.BytesIO()
    np.savez(out, **{name: np.full(PACK, value, np.float32) for name, value in voices.items()})
    return out.getvalue()


@pytest.fixture
def upstream(monkeypatch):
    """A local 'release' with a fake model and a voices file; the pins follow its files."""
    files = {"kokoro-v1.0.onnx": b"not really an onnx model " * 4096,
             "voices-v1.0.bin": _npz({"af_heart": 0.01, "am_adam": 0.02, "bf_emma": 0.03})}
    pins = tuple(ReleaseFile(n, hashlib.sha256(b).hexdigest(), len(b)) for n, b in files.items())
    monkeypatch.setattr(official, "RELEASE", pins)
    handler = type("Release", (_Release,), {"files": files, "seen": [], "cut_after": None, "status": None})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}{RELEASE_PATH}"
    monkeypatch.setenv("KOKORO_OFFICIAL_URL", base)
    yield handler, base
    server.shutdown()
    server.server_close()


@pytest.mark.model
def test_official_assets_are_verified_and_af_heart_is_the_default(upstream, tmp_path, capsys):
    handler, _ = upstream
    assert main(["assets", "--official", "--model-dir", str(tmp_path)]) == 0
    for pin in official.RELEASE:
        assert assets.sha256_file(tmp_path / pin.name) == pin.sha256
    out = capsys.readouterr()
    assert "default af_heart" in out.out and "sha256 verified" in out.err
    assert not (tmp_path / assets.REBUILT_PTH).exists()  # the torch checkpoint waits for the torch runtime
    assert main(["voices", "--model-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out.splitlines()
    names = {line.split()[0] for line in listed}
    assert "af_heart  en-us  (default)" in listed and {"am_adam", "bf_emma", "jm_kumo"} <= names
    # a second run finds everything verified and downloads nothing
    before = len(handler.seen)
    assert main(["assets", "--official", "--model-dir", str(tmp_path)]) == 0
    assert len(handler.seen) == before


@pytest.mark.model
def test_official_voices_join_a_directory_built_offline_before(upstream, tmp_path, capsys):
    assert main(["assets", "--model-dir", str(tmp_path)]) == 0
    assert "default jm_kumo" in capsys.readouterr().out
    assert main(["assets", "--official", "--model-dir", str(tmp_path)]) == 0
    assert "default af_heart" in capsys.readouterr().out


def test_a_corrupt_download_is_refused_with_a_clear_message_and_not_installed(upstream, tmp_path, capsys):
    handler, _ = upstream
    body = bytearray(handler.files["voices-v1.0.bin"])
    body[len(body) // 2] ^= 0xFF  # same size, one byte off
    handler.files["voices-v1.0.bin"] = bytes(body)
    assert main(["assets", "--official", "--model-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "voices-v1.0.bin" in err and "corrupt" in err and "nothing was installed" in err
    assert not (tmp_path / "voices-v1.0.bin").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".download", ".part"))]


def test_an_interrupted_download_resumes_where_it_stopped(upstream, tmp_path):
    handler, base = upstream
    handler.cut_after = 30_000
    pin = official.RELEASE[0]
    download(f"{base}/{pin.name}", tmp_path / pin.name, sha256=pin.sha256, size=pin.size, sleep=lambda _s: None)
    assert assets.sha256_file(tmp_path / pin.name) == pin.sha256
    assert [r for n, r in handler.seen if n == pin.name] == [None, "bytes=30000-"]


def test_a_missing_release_file_names_the_setting(upstream, tmp_path, capsys, monkeypatch):
    _, base = upstream
    monkeypatch.setenv("KOKORO_OFFICIAL_URL", base + "/nowhere")
    assert main(["assets", "--official", "--model-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "404" in err and "KOKORO_OFFICIAL_URL" in err


def test_server_errors_are_retried_then_given_up_with_a_clear_message(upstream, tmp_path):
    handler, base = upstream
    handler.status = 503
    pauses = []
    pin = official.RELEASE[0]
    with pytest.raises(assets.AssetError, match=r"giving up after 4 attempts.*HTTP 503.*run the command again"):
        download(f"{base}/{pin.name}", tmp_path / pin.name, sha256=pin.sha256, size=pin.size, sleep=pauses.append)
    assert pauses == [1.0, 2.0, 4.0] and len(handler.seen) == 4
    assert not (tmp_path / pin.name).exists()


def test_a_refusal_is_not_retried(upstream, tmp_path):
    handler, base = upstream
    handler.status = 403
    with pytest.raises(assets.AssetError, match="HTTP 403"):
        download(f"{base}/x", tmp_path / "x", sleep=lambda _s: pytest.fail("a 403 was retried"))
    assert len(handler.seen) == 1


@pytest.mark.model
def test_assets_torch_rebuilds_the_checkpoint_only_when_asked(tmp_path, monkeypatch):
    import backends.assets.torch_convert as convert

    calls = []
    monkeypatch.setattr(convert, "rebuild_checkpoint", lambda onnx, config, out: calls.append(out) or
                        out.write_bytes(b"checkpoint"))
    assert main(["assets", "--model-dir", str(tmp_path)]) == 0
    assert calls == []
    assert main(["assets", "--torch", "--model-dir", str(tmp_path)]) == 0
    assert calls == [tmp_path / assets.REBUILT_PTH]


def test_the_pinned_release_is_the_published_one():
    assert official.OFFICIAL_BASE_URL.endswith("/thewh1teagle/kokoro-onnx/releases/download/model-files-v1.0")
    assert {f.name for f in official.RELEASE} == {"kokoro-v1.0.onnx", "voices-v1.0.bin"}
    assert all(len(f.sha256) == 64 and f.size > 10_000_000 for f in official.RELEASE)
