"""The kokoro-serve command: voices, say, argument handling and the drain task (serve runs in tests/e2e)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import wave

import pytest

from server.cli.main import _parser, _uvicorn_server_class, main


def test_serve_is_the_default_command():
    assert _parser().parse_args(["serve"]).command == "serve"
    args = _parser().parse_args(["serve", "--backend", "torch", "--device", "cuda"])
    assert (args.backend, args.device) == ("torch", "cuda")


def test_voices_lists_the_loaded_voices_with_their_language_and_marks_the_default(model_dir, capsys):
    assert main(["voices", "--model-dir", str(model_dir)], environ={}) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "jm_kumo  ja  (default)" in lines and "jf_alpha  ja" in lines


def test_missing_assets_exit_2_with_a_hint(tmp_path, capsys):
    assert main(["voices", "--model-dir", str(tmp_path)], environ={}) == 2
    assert "kokoro-serve assets" in capsys.readouterr().err


def test_say_rejects_an_unknown_format_before_loading_anything(tmp_path, capsys):
    assert main(["say", "Hi.", "-o", str(tmp_path / "x.xyz"), "--model-dir", str(tmp_path)], environ={}) == 2
    assert "unsupported audio format" in capsys.readouterr().err


@pytest.mark.subprocess
def test_say_writes_a_wav_file(model_dir, tmp_path):
    out = tmp_path / "hi.wav"
    subprocess.run([sys.executable, "-m", "server", "say", "Hi.", "-o", str(out), "--speed", "2",
                    "--model-dir", str(model_dir)], check=True, capture_output=True, timeout=120)
    with wave.open(str(out)) as w:
        assert w.getframerate() == 24000 and w.getnframes() > 2400


def test_voices_lists_the_aliases(model_dir, capsys):
    aliases = {"KOKORO_VOICE_ALIASES": "nova=jf_nezumi,alloy=jm_kumo(2)+jf_alpha(1)"}
    assert main(["voices", "--model-dir", str(model_dir)], environ=aliases) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "nova -> jf_nezumi" in lines and "alloy -> jm_kumo(2)+jf_alpha(1)" in lines


@pytest.mark.subprocess
def test_an_alias_to_a_voice_that_is_not_loaded_fails_the_start(model_dir):
    env = {**os.environ, "KOKORO_VOICE_ALIASES": "nova=af_nobody", "KOKORO_PORT": "0"}
    done = subprocess.run([sys.executable, "-m", "server", "serve", "--backend", "fake", "--model-dir", str(model_dir)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "voice alias nova=af_nobody: 'af_nobody' is not a loaded voice" in done.stderr


def test_a_drain_that_fails_is_logged_with_its_traceback_and_the_server_still_exits(caplog):
    """The drain runs in a task nobody awaits: its failure must reach the log, not vanish."""
    import uvicorn

    class BrokenState:
        async def drain(self) -> None:
            raise RuntimeError("a session would not close")

    server = _uvicorn_server_class()(uvicorn.Config(app=None), BrokenState())

    async def drain() -> None:
        server._begin_drain()
        await server._drain_task

    with caplog.at_level(logging.ERROR, logger="kokoro.cli"):
        asyncio.run(drain())
    assert server.should_exit
    failed = [r for r in caplog.records if r.name == "kokoro.cli" and r.levelno == logging.ERROR]
    assert len(failed) == 1 and "draining failed" in failed[0].getMessage()
    assert failed[0].exc_info and "a session would not close" in str(failed[0].exc_info[1])
