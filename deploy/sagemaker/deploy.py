"""Deploy kokoro-serve to a SageMaker real-time endpoint with boto3, and take it down again.

From an empty account (creates the role, ECR repository, image, model, endpoint, autoscaling):

    python -m deploy.sagemaker.deploy up --name kokoro-tts [--image URI] [--with-agent] [--skip-smoke]
    python -m deploy.sagemaker.deploy down --name kokoro-tts [--all]

With a role and an image of your own:

    python -m deploy.sagemaker.deploy deploy --name kokoro-tts --image <ecr-uri> --role <role-arn> \\
        --model-dir ~/.cache/kokoro-serve/models --model-s3-uri s3://bucket/kokoro/model.tar.gz
    python -m deploy.sagemaker.deploy agent --name kokoro-tts --image <arm64-agent-uri> --role <arn>
    python -m deploy.sagemaker.deploy destroy --name kokoro-tts [--delete-model-data] [--delete-ecr-repo]

Every command takes ``--dry-run``: the real code runs against a stand-in account and prints the AWS
calls it would make (service, operation, key parameters) without credentials or network (see
:mod:`deploy.sagemaker.dry_run`). The global options ``--region``, ``--name`` (alias ``--stack``) and
``--dry-run`` go before or after the subcommand.

Both paths end with a real bidirectional smoke test through the SageMaker HTTP/2 stream (InService
only means /ping answered); a failed one exits non-zero and keeps the previous configuration. The
agent is created only while its endpoint is InService. Nothing heavy is imported at module import:
boto3 comes in when a client is first needed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deploy.cli import env_pairs
from deploy.sagemaker import agent_runtime, endpoint, stack, teardown
from deploy.sagemaker.capacity import GUESSED_TARGET_SESSIONS, target_from
from deploy.sagemaker.endpoint import DeployError, EndpointSpec
from deploy.sagemaker.rollout import AwsClients, DeployResult, Scaling, SmokeTest, default_smoke, deploy

if TYPE_CHECKING:
    from deploy.settings import DeploySettings

__all__ = ["AwsClients", "DeployResult", "Scaling", "SmokeTest", "default_smoke", "deploy", "main"]


def _environment(args: argparse.Namespace) -> dict[str, str]:
    env = {k: v for k, v in (("KOKORO_BACKEND", args.backend), ("KOKORO_MODE", args.mode)) if v}
    env.update(env_pairs(args.env))
    return env


def _endpoint_fields(args: argparse.Namespace) -> dict[str, Any]:
    ami = args.ami
    if ami == "auto":
        ami = endpoint.default_ami(args.instance_type)
    return {"instance_type": args.instance_type, "initial_instance_count": args.instance_count,
            "environment": _environment(args), "startup_timeout_s": args.startup_timeout,
            "inference_ami_version": ami or None}


def spec_from_args(args: argparse.Namespace, model_data_url: str | None) -> EndpointSpec:
    return EndpointSpec(name=args.name, image_uri=args.image, role_arn=args.role, model_data_url=model_data_url,
                        **_endpoint_fields(args))


def _target_sessions(args: argparse.Namespace) -> float:
    """``--target-sessions``, or the measured one of ``--capacity-from`` (said aloud), or the guess."""
    if args.capacity_from is None:
        return GUESSED_TARGET_SESSIONS if args.target_sessions is None else args.target_sessions
    if args.target_sessions is not None:
        raise DeployError("--target-sessions and --capacity-from both set the autoscaling target: pass one")
    measured = target_from(args.capacity_from, getattr(args, "instance_type", None))
    print(f"autoscaling target from the measured capacity: {measured.describe()}")
    return measured.target_sessions


def _scaling(args: argparse.Namespace) -> Scaling | None:
    return None if args.no_autoscaling else Scaling(args.min_instances, args.max_instances, _target_sessions(args))


def _target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target-sessions", type=float, default=None,
                   help=f"concurrent sessions per instance the autoscaler aims for (default "
                        f"{GUESSED_TARGET_SESSIONS:g}, a guess: prefer --capacity-from)")
    p.add_argument("--capacity-from", metavar="FILE", default=None,
                   help="set the target from a measured capacity: the JSON `python -m benchmarks capacity` writes "
                        "(benchmarks/results/capacity.json)")


def _global_options(parser: argparse.ArgumentParser, where: str, region: str | None) -> None:
    """The options every command takes, before or after the subcommand (``where`` = "main" or "sub").
    A subcommand's copy has no default of its own, so it never overwrites a value given before it.
    ``region``: the default region (``AWS_REGION`` / ``AWS_DEFAULT_REGION``; None leaves it to boto3's profile)."""
    sub = where == "sub"
    parser.add_argument("--region", default=argparse.SUPPRESS if sub else region,
                        help="AWS region (default: AWS_REGION / AWS_DEFAULT_REGION, else the profile's)")
    parser.add_argument("--name", "--stack", dest="name", default=argparse.SUPPRESS if sub else None,
                        help="endpoint (and, for up/down, stack) name, <= 52 characters")
    parser.add_argument("--dry-run", action="store_true", default=argparse.SUPPRESS if sub else False,
                        help="print the AWS calls the command would make (service, operation, key parameters) "
                             "against a stand-in account; call nothing")


def _endpoint_args(p: argparse.ArgumentParser) -> None:
    """The endpoint settings ``deploy`` and ``up`` share."""
    p.add_argument("--model-data", help="s3:// URI of an existing model.tar.gz")
    p.add_argument("--model-dir", help="package this model directory as model.tar.gz ...")
    p.add_argument("--model-s3-uri", help="... and upload it here (skipped when unchanged)")
    p.add_argument("--instance-type", default=endpoint.DEFAULT_INSTANCE_TYPE)
    p.add_argument("--instance-count", type=int, default=1)
    p.add_argument("--ami", default="auto", help="InferenceAmiVersion; 'auto' = a CUDA 13 driver on GPU types")
    p.add_argument("--backend", choices=["torch", "onnx"], help="default: the image's (GPU: torch, CPU: onnx)")
    p.add_argument("--mode", choices=["sequential", "concurrent"], help="default: the image's")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra container env")
    p.add_argument("--startup-timeout", type=int, default=endpoint.DEFAULT_STARTUP_TIMEOUT_S)
    p.add_argument("--min-instances", type=int, default=1)
    p.add_argument("--max-instances", type=int, default=4)
    _target_args(p)
    p.add_argument("--no-autoscaling", action="store_true")
    p.add_argument("--skip-smoke", action="store_true", help="do not run the bidirectional smoke test")
    p.add_argument("--wait-timeout", type=float, default=3600, help="seconds to wait for InService")


def _parser(settings: DeploySettings | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m deploy.sagemaker.deploy", description=__doc__.split("\n\n")[0])
    region = settings.aws_region if settings is not None else None
    _global_options(p, "main", region)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, "sub", region)
    # every subcommand's parser takes the global options too
    sub = p.add_subparsers(dest="command", required=True,
                           parser_class=functools.partial(argparse.ArgumentParser, parents=[common]))

    u = sub.add_parser("up", help="from an empty account: role, repository, image, endpoint, autoscaling, smoke")
    _endpoint_args(u)
    u.add_argument("--image", help="use this image URI instead of the stack repository's (built if missing)")
    u.add_argument("--with-agent", action="store_true", help="also the AgentCore role and runtime")
    u.add_argument("--agent-image", help="ARM64 agent image URI (default: the stack repository's agent-arm64)")
    u.add_argument("--bedrock-model-id", help="the agent's Bedrock model (default: Claude Sonnet 4.6, "
                                              "the region's cross-region inference profile)")
    u.add_argument("--agent-env", action="append", default=[], metavar="KEY=VALUE")

    dn = sub.add_parser("down", help="remove everything `up` created (the S3 model data and ECR repo with --all)")
    dn.add_argument("--all", action="store_true", help="also the ECR repository and the S3 model data")

    d = sub.add_parser("deploy", help="create or update the endpoint with your role and image, autoscale, smoke-test")
    _endpoint_args(d)
    d.add_argument("--image", required=True, help="image URI (ECR) built from deploy/sagemaker/Dockerfile")
    d.add_argument("--role", required=True, help="SageMaker execution role ARN")

    s = sub.add_parser("scale", help="set autoscaling on an existing endpoint")
    s.add_argument("--min-instances", type=int, default=1)
    s.add_argument("--max-instances", type=int, default=4)
    _target_args(s)

    sub.add_parser("smoke", help="run the bidirectional smoke test against an endpoint")

    a = sub.add_parser("agent", help="create or update the AgentCore runtime bound to an InService endpoint")
    a.add_argument("--image", required=True, help="ARM64 agent image URI (deploy/sagemaker/Dockerfile.agent)")
    a.add_argument("--role", required=True, help="runtime role ARN (may invoke only this endpoint)")
    a.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")

    x = sub.add_parser("destroy", help="agent runtime -> endpoint -> endpoint configs -> models")
    x.add_argument("--delete-model-data", action="store_true", help="also delete the S3 model.tar.gz")
    x.add_argument("--delete-ecr-repo", action="store_true", help="also delete the ECR repository (all images)")
    x.add_argument("--model-data", action="append", default=[], help="an S3 model archive to consider too")
    x.add_argument("--image", action="append", default=[], help="an image URI whose ECR repo to consider too")
    return p


def _print_teardown(report: teardown.DestroyReport, name: str) -> None:
    for item in report.deleted:
        print(f"deleted {item}")
    if not report.deleted:
        print(f"nothing to delete for {name}")
    if report.warning():
        print(report.warning(), file=sys.stderr)


def _up(args: argparse.Namespace, clients: Any, smoke: SmokeTest) -> None:
    plan = stack.UpPlan(name=args.name, image=args.image, agent_image=args.agent_image,
                        model_data_url=args.model_data, model_dir=args.model_dir, model_s3_uri=args.model_s3_uri,
                        endpoint=_endpoint_fields(args), with_agent=args.with_agent,
                        bedrock_model_id=args.bedrock_model_id, agent_env=env_pairs(args.agent_env))
    report = stack.up(clients, plan, scaling=_scaling(args), smoke=None if args.skip_smoke else smoke,
                      timeout_s=args.wait_timeout)
    print(report.summary(args.name))


def _deploy(args: argparse.Namespace, clients: Any, smoke: SmokeTest) -> None:
    data = args.model_data
    if args.model_dir:
        if not args.model_s3_uri:
            raise SystemExit("--model-dir needs --model-s3-uri")
        from deploy.sagemaker.package_model import package_and_upload

        data = package_and_upload(args.model_dir, args.model_s3_uri, s3=clients.client("s3"))
    result = deploy(clients, spec_from_args(args, data), scaling=_scaling(args),
                    smoke=None if args.skip_smoke else smoke, timeout_s=args.wait_timeout)
    print(f"endpoint {result.endpoint} {result.action} and serving ({result.config})")


def _agent(args: argparse.Namespace, clients: Any) -> None:
    agent_runtime.require_in_service(clients.client("sagemaker"), args.name)
    arn, action = agent_runtime.ensure_runtime(
        clients.client("bedrock-agentcore-control"), endpoint=args.name, region=clients.region,
        image_uri=args.image, role_arn=args.role, extra_env=env_pairs(args.env))
    print(f"agent runtime {arn} {action}")


def _run(args: argparse.Namespace, clients: Any, smoke: SmokeTest) -> None:
    if args.command == "up":
        _up(args, clients, smoke)
    elif args.command == "down":
        _print_teardown(stack.down(clients, args.name, everything=args.all), args.name)
    elif args.command == "deploy":
        _deploy(args, clients, smoke)
    elif args.command == "scale":
        policy = endpoint.configure_autoscaling(
            clients.client("application-autoscaling"), args.name, min_instances=args.min_instances,
            max_instances=args.max_instances, target_sessions=_target_sessions(args))
        print(f"scaling policy {policy} set")
    elif args.command == "smoke":
        report = smoke(args.name, clients.region)
        print(report.summary() if hasattr(report, "summary") else report)
    elif args.command == "agent":
        _agent(args, clients)
    elif args.command == "destroy":
        report = teardown.destroy(clients, args.name, delete_model_data=args.delete_model_data,
                                  delete_ecr_repo=args.delete_ecr_repo,
                                  model_data_urls=tuple(args.model_data), images=tuple(args.image))
        _print_teardown(report, args.name)


def main(argv: list[str] | None = None, *, clients: Any = None, smoke: SmokeTest | None = None,
         environ: Mapping[str, str] | None = None) -> int:
    """CLI entry. ``clients``/``smoke`` are injectable (tests, or another transport); ``environ`` is the
    environment the deploy settings are read from (``os.environ`` when None)."""
    from deploy.settings import DeploySettings  # pydantic: imported when the command runs

    parser = _parser(DeploySettings.from_env(os.environ if environ is None else environ))
    args = parser.parse_args(argv)
    if not args.name:
        parser.error(f"{args.command}: --name (or --stack) is required")
    if not args.dry_run:
        return _main(args, clients, smoke)
    from deploy.sagemaker.dry_run import DryRunClients, MarkedLines

    clients = DryRunClients(args.region)
    out, err = MarkedLines(sys.stdout), MarkedLines(sys.stderr)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):  # every line carries the mark
        code = _main(args, clients, clients.smoke)
        if code == 0:
            print(clients.summary())
        out.flush()
        err.flush()
    return code


def _main(args: argparse.Namespace, clients: Any, smoke: SmokeTest | None) -> int:
    try:
        _run(args, clients or AwsClients(args.region), smoke or default_smoke)
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
