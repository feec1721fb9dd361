"""Deploy kokoro-serve to a SageMaker real-time endpoint with boto3, and take it down again.

    python -m deploy.sagemaker.deploy deploy --name kokoro-tts --image <ecr-uri> --role <role-arn> \\
        --model-dir ~/.cache/kokoro-serve/models --model-s3-uri s3://bucket/kokoro/model.tar.gz
    python -m deploy.sagemaker.deploy agent --name kokoro-tts --image <arm64-agent-uri> --role <arn>
    python -m deploy.sagemaker.deploy destroy --name kokoro-tts [--delete-model-data] [--delete-ecr-repo]

``deploy`` creates or updates the model, endpoint config (ml.g5.xlarge by default, a start-up
health-check timeout long enough for a cold GPU start) and endpoint, waits for InService, sets
target-tracking autoscaling on concurrent requests per model, and then runs a real bidirectional
smoke test through the SageMaker HTTP/2 stream: InService only means /ping answered, not that the
handler reads the binary frames SageMaker delivers. A failed smoke test exits non-zero and keeps
the previous configuration for a roll-back.

Nothing heavy is imported at module import: boto3 comes in when a client is first needed, the
smoke-test transport (the agent package's SageMaker client) only when the smoke test runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deploy.cli import env_pairs
from deploy.sagemaker import agent_runtime, endpoint, teardown
from deploy.sagemaker.endpoint import DeployError, EndpointSpec

# smoke(endpoint_name, region) -> report with .summary(); raises on failure.
SmokeTest = Callable[[str, str], Any]


class AwsClients:
    """boto3 clients from one session, created on first use. Not thread-safe."""

    def __init__(self, region: str | None = None, session: Any = None) -> None:
        if session is None:
            import boto3

            session = boto3.session.Session(region_name=region)
        self.session = session
        self.region = session.region_name or region
        if not self.region:
            raise SystemExit("no AWS region: pass --region or set AWS_REGION")
        self._clients: dict[tuple[str, str], Any] = {}

    def client(self, service: str, region_name: str | None = None) -> Any:
        key = (service, region_name or self.region)
        if key not in self._clients:
            self._clients[key] = self.session.client(service, region_name=key[1])
        return self._clients[key]


@dataclass(frozen=True)
class Scaling:
    min_instances: int = 1
    max_instances: int = 4
    target_sessions: float = 8.0  # open bidirectional sessions per instance the policy aims for


@dataclass
class DeployResult:
    endpoint: str
    action: str  # created | updated | unchanged
    model: str
    config: str
    smoke: str | None = None
    scaling_policy: str | None = None
    pruned: list[str] = field(default_factory=list)


def default_smoke(endpoint_name: str, region: str) -> Any:
    """The real check: a bidirectional stream through SageMaker (agent's transport, lazily imported)."""
    from deploy.smoke import sagemaker_smoke

    return sagemaker_smoke(endpoint_name, region)


def deploy(clients: Any, spec: EndpointSpec, *, scaling: Scaling | None = Scaling(),
           smoke: SmokeTest | None = default_smoke, log: Callable[[str], None] = print,
           poll_s: float = 30, timeout_s: float = 3600,
           sleep: Callable[[float], None] | None = None) -> DeployResult:
    """Create or update ``spec``'s endpoint and prove it synthesises. Raises :class:`DeployError`.

    ``smoke=None`` skips the smoke test (not recommended). Blocks until done.
    """
    sm, aas = clients.client("sagemaker"), clients.client("application-autoscaling")
    model, made = endpoint.ensure_model(sm, spec)
    log(f"model {model}: {'created' if made else 'exists'}")
    config, made = endpoint.ensure_endpoint_config(sm, spec)
    log(f"endpoint config {config}: {'created' if made else 'exists'}")
    action = endpoint.ensure_endpoint(sm, spec, before_update=lambda: endpoint.remove_autoscaling(aas, spec.name))
    log(f"endpoint {spec.name}: {action}")
    waits = {"poll_s": poll_s, "timeout_s": timeout_s, "report": log} | ({"sleep": sleep} if sleep else {})
    endpoint.wait_in_service(sm, spec.name, **waits)
    result = DeployResult(spec.name, action, model, config)
    if scaling is not None:
        result.scaling_policy = endpoint.configure_autoscaling(
            aas, spec.name, min_instances=scaling.min_instances, max_instances=scaling.max_instances,
            target_sessions=scaling.target_sessions)
        log(f"autoscaling: {scaling.min_instances}-{scaling.max_instances} instances, "
            f"target {scaling.target_sessions:g} concurrent requests per instance")
    if smoke is not None:
        try:
            report = smoke(spec.name, clients.region)
        except Exception as exc:
            raise DeployError(f"endpoint {spec.name} is InService but failed the bidirectional smoke test: "
                              f"{exc}. The previous configuration (if any) was kept; `destroy` removes it "
                              "all.") from exc
        result.smoke = report.summary() if hasattr(report, "summary") else str(report)
        log(result.smoke)
    else:
        log("WARNING: smoke test skipped; InService does not prove the endpoint synthesises")
    result.pruned = endpoint.prune_superseded(sm, spec)
    for item in result.pruned:
        log(f"removed superseded {item}")
    return result


def spec_from_args(args: argparse.Namespace, model_data_url: str | None) -> EndpointSpec:
    env = {k: v for k, v in (("KOKORO_BACKEND", args.backend), ("KOKORO_MODE", args.mode)) if v}
    env.update(env_pairs(args.env))
    ami = args.ami
    if ami == "auto":
        ami = endpoint.default_ami(args.instance_type)
    return EndpointSpec(name=args.name, image_uri=args.image, role_arn=args.role, model_data_url=model_data_url,
                        instance_type=args.instance_type, initial_instance_count=args.instance_count,
                        environment=env, startup_timeout_s=args.startup_timeout, inference_ami_version=ami or None)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m deploy.sagemaker.deploy", description=__doc__.split("\n\n")[0])
    p.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("deploy", help="create or update the endpoint, autoscale, smoke-test")
    d.add_argument("--name", required=True, help="endpoint name")
    d.add_argument("--image", required=True, help="image URI (ECR) built from deploy/sagemaker/Dockerfile")
    d.add_argument("--role", required=True, help="SageMaker execution role ARN")
    d.add_argument("--model-data", help="s3:// URI of an existing model.tar.gz")
    d.add_argument("--model-dir", help="package this model directory as model.tar.gz ...")
    d.add_argument("--model-s3-uri", help="... and upload it here (skipped when unchanged)")
    d.add_argument("--instance-type", default=endpoint.DEFAULT_INSTANCE_TYPE)
    d.add_argument("--instance-count", type=int, default=1)
    d.add_argument("--ami", default="auto", help="InferenceAmiVersion; 'auto' = a CUDA 13 driver on GPU types")
    d.add_argument("--backend", choices=["torch", "onnx"], help="default: the image's (GPU: torch, CPU: onnx)")
    d.add_argument("--mode", choices=["sequential", "concurrent"], help="default: the image's")
    d.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra container env")
    d.add_argument("--startup-timeout", type=int, default=endpoint.DEFAULT_STARTUP_TIMEOUT_S)
    d.add_argument("--min-instances", type=int, default=1)
    d.add_argument("--max-instances", type=int, default=4)
    d.add_argument("--target-sessions", type=float, default=8.0)
    d.add_argument("--no-autoscaling", action="store_true")
    d.add_argument("--skip-smoke", action="store_true", help="do not run the bidirectional smoke test")

    s = sub.add_parser("scale", help="set autoscaling on an existing endpoint")
    s.add_argument("--name", required=True)
    s.add_argument("--min-instances", type=int, default=1)
    s.add_argument("--max-instances", type=int, default=4)
    s.add_argument("--target-sessions", type=float, default=8.0)

    sm = sub.add_parser("smoke", help="run the bidirectional smoke test against an endpoint")
    sm.add_argument("--name", required=True)

    a = sub.add_parser("agent", help="create or update the AgentCore runtime bound to the endpoint")
    a.add_argument("--name", required=True, help="endpoint name the agent speaks through")
    a.add_argument("--image", required=True, help="ARM64 agent image URI (deploy/sagemaker/Dockerfile.agent)")
    a.add_argument("--role", required=True, help="runtime role ARN (may invoke only this endpoint)")
    a.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")

    x = sub.add_parser("destroy", help="agent runtime -> endpoint -> endpoint configs -> models")
    x.add_argument("--name", required=True)
    x.add_argument("--delete-model-data", action="store_true", help="also delete the S3 model.tar.gz")
    x.add_argument("--delete-ecr-repo", action="store_true", help="also delete the ECR repository (all images)")
    x.add_argument("--model-data", action="append", default=[], help="an S3 model archive to consider too")
    x.add_argument("--image", action="append", default=[], help="an image URI whose ECR repo to consider too")
    return p


def main(argv: list[str] | None = None, *, clients: Any = None, smoke: SmokeTest | None = None) -> int:
    """CLI entry. ``clients``/``smoke`` are injectable (tests, or another transport)."""
    args = _parser().parse_args(argv)
    clients = clients or AwsClients(args.region)
    smoke = smoke or default_smoke
    try:
        if args.command == "deploy":
            data = args.model_data
            if args.model_dir:
                if not args.model_s3_uri:
                    raise SystemExit("--model-dir needs --model-s3-uri")
                from deploy.sagemaker.package_model import package_and_upload

                data = package_and_upload(args.model_dir, args.model_s3_uri, s3=clients.client("s3"))
            spec = spec_from_args(args, data)
            scaling = None if args.no_autoscaling else Scaling(args.min_instances, args.max_instances,
                                                               args.target_sessions)
            result = deploy(clients, spec, scaling=scaling, smoke=None if args.skip_smoke else smoke)
            print(f"endpoint {result.endpoint} {result.action} and serving ({result.config})")
        elif args.command == "scale":
            policy = endpoint.configure_autoscaling(
                clients.client("application-autoscaling"), args.name, min_instances=args.min_instances,
                max_instances=args.max_instances, target_sessions=args.target_sessions)
            print(f"scaling policy {policy} set")
        elif args.command == "smoke":
            report = smoke(args.name, clients.region)
            print(report.summary() if hasattr(report, "summary") else report)
        elif args.command == "agent":
            arn, action = agent_runtime.ensure_runtime(
                clients.client("bedrock-agentcore-control"), endpoint=args.name, region=clients.region,
                image_uri=args.image, role_arn=args.role, extra_env=env_pairs(args.env))
            print(f"agent runtime {arn} {action}")
        elif args.command == "destroy":
            report = teardown.destroy(clients, args.name, delete_model_data=args.delete_model_data,
                                      delete_ecr_repo=args.delete_ecr_repo,
                                      model_data_urls=tuple(args.model_data), images=tuple(args.image))
            for item in report.deleted:
                print(f"deleted {item}")
            if not report.deleted:
                print(f"nothing to delete for {args.name}")
            if report.warning():
                print(report.warning(), file=sys.stderr)
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
