"""moto's AWS as a server process on loopback, reached the way the deploy CLI reaches AWS:
``AWS_ENDPOINT_URL`` plus dummy credentials, from a separate process.

:func:`moto_server` starts ``python -m moto.server`` as is. With ``endpoints_stay_creating`` it starts
this module instead, which runs the same server with one gap of moto's filled: a real SageMaker
endpoint reads ``Creating`` for minutes after ``CreateEndpoint``, moto's is InService at once. Here new
endpoints stay ``Creating``, so a test can see what the CLI does with an endpoint that is not
InService yet.

    python -m tests.support.moto_server --port PORT [--endpoints-stay-creating]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from tests.support.live import REPO, free_port

REGION = "us-east-1"
ACCOUNT = "123456789012"


def aws_env(port: int) -> dict[str, str]:
    """The environment a user's shell would have, pointed at the server (no profile, no real keys)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION,
                "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull})
    return env


def _wait_listening(port: int, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)
    raise TimeoutError(f"moto server did not listen on {port} within {timeout_s:.0f} s")


@contextlib.contextmanager
def moto_server(*, endpoints_stay_creating: bool = False) -> Iterator[dict[str, str]]:
    """Run a moto server; yields the environment for the CLI (and for boto3 in the test)."""
    port = free_port()
    if endpoints_stay_creating:
        command = [sys.executable, "-m", "tests.support.moto_server", "--port", str(port),
                   "--endpoints-stay-creating"]
    else:
        command = [sys.executable, "-m", "moto.server", "-p", str(port), "-H", "127.0.0.1"]
    proc = subprocess.Popen(command, cwd=REPO, env=aws_env(port), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, proc)
        yield aws_env(port)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _endpoints_stay_creating() -> None:
    from moto.sagemaker import models

    original = models.FakeEndpoint.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.endpoint_status = "Creating"

    models.FakeEndpoint.__init__ = init


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--endpoints-stay-creating", action="store_true")
    args = p.parse_args()
    if args.endpoints_stay_creating:
        _endpoints_stay_creating()
    from moto.server import main as moto_main

    moto_main(["-p", str(args.port), "-H", "127.0.0.1"])


if __name__ == "__main__":
    main()
