"""``kokoro-agent``: flags become settings; the agent package stays light (no server, no runtimes)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

import agent.cli as cli


@pytest.fixture
def captured(monkeypatch):
    seen = {}

    class FakeApp:
        def run(self, **kwargs):
            seen["run"] = kwargs

    def fake_create_app(settings):
        seen["settings"] = settings
        return FakeApp()

    monkeypatch.setattr(cli, "create_app", fake_create_app)
    return seen


def test_serve_scripted_with_a_tts_url(captured):
    rc = cli.main(["serve", "--host", "0.0.0.0", "--port", "8099", "--model", "scripted", "--tokens-per-second",
                   "12.5", "--tts-url", "http://tts:8080", "--voice", "jm_kumo"], env={})
    assert rc == 0
    s = captured["settings"]
    assert (s.model, s.tokens_per_second, s.tts_url, s.endpoint_name, s.voice) == (
        "scripted", 12.5, "http://tts:8080", None, "jm_kumo")
    assert captured["run"]["host"] == "0.0.0.0" and captured["run"]["port"] == 8099


def test_serve_sagemaker_endpoint(captured):
    assert cli.main(["serve", "--endpoint-name", "kokoro-ep", "--region", "us-west-2"], env={}) == 0
    s = captured["settings"]
    assert (s.endpoint_name, s.region, s.tts_url, s.model) == ("kokoro-ep", "us-west-2", None, "bedrock")


def test_endpoint_needs_a_region(captured, capsys):
    assert cli.main(["serve", "--endpoint-name", "kokoro-ep"], env={}) == 2
    assert "--region" in capsys.readouterr().err
    assert "settings" not in captured


def test_tts_url_and_endpoint_are_exclusive(captured):
    with pytest.raises(SystemExit):
        cli.main(["serve", "--tts-url", "http://x", "--endpoint-name", "e", "--region", "r"], env={})


def test_environment_defaults(captured):
    cli.main(["serve"], env={"KOKORO_AGENT_MODEL": "scripted", "KOKORO_AGENT_PORT": "9001",
                             "KOKORO_AGENT_TTS_URL": "ws://tts/x", "KOKORO_AGENT_TOKENS_PER_SECOND": "7"})
    s = captured["settings"]
    assert (s.model, s.tts_url, s.tokens_per_second, captured["run"]["port"]) == ("scripted", "ws://tts/x", 7.0, 9001)


def test_flags_override_the_environment_and_one_tts_target_wins(captured):
    env = {"KOKORO_AGENT_ENDPOINT_NAME": "from-env", "KOKORO_AGENT_REGION": "eu-west-1", "KOKORO_AGENT_VOICE": "af_env",
           "KOKORO_AGENT_FIRST_CLAUSE_WORDS": "0"}
    assert cli.main(["serve", "--tts-url", "http://flag:1", "--voice", "jm_kumo"], env=env) == 0
    s = captured["settings"]
    assert (s.tts_url, s.endpoint_name, s.voice, s.first_clause_words) == ("http://flag:1", None, "jm_kumo", 0)
    assert cli.main(["serve"], env={**env, "AWS_REGION": "us-east-2"}) == 0
    s = captured["settings"]
    assert (s.endpoint_name, s.tts_url, s.region) == ("from-env", None, "eu-west-1")


def test_region_falls_back_to_aws_region(captured):
    assert cli.main(["serve", "--endpoint-name", "e"], env={"AWS_REGION": "ap-south-1"}) == 0
    assert captured["settings"].region == "ap-south-1"


def test_a_bad_variable_or_flag_is_one_line_with_its_name_value_and_what_is_allowed(captured, capsys):
    assert cli.main(["serve"], env={"KOKORO_AGENT_PORT": "eighty"}) == 2
    assert capsys.readouterr().err == (
        "kokoro-agent: KOKORO_AGENT_PORT='eighty': Input should be a valid integer, unable to parse string as an integer\n")
    assert cli.main(["serve", "--speed", "7"], env={"KOKORO_LOG_FORMAT": "xml"}) == 2
    assert capsys.readouterr().err.splitlines() == [
        "kokoro-agent: KOKORO_AGENT_LOG_FORMAT / KOKORO_LOG_FORMAT='xml': Input should be 'plain' or 'json'",
        "kokoro-agent: --speed=7.0: Input should be less than or equal to 2",
    ]
    assert "settings" not in captured


def test_version_and_help_on_every_flag(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("kokoro-agent ")
    serve = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    flags = [a for a in serve._actions if a.option_strings and a.dest != "help"]
    assert flags and [a.option_strings for a in flags if not a.help] == []
    model = next(a for a in flags if a.dest == "model")
    assert "bedrock (the default" in model.help and "scripted" in model.help


def test_one_log_format_and_no_sdk_line_when_a_turn_starts(captured):
    import logging

    assert cli.main(["serve", "--log-format", "json"], env={}) == 0
    assert captured["settings"].log_format == "json"
    ours = [h for h in logging.getLogger().handlers if type(h).__name__ == "StderrHandler"]
    assert len(ours) == 1 and type(ours[0].formatter).__name__ == "JsonFormatter"
    assert captured["run"]["log_config"] is None  # uvicorn's lines through the same handler
    sdk = logging.getLogger("bedrock_agentcore.app")
    assert not sdk.isEnabledFor(logging.INFO) and sdk.isEnabledFor(logging.WARNING)
    assert all(isinstance(h, logging.NullHandler) for h in sdk.handlers)


def test_every_agent_variable_is_declared_with_a_description():
    """Nothing in agent/ names a KOKORO_AGENT_* variable that the settings do not declare."""
    import re
    from pathlib import Path

    from agent.settings import AgentSettings

    declared = {e for name in AgentSettings.model_fields for e in AgentSettings.env_names(name)}
    used = set()
    for path in Path(cli.__file__).parent.glob("*.py"):
        used |= set(re.findall(r"KOKORO_AGENT_[A-Z_]+[A-Z]", path.read_text()))
    assert used <= declared, used - declared
    rows = AgentSettings.markdown_rows()
    assert len(rows) == len(AgentSettings.model_fields)
    assert all(row.count("|") == 4 and not row.endswith("| None |") for row in rows)
    assert "| `KOKORO_AGENT_TTS_URL` | `http://127.0.0.1:8080` |" in "\n".join(rows)


@pytest.mark.subprocess
def test_agent_imports_no_server_and_no_runtime():
    """The agent may use the pure-Python sentence rules, streaming chunker, settings base, log format and
    start-up messages of backends, nothing else of it."""
    code = (
        "import sys, agent.app, agent.cli, agent.agent, agent.tts_client, agent.sagemaker_transport, backends.text.chunker, "
        "agent.messages, agent.ws_client, agent.settings; "
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('server', 'onnxruntime', 'torch', 'numpy') "
        "or (m.startswith('backends.') and m not in ('backends.text', 'backends.text.sentences', 'backends.text.chunker', 'backends.envsettings', "
        "'backends.logs', "
        "'backends.startup'))]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.subprocess
def test_a_missing_agent_package_gives_the_install_command_not_a_traceback():
    code = ("import sys; sys.modules['bedrock_agentcore'] = None; from agent.cli import main; "
            "sys.exit(main(['serve', '--model', 'scripted']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "the agent needs bedrock-agentcore, which is not installed: pip install 'kokoro-serve[agent]'" in done.stderr
