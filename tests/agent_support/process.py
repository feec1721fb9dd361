"""The agent app as a subprocess for the agent's tests: ``python -m agent serve`` with the scripted
model, on the one live-server helper (:class:`tests.support.live.ServerProcess`). Standard library
only (the Python 3.12 tests use it)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from tests.support.live import ServerProcess, free_port


def agent_process(tts_url: str, *, tokens_per_second: float, reply: str | None = None,
                  extra: list[str] | None = None, env: dict[str, str] | None = None,
                  log_path: Path | None = None) -> ServerProcess:
    """``python -m agent serve`` with the scripted model, speaking through ``tts_url`` (``env``: more
    ``KOKORO_AGENT_*`` settings); ``wait_ready()`` waits for its ``/ping``."""
    port = free_port()
    argv = [sys.executable, "-m", "agent", "serve", "--port", str(port), "--model", "scripted",
            "--tokens-per-second", str(tokens_per_second), "--tts-url", tts_url, "--log-level", "warning"]
    if reply:
        argv += ["--reply", reply]
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="kokoro-agent-test-", suffix=".log")
        os.close(fd)
        log_path = Path(name)
    return ServerProcess(log_path, argv=argv + (extra or []), port=port, **(env or {}))
