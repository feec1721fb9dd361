"""Real processes for the deploy tests: the SageMaker ``serve`` entry and the RunPod worker.

Both start the real ``kokoro-serve`` server on the ONNX runtime, with the offline model directory.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_source_dir() -> Path:
    """A directory holding the offline assets (built, offline, when missing)."""
    from backends.assets import OFFLINE_ONNX, build_assets, default_model_dir

    for candidate in (os.environ.get("KOKORO_MODEL_DIR"), str(default_model_dir()), "/tmp/kassets"):
        if candidate and (Path(candidate) / OFFLINE_ONNX).is_file() and (Path(candidate) / "voices.npz").is_file():
            return Path(candidate)
    build_assets(default_model_dir(), torch=False)
    return default_model_dir()


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KOKORO_", "SAGEMAKER_", "RUNPOD_"))}
    env.update({"HF_HUB_OFFLINE": "1", "KOKORO_BACKEND": "onnx", "KOKORO_THREADS": "1",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", **extra})
    return env


def wait_http(url: str, proc: subprocess.Popen, timeout_s: float = 180, method: str = "GET") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f} s")


def stop(proc: subprocess.Popen, timeout_s: float = 30) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
