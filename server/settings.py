"""Every setting of the server, in one object (the table: docs/settings.md).

:class:`Settings` is built once, at start-up: the CLI builds it with ``Settings.from_env(os.environ,
**flags)`` and hands it to the app factory — nothing reads the environment later, and
``Settings(...)`` in a test reads no environment at all (see :mod:`backends.envsettings`). It extends
the backend's :class:`~backends.config.BackendConfig` (runtime, mode, text planning, limits, fake
runtime), and :meth:`Settings.backend_config` hands the backend that part as is.

The port also honours SageMaker's conventions: ``SAGEMAKER_BIND_TO_PORT`` when ``KOKORO_PORT`` is
unset, else 8080 (what SageMaker expects in the container). The host defaults to loopback; a
container sets ``KOKORO_HOST=0.0.0.0``.

``python -m server.settings`` prints the settings the environment gives; ``python settings_table.py``
at the repository's root prints the table of every variable of the project (docs/settings.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator

from backends.assets.official import OFFICIAL_BASE_URL
from backends.config import BackendConfig


class Settings(BackendConfig):
    """The server's configuration: the backend's fields (:class:`~backends.config.BackendConfig`)
    and the server's own. Immutable once built; safe to share across threads.

    ``Settings.from_env(environ, **overrides)`` reads a given environment, the overrides winning;
    ``Settings(**values)`` the declared defaults and ``values`` alone.
    """

    # -- network ------------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Interface to listen on; `0.0.0.0` in a container.")
    port: int = Field(
        8080,
        ge=0,
        le=65535,
        validation_alias=AliasChoices("KOKORO_PORT", "SAGEMAKER_BIND_TO_PORT", "port"),
        description="TCP port. Falls back to `SAGEMAKER_BIND_TO_PORT`, then 8080 (SageMaker's port).",
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        "info", description="Log level of the server and uvicorn."
    )
    log_format: Literal["plain", "json"] = Field(
        "plain", description="Log lines as plain text or one JSON object each (`json`: for a log collector)."
    )
    access_log: bool = Field(False, description="Log one line per HTTP request (uvicorn's access log).")
    realtime_window_s: float = Field(
        60.0, ge=0,
        description="Window over which the server judges whether synthesis keeps up with real time; when it falls "
        "behind (real-time factor above 1, or listeners' gaps growing) it logs a warning and `/ping` lists it in "
        "`warnings` (`0`: off).",
    )

    # -- limits -------------------------------------------------------------------------------
    max_message_bytes: int = Field(
        65536, ge=1024, description="Largest WebSocket message or POST body; a bigger message closes 1009 / 413."
    )
    max_sessions: int = Field(
        64, ge=1, description="Open WebSocket sessions at most; more are refused with 503 at the upgrade."
    )
    max_queued_per_session: int = Field(
        16, ge=1, description="Requests waiting in one WebSocket session; more get an `overloaded` error."
    )
    idle_timeout_s: float = Field(
        300.0, gt=0, description="A WebSocket session with no message and no work for this long closes (1000)."
    )
    send_timeout_s: float = Field(
        30.0, gt=0,
        description="A send to a client that has stopped reading that makes no progress for this long closes the "
        "WebSocket session (1008) or cuts the POST response, counted in `kokoro_send_timeouts_total`.",
    )
    keep_alive_s: int = Field(
        75, ge=1,
        description="How long an idle HTTP keep-alive connection stays open. Longer than the idle timeout of the "
        "front end that pools connections to the server (a load balancer's is typically 60 s): were the server to "
        "close one first, a request the front end sends on it just then would fail.",
    )
    drain_timeout_s: float = Field(
        20.0, ge=0,
        validation_alias=AliasChoices("KOKORO_DRAIN_S", "KOKORO_DRAIN_TIMEOUT_S", "drain_timeout_s"),
        description="On SIGTERM, how long the turns already started may take to finish (every route) before what "
        "is left gets an error and a 1001 close; the default leaves the server's own shutdown inside SageMaker's 30 s "
        "before SIGKILL.",
    )

    # -- assets -------------------------------------------------------------------------------
    official_url: str = Field(
        OFFICIAL_BASE_URL,
        description="Base URL `kokoro-serve assets --official` fetches `kokoro-v1.0.onnx` and `voices-v1.0.bin` "
        "from (checked against pinned SHA-256): the kokoro-onnx release `model-files-v1.0`, or a mirror of it.",
    )

    # -- security -----------------------------------------------------------------------------
    api_key: SecretStr | None = Field(
        None,
        description="When set, every route but `/ping` needs the key: `Authorization: Bearer <key>` (WebSocket: at "
        "the upgrade), the voice-agent protocols where their own clients send it (docs/operating.md).",
    )
    cors_origins: str = Field(
        "", description="Comma-separated origins allowed by CORS (`*` for any); empty: no CORS headers."
    )

    @field_validator("api_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @property
    def cors_origin_list(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    def backend_config(self) -> BackendConfig:
        """The backend's part of these settings, handed to :func:`backends.factory.create_backend` as is."""
        return BackendConfig.model_construct(**{name: getattr(self, name) for name in BackendConfig.model_fields})


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """``python -m server.settings``: the settings the environment gives, or one line per bad one (exit 2)."""
    from pydantic import ValidationError

    from backends.startup import settings_problems

    parser = argparse.ArgumentParser(prog="python -m server.settings", description="print the settings the "
                                     "environment gives (the table of every variable: settings_table.py)")
    parser.parse_args(argv)
    try:
        settings = Settings.from_env(os.environ if environ is None else environ)
    except ValidationError as e:
        for line in settings_problems(e, Settings.model_fields, Settings.env_names):
            print(f"python -m server.settings: {line}", file=sys.stderr)
        return 2
    for key, value in settings.model_dump().items():
        print(f"{key} = {value!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
