"""Settings: environment names, SageMaker's port, the settings table (docs/settings.md), CLI overrides;
each built from the environment it is given, never from the shell's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from backends.config import BackendConfig
from server.cli.main import _parser, _settings
from server.settings import Settings
from settings_table import table
from tests.support.live import REPO


def test_defaults():
    s = Settings.from_env({})
    assert (s.host, s.port, s.backend, s.mode, s.api_key) == ("127.0.0.1", 8080, "onnx", "sequential", None)
    assert s == Settings()


def test_port_honours_sagemaker_then_kokoro():
    assert Settings.from_env({"SAGEMAKER_BIND_TO_PORT": "9000"}).port == 9000
    assert Settings.from_env({"SAGEMAKER_BIND_TO_PORT": "9000", "KOKORO_PORT": "9001"}).port == 9001
    assert Settings.from_env({"KOKORO_PORT": "9001"}, port=9002).port == 9002
    assert Settings.from_env({"KOKORO_PORT": "", "SAGEMAKER_BIND_TO_PORT": "9000"}).port == 9000  # empty: unset


def test_environment_is_read_and_validated():
    s = Settings.from_env({"KOKORO_MODE": "concurrent", "kokoro_api_key": "zq-secret-9"})  # any case, as before
    assert s.mode == "concurrent" and s.api_key.get_secret_value() == "zq-secret-9"
    assert "zq-secret-9" not in repr(s)
    with pytest.raises(ValueError, match="mode"):
        Settings.from_env({"KOKORO_MODE": "turbo"})


def test_the_shells_environment_changes_no_answer(monkeypatch):
    """Every variable of the server exported in the developer's shell (an API key among them) reaches
    no settings built in code or from an explicit environment: the contract tests' settings and the
    app builder's default come out the same, and the app answers as it did."""
    from starlette.testclient import TestClient

    from tests.contract.conftest import contract_settings
    from tests.support.app import build_app, fake_synth, wait_for

    def answers() -> tuple[object, ...]:
        app = build_app(fake_synth())
        with TestClient(app) as client:
            wait_for(lambda: client.get("/ping").status_code == 200)
            reply = client.post("/invocations", json={"text": "Hello there.", "format": "pcm"})
        return (contract_settings(), Settings.from_env({"KOKORO_MAX_QUEUE": "7"}), app.state.kokoro.settings,
                reply.status_code, reply.headers["content-type"])

    clean = answers()
    assert clean[3] == 200
    for field in Settings.model_fields:
        default = Settings.model_fields[field].default
        value = {bool: "true", int: "3", float: "3.5"}.get(type(default), "polluted")
        for name in Settings.env_names(field):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("KOKORO_API_KEY", "from-the-shell")
    assert answers() == clean


def test_the_table_lists_every_setting():
    rows = table()
    for name in Settings.model_fields:
        assert f"`KOKORO_{name.upper()}`" in rows
    assert "`SAGEMAKER_BIND_TO_PORT`" in rows


@pytest.mark.subprocess
def test_the_table_from_the_command_line():
    out = subprocess.run([sys.executable, "settings_table.py"], capture_output=True, text=True, check=True,
                         cwd=REPO).stdout
    assert out == table()


def test_cli_flags_override_the_environment():
    args = _parser().parse_args(["serve", "--port", "7000", "--mode", "concurrent", "--host", "0.0.0.0"])
    s = _settings(args, {"KOKORO_PORT": "9001", "KOKORO_MAX_QUEUE": "5"})
    assert (s.port, s.mode, s.host, s.max_queue) == (7000, "concurrent", "0.0.0.0", 5)


def test_backend_config_is_the_backend_part_of_the_settings():
    s = Settings(backend="fake", mode="concurrent", max_batch_size=4, threads=2, workers=3, max_ahead=5,
                 batch_on_cpu=True, dtype="bfloat16", fake_fail_on="Boom", max_queue=7, api_key="k")
    config = s.backend_config()
    assert type(config) is BackendConfig
    assert config.model_dump() == {name: getattr(s, name) for name in BackendConfig.model_fields}
    assert (config.runtime, config.mode, config.workers, config.max_ahead, config.batch_on_cpu) == (
        "fake", "concurrent", 3, 5, True)
    assert not hasattr(config, "api_key")  # the server's own fields stay with the server


def test_backend_variables_are_declared_once_and_documented():
    """Every backend variable is read by the settings object and listed in the settings table."""
    rows = table()
    for name, field in BackendConfig.model_fields.items():
        assert f"`KOKORO_{name.upper()}`" in rows and field.description
        assert name in Settings.model_fields
    s = Settings.from_env({"KOKORO_WORKERS": "", "KOKORO_FAKE_HANG_ON": "Held", "KOKORO_DTYPE": "float16"})
    assert (s.workers, s.fake_hang_on, s.dtype) == (None, "Held", "float16")
    with pytest.raises(ValueError):
        Settings.from_env({"KOKORO_DTYPE": "half"})


def test_every_kokoro_variable_in_the_product_is_in_the_settings_table():
    """Nothing reads a KOKORO_* variable that the settings classes do not declare: every name the
    product's code, Dockerfiles and scripts mention is a row of the generated table, and
    docs/settings.md carries that table as generated."""
    import re

    rows = table()
    assert rows in (REPO / "docs" / "settings.md").read_text()
    declared = set(re.findall(r"`(KOKORO_[A-Z0-9_]+)`", rows))
    files = [p for d in ("backends", "server", "agent", "deploy", "benchmarks") for p in (REPO / d).rglob("*")
             if p.is_file() and (p.suffix in (".py", ".sh", "") or p.name.startswith("Dockerfile"))]
    mentioned = {m for p in files for m in re.findall(r"\bKOKORO_[A-Z0-9_]*[A-Z0-9]\b", p.read_text(errors="ignore"))}
    prefixes = {"KOKORO_AGENT", "KOKORO_FAKE"}  # prefixes named in docstrings, not variables
    build_args = {m for p in files if p.name.startswith("Dockerfile")
                  for m in re.findall(r"^ARG (KOKORO_\w+)", p.read_text(), re.M)}  # image build, not run time
    assert mentioned - declared - prefixes - build_args == set()
