"""Each configuration or CLI mistake a newcomer makes, as the command they type: one line on stderr
that names the fix, exit status 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str, env: dict[str, str | None] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python *argv`` in the repository, ``env`` on top of this one's (None: unset)."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "KOKORO_PORT": "0"}
    for key, value in (env or {}).items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=environ, capture_output=True, text=True,
                          timeout=timeout)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_lexicon_that_is_not_there():
    """KOKORO_LEXICON=/nonexistent.json kokoro-serve --backend fake"""
    line = one_line(run("-m", "server.cli.main", "serve", "--backend", "fake",
                        env={"KOKORO_LEXICON": "/nonexistent.json"}))
    assert line == ("kokoro-serve: lexicon /nonexistent.json: no such file (KOKORO_LEXICON); point it at a JSON "
                    "object of {language: {word: phonemes}} (docs/languages.md), or unset it")


def test_a_malformed_lexicon(tmp_path):
    bad = tmp_path / "lexicon.json"
    bad.write_text('{"en-us": {"Kokoro": ', encoding="utf-8")
    line = one_line(run("-m", "server.cli.main", "serve", "--backend", "fake", env={"KOKORO_LEXICON": str(bad)}))
    assert line.startswith(f"kokoro-serve: lexicon {bad}: not valid JSON (")
    assert line.endswith("(KOKORO_LEXICON); point it at a JSON object of {language: {word: phonemes}} "
                         "(docs/languages.md), or unset it")


def test_a_bad_mode_when_printing_the_settings():
    """KOKORO_MODE=banana python -m server.settings"""
    line = one_line(run("-m", "server.settings", env={"KOKORO_MODE": "banana"}))
    assert line == "python -m server.settings: KOKORO_MODE='banana': Input should be 'sequential' or 'concurrent'"


def test_an_s3_source_without_aws_credentials(tmp_path):
    """kokoro-serve assets --source s3://bucket/kokoro, with no credentials anywhere"""
    pytest.importorskip("boto3")
    no_credentials: dict[str, str | None] = {
                      "AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "AWS_SESSION_TOKEN": None,
                      "AWS_PROFILE": None, "AWS_DEFAULT_PROFILE": None, "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                      "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true",
                      "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": None, "AWS_CONTAINER_CREDENTIALS_FULL_URI": None,
                      "AWS_DEFAULT_REGION": "us-east-1"}
    line = one_line(run("-m", "server.cli.main", "assets", "--model-dir", str(tmp_path / "m"),
                        "--source", "s3://bucket/kokoro", env=no_credentials))
    assert line == ("kokoro-serve: s3://bucket/kokoro: no AWS credentials found; set AWS_PROFILE (or "
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) for an identity that may read it, or give "
                    "--source a directory or an https:// URL")


def test_official_assets_offline_say_so_at_once_and_name_the_documented_fixes(tmp_path):
    """kokoro-serve assets --official with no DNS (here: a host that never resolves): no retries."""
    started = time.monotonic()
    done = run("-m", "server.cli.main", "assets", "--official", "--model-dir", str(tmp_path),
               env={"KOKORO_OFFICIAL_URL": "https://kokoro-assets.invalid/model-files-v1.0"})
    line = done.stderr.splitlines()[-1]
    assert done.returncode == 2 and "retrying" not in done.stderr and "Traceback" not in done.stderr
    assert line.startswith("kokoro-serve: cannot resolve kokoro-assets.invalid (")
    assert line.endswith("offline? take the files from a place you can reach: `kokoro-serve assets --source "
                         "DIR|https://...|s3://...`, or KOKORO_OFFICIAL_URL=<a mirror of the model-files-v1.0 "
                         "release> (docs/models-and-voices.md)")
    assert time.monotonic() - started < 60  # no growing pauses between attempts


def test_a_missing_model_directory_is_named_as_given_once(tmp_path):
    """kokoro-serve voices --model-dir EMPTY"""
    line = one_line(run("-m", "server.cli.main", "voices", "--model-dir", str(tmp_path)))
    assert line == ("kokoro-serve: the model directory lacks a model (kokoro-v1.0*.onnx or kokoro-v1_0*.pth), "
                    f"voices, config.json; build it with `kokoro-serve assets --model-dir {tmp_path}`, or point "
                    "--model-dir / KOKORO_MODEL_DIR at a built one")
    assert line.count(str(tmp_path)) == 1 and line.count("kokoro-serve assets") == 1


NO_TORCH = "import sys; sys.modules['torch'] = None; from server.cli.main import main; sys.exit(main(sys.argv[1:]))"


def test_the_torch_runtime_without_torch_is_refused_before_the_server_starts(model_dir):
    """kokoro-serve --backend torch, where torch is not installed: no uvicorn line, exit 2."""
    done = run("-c", NO_TORCH, "serve", "--backend", "torch", "--model-dir", str(model_dir))
    assert one_line(done).startswith("kokoro-serve: the torch runtime needs PyTorch, which is not installed: "
                                     "pip install 'kokoro-serve[torch]'")
    assert "Uvicorn" not in done.stderr + done.stdout
