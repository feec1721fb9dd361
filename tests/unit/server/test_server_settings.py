"""Settings: environment names, SageMaker's port, the settings table (docs/settings.md), CLI overrides."""

from __future__ import annotations

import subprocess
import sys

import pytest

from backends.config import BackendConfig
from server.cli import _parser, _settings
from server.settings import Settings, markdown_table


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("KOKORO_PORT", "SAGEMAKER_BIND_TO_PORT", "KOKORO_HOST", "KOKORO_API_KEY", "KOKORO_MODE",
                 "KOKORO_WORKERS", "KOKORO_FAKE_HANG_ON", "KOKORO_DTYPE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults(clean_env):
    s = Settings()
    assert (s.host, s.port, s.backend, s.mode, s.api_key) == ("127.0.0.1", 8080, "onnx", "sequential", None)


def test_port_honours_sagemaker_then_kokoro(clean_env):
    clean_env.setenv("SAGEMAKER_BIND_TO_PORT", "9000")
    assert Settings().port == 9000
    clean_env.setenv("KOKORO_PORT", "9001")
    assert Settings().port == 9001
    assert Settings(port=9002).port == 9002


def test_environment_is_read_and_validated(clean_env):
    clean_env.setenv("KOKORO_MODE", "concurrent")
    clean_env.setenv("KOKORO_API_KEY", "zq-secret-9")
    s = Settings()
    assert s.mode == "concurrent" and s.api_key.get_secret_value() == "zq-secret-9"
    assert "zq-secret-9" not in repr(s)
    clean_env.setenv("KOKORO_MODE", "turbo")
    with pytest.raises(ValueError):
        Settings()


def test_markdown_table_lists_every_setting():
    table = markdown_table()
    for name in Settings.model_fields:
        assert f"`KOKORO_{name.upper()}`" in table
    assert "`SAGEMAKER_BIND_TO_PORT`" in table


def test_markdown_table_from_the_command_line():
    out = subprocess.run([sys.executable, "-m", "server.settings", "--markdown"], capture_output=True, text=True,
                         check=True).stdout
    assert out == markdown_table()


def test_cli_flags_override_the_environment(clean_env):
    clean_env.setenv("KOKORO_PORT", "9001")
    args = _parser().parse_args(["serve", "--port", "7000", "--mode", "concurrent", "--host", "0.0.0.0"])
    s = _settings(args)
    assert (s.port, s.mode, s.host) == (7000, "concurrent", "0.0.0.0")


def test_backend_config_is_the_backend_part_of_the_settings():
    s = Settings(backend="fake", mode="concurrent", max_batch_size=4, threads=2, workers=3, max_ahead=5,
                 batch_on_cpu=True, dtype="bfloat16", fake_fail_on="Boom", max_queue=7, api_key="k")
    config = s.backend_config()
    assert type(config) is BackendConfig
    assert config.model_dump() == {name: getattr(s, name) for name in BackendConfig.model_fields}
    assert (config.runtime, config.mode, config.workers, config.max_ahead, config.batch_on_cpu) == (
        "fake", "concurrent", 3, 5, True)
    assert not hasattr(config, "api_key")  # the server's own fields stay with the server


def test_backend_variables_are_declared_once_and_documented(clean_env):
    """Every backend variable is read by the settings object and listed in the settings table."""
    table = markdown_table()
    for name, field in BackendConfig.model_fields.items():
        assert f"`KOKORO_{name.upper()}`" in table and field.description
        assert name in Settings.model_fields
    clean_env.setenv("KOKORO_WORKERS", "")
    clean_env.setenv("KOKORO_FAKE_HANG_ON", "Held")
    clean_env.setenv("KOKORO_DTYPE", "float16")
    s = Settings()
    assert (s.workers, s.fake_hang_on, s.dtype) == (None, "Held", "float16")
    clean_env.setenv("KOKORO_DTYPE", "half")
    with pytest.raises(ValueError):
        Settings()


def test_every_kokoro_variable_in_the_product_is_in_the_settings_table():
    """Nothing reads a KOKORO_* variable that the settings classes do not declare: every name the
    product's code, Dockerfiles and scripts mention is a row of the generated table, and
    docs/settings.md carries that table as generated."""
    import re

    from tests.support.live import REPO

    table = markdown_table()
    assert table in (REPO / "docs" / "settings.md").read_text()
    declared = set(re.findall(r"`(KOKORO_[A-Z0-9_]+)`", table))
    files = [p for d in ("backends", "server", "agent", "deploy", "benchmarks") for p in (REPO / d).rglob("*")
             if p.is_file() and (p.suffix in (".py", ".sh", "") or p.name.startswith("Dockerfile"))]
    mentioned = {m for p in files for m in re.findall(r"\bKOKORO_[A-Z0-9_]*[A-Z0-9]\b", p.read_text(errors="ignore"))}
    prefixes = {"KOKORO_AGENT", "KOKORO_FAKE"}  # prefixes named in docstrings, not variables
    build_args = {m for p in files if p.name.startswith("Dockerfile")
                  for m in re.findall(r"^ARG (KOKORO_\w+)", p.read_text(), re.M)}  # image build, not run time
    assert mentioned - declared - prefixes - build_args == set()
