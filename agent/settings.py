"""The agent's configuration: every ``KOKORO_AGENT_*`` variable, declared once with its default and
meaning.

:class:`AgentSettings` is built once (``kokoro-agent serve`` builds it with
``AgentSettings.from_env(os.environ, **flags)``, the flags overriding fields) and handed to
:func:`agent.app.create_app`; nothing else reads the environment. It is an
:class:`~backends.envsettings.EnvSettings`, the project's one settings base (a pure-Python module:
importing it loads pydantic, no runtime), which also gives its rows of the table in docs/settings.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from backends.envsettings import EnvSettings

AGENT_PREFIX = "KOKORO_AGENT_"


class AgentSettings(EnvSettings):
    """Everything the agent app needs. Immutable once built; shared by all turns."""

    model_config = SettingsConfigDict(env_prefix=AGENT_PREFIX)

    host: str = Field("127.0.0.1", description="Agent app: interface to listen on (`0.0.0.0` in AgentCore).")
    port: int = Field(8090, ge=0, le=65535, description="Agent app: TCP port (8080 in AgentCore).")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Agent app: log level.")
    log_format: Literal["plain", "json"] = Field(
        "plain", validation_alias=AliasChoices("KOKORO_AGENT_LOG_FORMAT", "KOKORO_LOG_FORMAT"),
        description="Agent app: log lines as plain text or one JSON object each; falls back to `KOKORO_LOG_FORMAT`.",
    )
    model: Literal["bedrock", "scripted"] = Field(
        "bedrock", description="Language model: `bedrock` (Strands' BedrockModel) or `scripted` (offline canned reply)."
    )
    tokens_per_second: float = Field(30.0, gt=0, description="Scripted model: the reply's token rate.")
    scripted_reply: str | None = Field(
        None, validation_alias=AliasChoices("KOKORO_AGENT_REPLY"),
        description="Scripted model: the canned reply (unset: a short text about Kokoro).",
    )
    bedrock_model_id: str | None = Field(None, description="Bedrock model id (unset: Strands' default).")
    bedrock_endpoint_url: str | None = Field(None, description="Bedrock runtime URL (a VPC endpoint).")
    tts_url: str | None = Field(
        "http://127.0.0.1:8080",
        description="TTS server, `ws(s)://` or `http(s)://` (ignored when an endpoint name is set).",
    )
    tts_api_key: str | None = Field(None, description="Bearer key for a TTS server that requires one (a RunPod pod).")
    endpoint_name: str | None = Field(
        None, description="SageMaker endpoint: speak through its HTTP/2 bidirectional stream (Python >= 3.12)."
    )
    region: str | None = Field(
        None, validation_alias=AliasChoices("KOKORO_AGENT_REGION", "AWS_REGION"),
        description="AWS region of the SageMaker endpoint and Bedrock; falls back to `AWS_REGION`.",
    )
    voice: str | None = Field(None, description="TTS voice (unset: the server's default).")
    speed: float | None = Field(None, ge=0.5, le=2.0, description="TTS speed, 0.5-2.0 (unset: the server's default).")
    first_clause_words: int | None = Field(
        6, ge=0, description="The first chunk may end at a clause after this many words (`0`: off).",
    )
    tts_reconnect_tries: int = Field(
        3, ge=0,
        description="When the TTS session drops mid-reply (or cannot be opened), open a new one up to this many "
        "times, re-sending the sentences not yet spoken, before giving up with `tts_unavailable` (`0`: never).",
    )
    tts_reconnect_delay_s: float = Field(
        0.2, gt=0, description="First wait before reopening a lost TTS session; it grows 1.6x per failed attempt.",
    )
    tts_reconnect_max_delay_s: float = Field(
        2.0, gt=0, description="Longest wait between attempts to reopen a lost TTS session.",
    )

    def reconnect(self) -> Any:
        """The TTS client's :class:`~agent.reconnect.Reconnect` policy from these settings."""
        from .reconnect import Reconnect

        return Reconnect(self.tts_reconnect_tries, self.tts_reconnect_delay_s, self.tts_reconnect_max_delay_s)
