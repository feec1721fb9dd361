"""The first ten minutes, measured: ``make first-run-check``.

Clones the repository's HEAD into a temporary directory, gives it an empty model cache
(``KOKORO_MODEL_DIR`` inside the temporary directory), an empty pip cache and no virtualenv, runs
``make serve`` there in the background, and waits for ``GET /ping`` to answer 200. It prints the time
that took, the size of the ``.venv`` and of the model directory (disk usage, as ``du`` counts it),
stops the server, removes everything, and exits non-zero when a goal was missed:

    python tests/first_run_check.py [--max-seconds 180] [--max-venv-mb 800] [--keep]

pip reaches the package registry (a fresh machine would). Standard library only: it runs before
any virtualenv exists. Not collected by pytest (it takes minutes and both cores).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def disk_usage(root: Path) -> int:
    """Bytes on disk under ``root`` (symlinks not followed), like ``du -s``."""
    total = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None


def _echo(stream, started: float, log: list[str]) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip()
        log.append(line)
        print(f"[{time.monotonic() - started:6.1f}s] {line}", flush=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)  # the server drains and exits; make follows
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run(work: Path, max_wait_s: float) -> tuple[float | None, subprocess.Popen]:
    """Clone, start ``make serve``, wait for /ping 200; returns (seconds or None, the make process)."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    clone = work / "kokoro-serve"
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", head], check=True)
    print(f"fresh clone of {head[:12]} in {clone}", flush=True)
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(KOKORO_MODEL_DIR=str(work / "models"), KOKORO_PORT=str(port), KOKORO_HOST="127.0.0.1",
               XDG_CACHE_HOME=str(work / "cache"), PIP_NO_CACHE_DIR="1")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "/.venv" not in p)
    started = time.monotonic()
    proc = subprocess.Popen(["make", "serve"], cwd=clone, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    log: list[str] = []
    threading.Thread(target=_echo, args=(proc.stdout, started, log), daemon=True).start()
    while time.monotonic() - started < max_wait_s:
        if ping(port) == 200:
            return time.monotonic() - started, proc
        if proc.poll() is not None:
            print(f"make serve exited with {proc.returncode} before /ping answered 200", flush=True)
            return None, proc
        time.sleep(1)
    print(f"no /ping 200 within {max_wait_s:.0f}s", flush=True)
    return None, proc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-seconds", type=float, default=float(os.environ.get("FIRST_RUN_MAX_S", 180)),
                        help="goal: /ping 200 within this many seconds of `make serve` (default 180)")
    parser.add_argument("--max-venv-mb", type=float, default=float(os.environ.get("FIRST_RUN_MAX_VENV_MB", 800)),
                        help="goal: the .venv under this many MB on disk (default 800)")
    parser.add_argument("--give-up-after", type=float, default=900, help="stop waiting after this many seconds")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (prints where)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="kokoro-first-run-"))
    proc = None
    try:
        elapsed, proc = run(work, args.give_up_after)
        venv_mb = disk_usage(work / "kokoro-serve" / ".venv") / 1e6
        models_mb = disk_usage(work / "models") / 1e6
    finally:
        if proc is not None:
            _stop(proc)
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    print(f"\nfirst run: /ping 200 after {elapsed:.0f} s (goal {args.max_seconds:.0f} s)" if elapsed is not None
          else "\nfirst run: /ping never answered 200")
    print(f"first run: .venv {venv_mb:.0f} MB (goal {args.max_venv_mb:.0f} MB), model directory {models_mb:.0f} MB")
    print(f"first run: load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    if elapsed is None:
        return 2
    return 0 if elapsed <= args.max_seconds and venv_mb <= args.max_venv_mb else 1


if __name__ == "__main__":
    sys.exit(main())
