"""The one way every settings object of the project is built: from an environment it is given.

:class:`EnvSettings` is the base of every settings class — the backend's, the server's, the agent's,
the RunPod worker's, the SageMaker entry's and the deploy tools'. As with Starlette's
``Config(environ=...)``, the environment is an argument:

* ``Cls.from_env(environ, **overrides)`` reads the variables the class declares from ``environ`` (a
  mapping: ``os.environ`` at a program's entry point, a dict in a test), then ``overrides`` win
  (a command line's flags).
* ``Cls(**values)`` reads no environment at all: the declared defaults with ``values`` over them, so
  settings built in code (a test, a benchmark) never depend on the shell they run in.

A field's variable is the class's ``env_prefix`` followed by the field's name in capitals; a field
declared with ``validation_alias=AliasChoices(...)`` is read from each capitalised choice in turn (the
first one set wins, e.g. ``KOKORO_PORT`` then ``SAGEMAKER_BIND_TO_PORT``). Names match whatever their
case, as pydantic-settings matches them; an empty value counts as unset. Values arrive as strings and
are validated by the field's type (``"1"``/``"true"`` for a bool, ``"9"`` for an int); a bad one raises
pydantic's ``ValidationError`` naming the field.

:meth:`EnvSettings.markdown_rows` gives a class's rows of the table in docs/settings.md
(``| variable | default | meaning |``). Importing this module loads pydantic only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import AliasChoices
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

#: ``json_schema_extra`` of a field whose variable another class declares and lists (the table shows it once).
LISTED_ELSEWHERE: dict[str, Any] = {"listed_elsewhere": True}
#: ``json_schema_extra`` key for the default the table shows when the declared one says little (``None``).
SHOWN_DEFAULT = "shown_default"


class EnvSettings(BaseSettings):
    """Settings declared once, read from a given environment. Immutable once built; safe to share
    across threads."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Only the constructor's values: the environment comes in through from_env, never implicitly.
        return (init_settings,)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: Any) -> Self:
        """The settings ``environ`` gives, with ``overrides`` (by field name) over them."""
        return cls(**{**cls.env_values(environ), **overrides})

    @classmethod
    def env_values(cls, environ: Mapping[str, str]) -> dict[str, str]:
        """``{field name: raw value}`` of the fields ``environ`` sets (not yet validated)."""
        lowered = {key.lower(): value for key, value in environ.items()}
        values = {}
        for name in cls.model_fields:
            for env in cls.env_names(name):
                if lowered.get(env.lower(), "") != "":
                    values[name] = lowered[env.lower()]
                    break
        return values

    @classmethod
    def env_names(cls, name: str) -> list[str]:
        """The variables field ``name`` is read from, in order."""
        alias = cls.model_fields[name].validation_alias
        if isinstance(alias, AliasChoices):
            return [a for a in alias.choices if isinstance(a, str) and a.isupper()]
        return [str(cls.model_config.get("env_prefix", "")) + name.upper()]

    @classmethod
    def markdown_rows(cls) -> list[str]:
        """``| variable | default | meaning |`` rows of docs/settings.md, one a field (but those
        marked :data:`LISTED_ELSEWHERE`)."""
        rows = []
        for name, field in cls.model_fields.items():
            if _extra(field).get("listed_elsewhere"):
                continue
            env = " / ".join(f"`{e}`" for e in cls.env_names(name))
            rows.append(f"| {env} | {_shown_default(field)} | {field.description} |")
        return rows


def markdown_table(classes: list[type[EnvSettings]]) -> str:
    """The table of docs/settings.md: the rows of ``classes``, in order, under one header."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for cls in classes:
        rows += cls.markdown_rows()
    return "\n".join(rows) + "\n"


def _extra(field: FieldInfo) -> dict[str, Any]:
    extra = field.json_schema_extra
    return dict(extra) if isinstance(extra, dict) else {}


def _shown_default(field: FieldInfo) -> str:
    shown = _extra(field).get(SHOWN_DEFAULT)
    if shown is not None:
        return str(shown)
    value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if value == "":
        return "empty"
    return f"`{value}`"
