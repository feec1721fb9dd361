"""What a command says when it cannot start, in one line each, instead of a traceback.

* :func:`settings_problems` — a pydantic ``ValidationError`` of a settings class as one line per
  bad setting: the variable (or the flag it came from), the value, and what is allowed.
* :func:`install_hint` — a missing optional package (torch for the torch runtime, boto3 for S3,
  the agent's packages) as the command that installs it; None for any other error.
* :func:`runtime_problem` — the runtime's packages checked before a server binds its port, so a
  missing one is that one line (exit 2), never a failure inside the server's start-up.
* :class:`ConfigError` — a setting whose value cannot be used (a lexicon file that is missing or
  malformed): its message names the setting, the value and the fix.
* :func:`version` — the installed version every command's ``--version`` prints.

Pure Python, importable by the agent (no runtime, no server).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: A missing module -> what needs it and how to install it.
_EXTRAS = {
    "torch": ("the torch runtime needs PyTorch", "pip install 'kokoro-serve[torch]' (CPU wheels: add "
              "--extra-index-url https://download.pytorch.org/whl/cpu)"),
    "transformers": ("the torch runtime needs transformers", "pip install 'kokoro-serve[torch]'"),
    "loguru": ("the torch runtime needs loguru", "pip install 'kokoro-serve[torch]'"),
    "huggingface_hub": ("the torch runtime needs huggingface-hub", "pip install 'kokoro-serve[torch]'"),
    "onnx": ("rebuilding the PyTorch checkpoint needs onnx", "pip install 'kokoro-serve[torch]'"),
    "kokoro": ("the torch runtime needs the `kokoro` package", "pip install kokoro==0.9.4 --no-deps"),
    "misaki": ("misaki's English and Mandarin front ends need misaki", "pip install 'kokoro-serve[languages]'"),
    "spacy": ("misaki's English front end needs spaCy", "pip install 'kokoro-serve[languages]'"),
    "jieba": ("the Mandarin front end needs jieba", "pip install 'kokoro-serve[languages]'"),
    "boto3": ("S3 sources and the AWS clients need boto3", "pip install 'kokoro-serve[s3]'"),
    "botocore": ("S3 sources and the AWS clients need boto3", "pip install 'kokoro-serve[s3]'"),
    "strands": ("the agent needs strands-agents", "pip install 'kokoro-serve[agent]'"),
    "bedrock_agentcore": ("the agent needs bedrock-agentcore", "pip install 'kokoro-serve[agent]'"),
    "aws_sdk_sagemaker_runtime_http2": (
        "the SageMaker bidirectional stream needs aws-sdk-sagemaker-runtime-http2 (Python >= 3.12)",
        "pip install 'kokoro-serve[agent]' under Python 3.12 (`make deploy-venv`)",
    ),
}


class ConfigError(ValueError):
    """A setting's value cannot be used; the message is one line with the setting, the value and the fix."""


#: Modules a runtime imports when it loads (checked by :func:`runtime_problem` before a server starts).
RUNTIME_MODULES = {"torch": ("torch", "transformers", "kokoro")}


def runtime_problem(backend: str) -> str | None:
    """The one line to print when ``backend``'s packages are not installed (the install command), else None.
    Imports the runtime's main package (a broken install fails here, as it would at load)."""
    import importlib
    import importlib.util

    for i, module in enumerate(RUNTIME_MODULES.get(backend, ())):
        try:
            if i == 0:
                importlib.import_module(module)
            elif importlib.util.find_spec(module) is None:
                raise ModuleNotFoundError(f"No module named {module!r}", name=module)
        except ModuleNotFoundError as e:
            return install_hint(e) or str(e)
    return None


def install_hint(error: BaseException) -> str | None:
    """``what needs it: how to install it`` when ``error`` (or its cause) is a missing optional
    package; None otherwise."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ModuleNotFoundError) and seen.name:
            top = seen.name.split(".")[0]
            if top in _EXTRAS:
                what, how = _EXTRAS[top]
                return f"{what}, which is not installed: {how}"
        if isinstance(seen, ImportError) and "pip install" in str(seen):
            return str(seen)  # a runtime's own hint
        seen = seen.__cause__ or seen.__context__
    return None


def settings_problems(error: Any, fields: Iterable[str], env_names: Callable[[str], list[str]],
                      flags: Mapping[str, str] | None = None) -> list[str]:
    """One line per bad setting of a pydantic ``ValidationError`` of a settings class with the
    given ``fields``: ``KOKORO_MODE='fast': Input should be 'sequential' or 'concurrent'``.
    ``env_names`` gives a field's variables (all are named: the error does not say which one was
    set); ``flags`` maps the fields given on the command line to their flag (named instead)."""
    flags = flags or {}
    lines = []
    for problem in error.errors():
        key = str(problem["loc"][0]) if problem.get("loc") else ""
        field = next((f for f in fields if f == key or key in env_names(f)), key)
        where = flags.get(field) or " / ".join(env_names(field) if field in fields else [key or "settings"])
        shown = problem.get("input")
        value = "" if isinstance(shown, dict) else f"={repr(shown)[:80]}"
        lines.append(f"{where}{value}: {problem['msg']}")
    return lines


def version() -> str:
    """The installed kokoro-serve's version, for every command's ``--version``."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("kokoro-serve")
    except PackageNotFoundError:
        return "unknown (not installed)"
