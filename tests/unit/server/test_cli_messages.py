"""What ``kokoro-serve`` says when it cannot start — one line for a bad setting, a port that is
taken, a missing model or a missing optional runtime — and ``--version``, help on every flag, one
log format, and no phonemizer warning on every synthesis."""

from __future__ import annotations

import argparse
import json
import logging
import socket
import subprocess
import sys

import pytest

from backends.logs import JsonFormatter
from backends.text.g2p.frontends import EspeakG2P
from server.cli.main import _parser, main


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("kokoro-serve 0.")


def test_a_bad_variable_or_flag_is_one_line_each_naming_it_its_value_and_what_is_allowed(capsys):
    assert main(["serve", "--threads", "0"], environ={"KOKORO_MODE": "fast", "KOKORO_PORT": "eighty"}) == 2
    assert capsys.readouterr().err.splitlines() == [
        "kokoro-serve: KOKORO_MODE='fast': Input should be 'sequential' or 'concurrent'",
        "kokoro-serve: --threads=0: Input should be greater than or equal to 1",
        "kokoro-serve: KOKORO_PORT / SAGEMAKER_BIND_TO_PORT='eighty': Input should be a valid integer, "
        "unable to parse string as an integer",
    ]


def test_every_flag_of_every_command_has_help():
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [(name, a.option_strings or a.dest) for name, p in sub.choices.items() for a in p._actions
               if a.dest != "help" and not a.help]
    assert missing == []
    serve = sub.choices["serve"].parse_args(["--threads", "2", "--api-key", "k", "--voice", "jf_alpha",
                                             "--log-format", "json"])
    assert (serve.threads, serve.api_key, serve.default_voice, serve.log_format) == (2, "k", "jf_alpha", "json")
    lang = next(a for a in sub.choices["say"]._actions if a.dest == "lang")
    assert "KOKORO_DEFAULT_LANG" in lang.help  # the default it really has


def test_a_port_in_use_names_the_flag_and_the_variable(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--backend", "fake", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"port {port} on 127.0.0.1 is already in use" in err
    assert "--port" in err and "KOKORO_PORT" in err


def test_missing_assets_name_the_flag_the_variable_and_the_command(tmp_path, capsys):
    assert main(["voices", "--model-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--model-dir" in err and "KOKORO_MODEL_DIR" in err and "kokoro-serve assets" in err


NO_TORCH = "import sys; sys.modules['torch'] = None; from server.cli.main import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.subprocess
def test_a_missing_torch_gives_the_install_command_not_a_traceback(model_dir, tmp_path):
    say = subprocess.run([sys.executable, "-c", NO_TORCH, "say", "Hi.", "-o", str(tmp_path / "x.wav"),
                          "--backend", "torch", "--model-dir", str(model_dir)],
                         capture_output=True, text=True, timeout=120)
    assert say.returncode == 2
    assert "the torch runtime needs PyTorch, which is not installed: pip install 'kokoro-serve[torch]'" in say.stderr
    assert "Traceback" not in say.stderr
    serve = subprocess.run([sys.executable, "-c", NO_TORCH, "serve", "--backend", "torch", "--port", "0",
                            "--model-dir", str(model_dir)], capture_output=True, text=True, timeout=120)
    # checked before the server starts: the one line, exit 2, no server log lines around it
    assert serve.returncode == 2
    assert serve.stderr.splitlines() == ["kokoro-serve: the torch runtime needs PyTorch, which is not installed: "
                                         "pip install 'kokoro-serve[torch]' (CPU wheels: add --extra-index-url "
                                         "https://download.pytorch.org/whl/cpu)"]


LOG_AFTER_MAIN = (
    "import logging, sys; from server.cli.main import main; main(sys.argv[1:]); "
    "logging.getLogger('uvicorn.error').info('from uvicorn'); logging.getLogger('kokoro.x').info('ours')"
)


@pytest.mark.subprocess
@pytest.mark.parametrize("fmt", ["json", "plain"])
def test_one_log_format_per_process_each_line_once(model_dir, fmt):
    done = subprocess.run([sys.executable, "-c", LOG_AFTER_MAIN, "voices", "--log-format", fmt,
                           "--model-dir", str(model_dir)], capture_output=True, text=True, timeout=60)
    lines = done.stderr.splitlines()
    assert done.returncode == 0 and len(lines) == 2, done.stderr
    if fmt == "json":
        assert [(json.loads(x)["logger"], json.loads(x)["message"]) for x in lines] == [
            ("uvicorn", "from uvicorn"), ("kokoro.x", "ours")]  # uvicorn's general logger, not an error
    else:
        assert lines[0].endswith(" INFO uvicorn: from uvicorn") and lines[1].endswith(" INFO kokoro.x: ours")


def test_a_json_line_carries_the_error_and_its_traceback():
    record = logging.LogRecord("kokoro.x", logging.ERROR, __file__, 1, "failed: %s", ("why",), None)
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    entry = json.loads(line)
    assert "\n" not in line
    assert (entry["level"], entry["logger"], entry["message"], entry["error"]) == (
        "ERROR", "kokoro.x", "failed: why", "ValueError: boom")
    assert entry["time"].endswith("+00:00") and "Traceback" in entry["traceback"]


def test_a_library_logger_built_before_the_logs_are_configured_follows_their_level(monkeypatch):
    """bedrock-agentcore's app sets its logger to INFO when built: an app built earlier in the process
    must not keep its lines above the level the command configured."""
    import logging

    from backends.logs import configure

    sdk = logging.getLogger("bedrock_agentcore.app")
    monkeypatch.setattr(sdk, "level", logging.INFO)
    monkeypatch.setattr(sdk, "handlers", [logging.StreamHandler()])
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)
    configure("warning")
    assert not sdk.isEnabledFor(logging.INFO) and sdk.isEnabledFor(logging.WARNING)
    assert all(isinstance(h, logging.NullHandler) for h in sdk.handlers)


def test_espeak_g2p_logs_no_warning_per_synthesis(caplog):
    g2p = EspeakG2P()
    with caplog.at_level(logging.DEBUG):
        for text in ("Mr. Smith paid $5.", "Well... yes.", "x" * 50):  # phonemizer counts the words differently
            assert g2p.phonemize(text)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert logging.getLogger("kokoro.g2p.phonemizer").isEnabledFor(logging.ERROR)  # its errors still show
