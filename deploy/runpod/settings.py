"""The RunPod image's configuration: every ``KOKORO_*`` variable the entry (``start.py``) and the
serverless handler read, declared once with its default and meaning.

The RunPod-only variables (``KOKORO_RUNPOD_MODE``, ``KOKORO_SERVER_URL``, ``KOKORO_SERVER_API_KEY``,
``KOKORO_ALLOW_NO_AUTH``, and RunPod's own ``RUNPOD_WEBHOOK_GET_JOB``) appear in the table in
docs/settings.md through :meth:`RunPodSettings.markdown_rows`; the server's own variables that the
entry consults to plan the pod (``KOKORO_API_KEY``, ``KOKORO_PORT``, ``KOKORO_MODE``) are declared by
the server's settings and listed there, so they are marked ``LISTED_ELSEWHERE`` and left out of these
rows. Importing this module loads pydantic; ``start.py`` and ``handler.py`` import
it only when they run.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from backends.envsettings import LISTED_ELSEWHERE, EnvSettings


class RunPodSettings(EnvSettings):
    """What the RunPod entry and worker read. Immutable once built."""

    model_config = SettingsConfigDict(env_prefix="KOKORO_")

    runpod_mode: Literal["pod", "serverless"] | None = Field(
        None,
        description="RunPod image: `pod` (the HTTP/WebSocket server on a public port) or `serverless` (the job "
        "handler); unset: `serverless` where RunPod's job variables are present, else `pod`.",
    )
    allow_no_auth: bool = Field(
        False, description="RunPod pod: start without `KOKORO_API_KEY` although the port is public."
    )
    server_url: str | None = Field(
        None, description="RunPod worker: an already running server to use (unset: the worker starts its own on "
        "loopback).",
    )
    server_api_key: str | None = Field(None, description="RunPod worker: bearer key of `KOKORO_SERVER_URL`.")
    runpod_webhook_get_job: str | None = Field(
        None, validation_alias=AliasChoices("RUNPOD_WEBHOOK_GET_JOB"),
        description="Set by RunPod on a serverless worker (its job queue); when `KOKORO_RUNPOD_MODE` is unset, its "
        "presence means `serverless`.",
    )
    api_key: str | None = Field(None, json_schema_extra=LISTED_ELSEWHERE, description="The server's API key.")
    port: int = Field(
        8080, ge=0, le=65535, validation_alias=AliasChoices("KOKORO_PORT"), json_schema_extra=LISTED_ELSEWHERE,
        description="The server's port.",
    )
    mode: Literal["sequential", "concurrent"] = Field(
        "concurrent", json_schema_extra=LISTED_ELSEWHERE,
        description="The server's scheduling mode (concurrent in the RunPod image).",
    )
