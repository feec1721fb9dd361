"""Create the RunPod template and serverless endpoint, or a pod, with the ``runpod`` SDK.

    export RUNPOD_API_KEY=...
    python -m deploy.runpod.deploy endpoint --image <registry>/kokoro-serve:runpod [--dry-run]
    python -m deploy.runpod.deploy pod --image <registry>/kokoro-serve:runpod [--api-key KEY] [--smoke]
    python -m deploy.runpod.deploy smoke --pod-id <id> --api-key KEY
    python -m deploy.runpod.deploy terminate --pod-id <id>

``endpoint``: a serverless template (``KOKORO_RUNPOD_MODE=serverless``) and an endpoint using it,
scaling between ``--workers-min`` and ``--workers-max`` (0 minimum: no cost while idle, a cold start
on the first job). ``pod``: an always-on GPU pod serving HTTP/WebSocket on port 8080 in concurrent
mode behind an API key (generated and printed once when not given; pass
``--api-key-secret NAME`` to reference a RunPod secret instead of putting the key in the pod's
environment). A pod bills by the hour until terminated.

``--dry-run`` prints the calls it would make as JSON, needs no API key and touches no network.
The SDK is imported only for a real run.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deploy.cli import env_pairs

if TYPE_CHECKING:
    from deploy.settings import DeploySettings

PORT = 8080


@dataclass
class Call:
    """One SDK call: ``runpod.<function>(**kwargs)``; ``result_key`` feeds later calls."""

    function: str
    kwargs: dict[str, Any]
    uses: dict[str, str] = field(default_factory=dict)  # kwarg -> name of an earlier call's result id


def plan_endpoint(args: argparse.Namespace) -> list[Call]:
    env = {"KOKORO_RUNPOD_MODE": "serverless", "KOKORO_MODE": "concurrent", **env_pairs(args.env)}
    template = Call("create_template", {
        "name": f"{args.name}-template", "image_name": args.image, "is_serverless": True,
        "container_disk_in_gb": args.disk_gb, "env": env})
    endpoint = Call("create_endpoint", {
        "name": args.name, "gpu_ids": args.gpu_ids, "workers_min": args.workers_min,
        "workers_max": args.workers_max, "idle_timeout": args.idle_timeout, "flashboot": True,
        "scaler_type": "QUEUE_DELAY", "scaler_value": args.queue_delay_s}, uses={"template_id": "create_template"})
    return [template, endpoint]


def plan_pod(args: argparse.Namespace, api_key: str) -> list[Call]:
    key_value = f"{{{{ RUNPOD_SECRET_{args.api_key_secret} }}}}" if args.api_key_secret else api_key
    env = {"KOKORO_RUNPOD_MODE": "pod", "KOKORO_MODE": "concurrent", "KOKORO_API_KEY": key_value,
           "KOKORO_PORT": str(PORT), **env_pairs(args.env)}
    return [Call("create_pod", {
        "name": args.name, "image_name": args.image, "gpu_type_id": args.gpu_type, "gpu_count": 1,
        "cloud_type": args.cloud_type, "ports": f"{PORT}/http", "container_disk_in_gb": args.disk_gb,
        "volume_in_gb": 0, "start_ssh": False, "env": env})]


def execute(calls: list[Call], sdk: Any) -> dict[str, dict]:
    """Run the planned calls in order against the ``runpod`` module; returns each call's result."""
    results: dict[str, dict] = {}
    for call in calls:
        kwargs = dict(call.kwargs)
        for arg, source in call.uses.items():
            kwargs[arg] = results[source]["id"]
        results[call.function] = getattr(sdk, call.function)(**kwargs)
    return results


def proxy_url(pod_id: str, port: int = PORT) -> str:
    return f"https://{pod_id}-{port}.proxy.runpod.net"


def wait_and_smoke(pod_id: str, api_key: str, *, timeout_s: float = 1200, base_url: str | None = None) -> str:
    """Wait for the pod's /ping, then run the bidirectional smoke test through RunPod's proxy."""
    import urllib.request

    from deploy.smoke import websocket_smoke

    url = base_url or proxy_url(pod_id)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/ping", timeout=10) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{url}/ping did not answer 200 within {timeout_s:.0f} s")
        time.sleep(10)
    ws = "ws" + url[4:] + "/invocations-bidirectional-stream"
    return websocket_smoke(ws, api_key=api_key).summary()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m deploy.runpod.deploy", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("endpoint", "pod"):
        s = sub.add_parser(name)
        s.add_argument("--image", required=True, help="image built from deploy/runpod/Dockerfile")
        s.add_argument("--name", default="kokoro-tts")
        s.add_argument("--disk-gb", type=int, default=20)
        s.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
        s.add_argument("--dry-run", action="store_true", help="print the calls, make none")
    e = sub.choices["endpoint"]
    e.add_argument("--gpu-ids", default="AMPERE_24,ADA_24", help="RunPod GPU pool ids, in preference order")
    e.add_argument("--workers-min", type=int, default=0)
    e.add_argument("--workers-max", type=int, default=3)
    e.add_argument("--idle-timeout", type=int, default=5, help="seconds a worker idles before it stops")
    e.add_argument("--queue-delay-s", type=int, default=4, help="scale up when jobs wait longer than this")
    o = sub.choices["pod"]
    o.add_argument("--gpu-type", default="NVIDIA RTX A5000")
    o.add_argument("--cloud-type", default="SECURE", choices=["SECURE", "COMMUNITY", "ALL"])
    o.add_argument("--api-key", help="the server's API key (default: a new random one, printed once)")
    o.add_argument("--api-key-secret", help="use the RunPod secret of this name as the API key")
    o.add_argument("--smoke", action="store_true", help="wait for the pod, then run the bidirectional smoke test")
    s = sub.add_parser("smoke")
    s.add_argument("--pod-id", required=True)
    s.add_argument("--api-key", help="the server's API key (default: KOKORO_API_KEY)")
    t = sub.add_parser("terminate")
    t.add_argument("--pod-id", required=True)
    return p


def _sdk(settings: DeploySettings) -> Any:
    import runpod

    runpod.api_key = settings.runpod_api_key or runpod.api_key
    if not runpod.api_key:
        raise SystemExit("set RUNPOD_API_KEY (or use --dry-run)")
    return runpod


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """CLI entry; ``environ``: the environment to read (``os.environ`` when None)."""
    from deploy.settings import DeploySettings  # pydantic: imported when the command runs

    env: Mapping[str, str] = os.environ if environ is None else environ
    settings = DeploySettings.from_env(env)
    args = _parser().parse_args(argv)
    if args.command == "smoke":
        from deploy.runpod.settings import RunPodSettings

        print(wait_and_smoke(args.pod_id, args.api_key or RunPodSettings.from_env(env).api_key))
        return 0
    if args.command == "terminate":
        _sdk(settings).terminate_pod(args.pod_id)
        print(f"pod {args.pod_id} terminated")
        return 0
    api_key = None
    if args.command == "endpoint":
        calls = plan_endpoint(args)
    else:
        api_key = args.api_key or (None if args.api_key_secret else secrets.token_urlsafe(32))
        calls = plan_pod(args, api_key or "")
    if args.dry_run:
        shown = [{"call": f"runpod.{c.function}", "kwargs": c.kwargs, "uses": c.uses} for c in calls]
        if api_key and not args.api_key:
            for c in shown:
                c["kwargs"]["env"]["KOKORO_API_KEY"] = "<generated at deploy time>"
        print(json.dumps(shown, indent=2))
        return 0
    results = execute(calls, _sdk(settings))
    if args.command == "endpoint":
        ep = results["create_endpoint"]
        print(f"endpoint {ep['id']} ({ep.get('name')}): POST https://api.runpod.ai/v2/{ep['id']}/run, "
              f"stream with /stream/<job-id>")
        return 0
    pod = results["create_pod"]
    print(f"pod {pod['id']}: {proxy_url(pod['id'])} (bills until `terminate --pod-id {pod['id']}`)")
    if api_key and not args.api_key:
        print(f"API key (shown once): {api_key}", file=sys.stderr)
    if args.smoke:
        print(wait_and_smoke(pod["id"], api_key or ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
