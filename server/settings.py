"""Every setting of the server, in one object (DESIGN.md §5).

:class:`Settings` reads ``KOKORO_*`` environment variables once, at start-up; the app factory and the CLI take the object as an
argument — nothing reads the environment later, so tests build their own ``Settings(...)``.

The port also honours SageMaker's conventions: ``SAGEMAKER_BIND_TO_PORT`` when ``KOKORO_PORT`` is
unset, else 8080 (what SageMaker expects in the container). The host defaults to loopback; a
container sets ``KOKORO_HOST=0.0.0.0``.

``python -m server.settings --markdown`` prints the README's table of every variable.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "KOKORO_"


class Settings(BaseSettings):
    """The server's configuration. Immutable once built; safe to share across threads.

    ``Settings()`` reads the environment; ``Settings(_env_file=path)`` also reads a dotenv file;
    keyword arguments override both.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="ignore",
        frozen=True,
        populate_by_name=True,
    )

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
    access_log: bool = Field(False, description="Log one line per HTTP request (uvicorn's access log).")

    # -- backend ------------------------------------------------------------------------------
    backend: Literal["onnx", "torch", "fake"] = Field(
        "onnx",
        description="Runtime: `onnx` (CPU) or `torch` (CUDA/CPU); `fake` is a model-free stand-in for tests and "
        "load/soak runs only (`backends/fake.py`).",
    )
    mode: Literal["sequential", "concurrent"] = Field(
        "sequential",
        description="`sequential`: one synthesis at a time; `concurrent`: micro-batches across sessions.",
    )
    model_dir: Path | None = Field(
        None, description="Model directory (ONNX/PyTorch model, voices, config). Default: the user cache dir."
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Device for the `torch` runtime.")
    threads: int | None = Field(
        None, ge=1, description="Runtime intra-op threads. Default: the runtime's choice (all cores)."
    )
    default_voice: str | None = Field(
        None, description="Voice when a request names none. Default: `af_heart` if present, else `jm_kumo`."
    )
    default_lang: str = Field("en-us", description="Language when a request names none.")
    fast_first_segment: bool = Field(
        True, description="Cut the first segment at a clause boundary so the first audio comes early."
    )
    first_segment_words: int = Field(3, ge=1, description="Fewest words in an early-cut first segment.")
    first_segment_max_words: int = Field(12, ge=1, description="Most words in an early-cut first segment.")
    segment_phonemes: int = Field(
        300, ge=16, le=510, description="Target phonemes per later segment (the model's limit is 510)."
    )
    max_batch_size: int = Field(16, ge=1, description="Concurrent mode: most segments in one batch.")
    max_wait_ms: float = Field(5.0, ge=0, description="Concurrent mode: longest wait to fill a batch.")
    max_queue: int = Field(
        256,
        ge=1,
        description="Requests synthesising or waiting for the runtime at once (all sessions); beyond it new "
        "requests are refused `overloaded` (503).",
    )
    request_timeout_s: float | None = Field(
        120.0, gt=0, description="A request still synthesising after this long fails with `timeout`."
    )

    # -- limits -------------------------------------------------------------------------------
    max_text_chars: int = Field(5000, ge=1, description="Longest `text` accepted (413 / `text_too_long`).")
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
    drain_timeout_s: float = Field(
        30.0, ge=0, description="On SIGTERM, how long in-flight work may take before sockets are closed anyway."
    )

    # -- security -----------------------------------------------------------------------------
    api_key: SecretStr | None = Field(
        None,
        description="When set, every route but `/ping` needs `Authorization: Bearer <key>` (WebSocket: at the upgrade).",
    )
    cors_origins: str = Field(
        "", description="Comma-separated origins allowed by CORS (`*` for any); empty: no CORS headers."
    )

    @field_validator("api_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("model_dir", "default_voice", "threads", "request_timeout_s", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and value.strip() == "" else value

    @property
    def cors_origin_list(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    def backend_options(self, observer: Any = None) -> Any:
        """The :class:`backends.factory.BackendOptions` these settings describe."""
        from backends.factory import BackendOptions

        return BackendOptions(
            runtime=self.backend,
            mode=self.mode,
            model_dir=self.model_dir,
            device=self.device,
            threads=self.threads,
            default_voice=self.default_voice,
            default_lang=self.default_lang,
            fast_first_segment=self.fast_first_segment,
            first_segment_words=self.first_segment_words,
            first_segment_max_words=self.first_segment_max_words,
            segment_phonemes=self.segment_phonemes,
            max_text_chars=self.max_text_chars,
            max_batch_size=self.max_batch_size,
            max_wait_ms=self.max_wait_ms,
            max_queue=self.max_queue,
            request_timeout_s=self.request_timeout_s,
            observer=observer,
        )


def _env_names(name: str, field: Any) -> list[str]:
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [a for a in alias.choices if isinstance(a, str) and a.isupper()]
    return [ENV_PREFIX + name.upper()]


def _default(name: str, field: Any) -> str:
    if name == "model_dir":
        return "user cache dir (`~/.cache/kokoro-serve/models` on Linux)"
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if value == "":
        return "empty"
    return f"`{value}`"


def markdown_table() -> str:
    """The README's table: every variable, its default and what it does."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        env = " / ".join(f"`{e}`" for e in _env_names(name, field))
        rows.append(f"| {env} | {_default(name, field)} | {field.description} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m server.settings", description=__doc__.split("\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print the README table of variables")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown_table(), end="")
    else:
        for key, value in Settings().model_dump().items():
            print(f"{key} = {value!r}")


if __name__ == "__main__":
    main()
