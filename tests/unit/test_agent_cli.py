"""``kokoro-agent``: flags become settings; the agent package stays light (no server, no runtimes)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agent.cli as cli
from agent.agent import for_speech


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


def test_agent_imports_no_server_and_no_runtime():
    code = (
        "import sys, agent.app, agent.cli, agent.agent, agent.tts_client, agent.sagemaker_transport, agent.chunker; "
        "heavy = [m for m in ('server', 'backends', 'onnxruntime', 'torch', 'numpy') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("chunk", "spoken"),
    [("**Bold** claim.", "Bold claim."), ("- a list item", "a list item"), ("## Heading", "Heading"),
     ("Use `kokoro-serve` now.", "Use kokoro-serve now."), ("```", None), ("...", None), ("1. First", "1. First")],
)
def test_markup_is_not_read_aloud(chunk, spoken):
    assert for_speech(chunk) == spoken
