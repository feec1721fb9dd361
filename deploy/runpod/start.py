"""The RunPod image's entry: pod mode (the HTTP/WebSocket server) or serverless mode (the handler).

* ``pod`` — ``kokoro-serve serve`` on 0.0.0.0:$KOKORO_PORT (8080) in concurrent mode. A pod's port
  is public through RunPod's proxy (``https://<pod-id>-8080.proxy.runpod.net``), so an API key is
  required: it refuses to start without ``KOKORO_API_KEY`` unless ``KOKORO_ALLOW_NO_AUTH=1``.
* ``serverless`` — ``deploy/runpod/handler.py`` (RunPod's job queue is the only way in).

The mode is ``KOKORO_RUNPOD_MODE`` when set, else ``serverless`` when RunPod's serverless variables
are present (``RUNPOD_WEBHOOK_GET_JOB``), else ``pod``. The process replaces itself (``exec``) so
RunPod's stop signal reaches the server directly. The variables are those of
:class:`deploy.runpod.settings.RunPodSettings`, read when the entry runs (importing this module loads
the standard library only).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HANDLER = Path(__file__).with_name("handler.py")


def _settings(environ: Mapping[str, str]) -> Any:
    from pydantic import ValidationError

    from .settings import RunPodSettings

    try:
        return RunPodSettings.from_env(environ)
    except ValidationError as exc:
        raise SystemExit(f"invalid RunPod settings: {exc}") from exc


def mode_of(environ: Mapping[str, str]) -> str:
    settings = _settings(environ)
    return settings.runpod_mode or ("serverless" if settings.runpod_webhook_get_job else "pod")


def plan(environ: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` to exec. Raises SystemExit when a pod would start without auth."""
    env = dict(environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("KOKORO_MODE", "concurrent")
    if mode_of(env) == "serverless":
        return [sys.executable, str(HANDLER)], env
    settings = _settings(env)
    if not settings.api_key and not settings.allow_no_auth:
        raise SystemExit("pod mode serves a public port: set KOKORO_API_KEY (or KOKORO_ALLOW_NO_AUTH=1)")
    bindir = Path(sys.executable).parent
    exe = str(bindir / "kokoro-serve") if (bindir / "kokoro-serve").exists() else "kokoro-serve"
    return [exe, "serve", "--host", "0.0.0.0", "--port", str(settings.port), "--mode", settings.mode], env


def main() -> None:
    argv, env = plan(os.environ)
    print(f"start: {mode_of(env)} mode: {' '.join(argv)}", file=sys.stderr, flush=True)
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    main()
