"""``--dry-run``: the deploy commands run their real code against a stand-in AWS account that records
every call and changes nothing anywhere.

:class:`DryRunClients` has the interface of :class:`~deploy.sagemaker.rollout.AwsClients`; each of its
clients answers the boto3 operations the deploy code makes as an account would that starts empty
and then holds what the run created, so ``up`` plans its creates (the image build and push among
them, printed as the commands it would run; no Docker starts) and ``down`` after it plans its deletes.
Each call is printed as it is planned (service, operation, every parameter in full: a long one on a
line of its own) and kept in :attr:`DryRunClients.calls`; :meth:`DryRunClients.summary` ends the run
with what the stack would keep and its hourly cost (:mod:`deploy.sagemaker.costs`).
:class:`MarkedLines` puts the dry-run mark on every line a command prints. Nothing is
sent anywhere: no credentials are read and no network is touched. An operation this stand-in does not
know raises ``NotImplementedError``, so a new call in the deploy code cannot slip past the dry run or
the operator's IAM list (docs/deploy.md) unnoticed.

botocore (installed with boto3) supplies the error type the deploy code catches; nothing else is imported.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deploy.sagemaker.standin_account import ACCOUNT, StandInAccount

#: IAM actions that differ from ``<service prefix>:<Operation>``; None: no permission needed.
IAM_ACTION = {
    ("sts", "GetCallerIdentity"): None,
    ("s3", "HeadObject"): "s3:GetObject",
    ("s3", "UploadFile"): "s3:PutObject",
    ("sagemaker-runtime", "InvokeEndpointWithBidirectionalStream"):
        "sagemaker:InvokeEndpointWithBidirectionalStream",
}
IAM_PREFIX = {"bedrock-agentcore-control": "bedrock-agentcore"}


@dataclass(frozen=True)
class PlannedCall:
    service: str
    operation: str
    params: dict[str, Any]
    changes: bool

    def iam_action(self) -> str | None:
        """The IAM action this call needs (None for the few that need none)."""
        key = (self.service, self.operation)
        if key in IAM_ACTION:
            return IAM_ACTION[key]
        return f"{IAM_PREFIX.get(self.service, self.service)}:{self.operation}"

    def lines(self) -> list[str]:
        """The call, its short parameters on its line, each long one (a policy document) in full on its own."""
        shown = {k: _shown(v) for k, v in self.params.items()}
        short = " ".join(f"{k}={v}" for k, v in shown.items() if len(v) <= LONG)
        first = f"{'*' if self.changes else ' '} {self.service} {self.operation} {short}".rstrip()
        return [first, *(f"      {k}={v}" for k, v in shown.items() if len(v) > LONG)]


LONG = 100  # a parameter longer than this goes on a line of its own


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)


class MarkedLines:
    """A text stream that puts ``[dry run]`` before every line written to ``out`` that lacks it."""

    MARK = "[dry run]"

    def __init__(self, out: Any) -> None:
        self.out, self._pending = out, ""

    def write(self, text: str) -> int:
        *done, self._pending = (self._pending + text).split("\n")
        for line in done:
            self.out.write((line if line.lstrip().startswith(self.MARK) else f"{self.MARK} {line}") + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.write("\n")
        self.out.flush()


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


READ_ONLY = ("Describe", "Get", "List", "Head")
#: Calls that change nothing the deploy code reads back: recorded, answered with this.
ANSWER_ONLY: dict[tuple[str, str], Any] = {
    ("s3", "upload_file"): None, ("s3", "delete_object"): {}, ("ecr", "tag_resource"): {},
    ("iam", "update_assume_role_policy"): {}, ("iam", "tag_role"): {}, ("iam", "detach_role_policy"): {},
}


class _Errors:
    """``client.exceptions.X``: botocore ``ClientError`` subclasses made on first use."""

    def __init__(self) -> None:
        from botocore.exceptions import ClientError

        self.ClientError = ClientError
        self._made: dict[str, type] = {}

    def __getattr__(self, name: str) -> type:
        if name not in self._made:
            self._made[name] = type(name, (self.ClientError,), {})
        return self._made[name]

    def raise_(self, code: str, message: str, operation: str, modeled: str | None = None) -> None:
        cls = getattr(self, modeled) if modeled else self.ClientError
        raise cls({"Error": {"Code": code, "Message": message}}, operation)


class _Paginator:
    def __init__(self, client: _Client, operation: str):
        self.client, self.operation = client, operation

    def paginate(self, **params: Any) -> list[dict]:
        return [getattr(self.client, self.operation)(**params)]


class _Client:
    """One service of the stand-in account."""

    def __init__(self, service: str, account: StandInAccount):
        self.service, self.account = service, account
        self.exceptions = _Errors()

    def get_paginator(self, operation: str) -> _Paginator:
        return _Paginator(self, operation)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        handler = getattr(self.account, f"{self.service.replace('-', '_')}__{name}", None)
        if handler is None and (self.service, name) in ANSWER_ONLY:
            def handler(*_args: Any, **_params: Any) -> Any:
                return ANSWER_ONLY[(self.service, name)]
        if handler is None:
            raise NotImplementedError(f"the dry run does not know {self.service}.{name}; add it to "
                                      "deploy/sagemaker/dry_run.py and the IAM list in docs/deploy.md")

        def call(*args: Any, **params: Any) -> Any:
            operation = _camel(name)
            if args:  # s3.upload_file(filename, bucket, key, ...)
                params = {"Filename": args[0], "Bucket": args[1], "Key": args[2], **params}
            self.account.record(PlannedCall(self.service, operation, params, not operation.startswith(READ_ONLY)))
            return handler(self.exceptions, operation, **params)

        return call


class DryRunClients:
    """Stand-in for :class:`~deploy.sagemaker.rollout.AwsClients`: clients of one recording account."""

    def __init__(self, region: str | None = None, *, log: Callable[[str], None] = print) -> None:
        self.region = region or "us-east-1"
        self.account = StandInAccount(self.region, log)
        self._clients: dict[tuple[str, str], _Client] = {}
        self.builds = 0

    @property
    def calls(self) -> list[PlannedCall]:
        return self.account.calls

    def client(self, service: str, region_name: str | None = None) -> _Client:
        key = (service, region_name or self.region)
        if key not in self._clients:
            self._clients[key] = _Client(service, self.account)
        return self._clients[key]

    def smoke(self, endpoint_name: str, region: str) -> str:
        """The smoke test, planned: one bidirectional stream with two requests."""
        self.account.record(PlannedCall("sagemaker-runtime", "InvokeEndpointWithBidirectionalStream",
                                        {"EndpointName": endpoint_name}, False))
        return f"smoke test of {endpoint_name}: planned (two requests over one bidirectional stream)"

    def image_builder(self, ecr: Any, repo_uri: str, build: Any, log: Callable[[str], None]) -> None:
        """The image build and push ``up`` would run (Docker with buildx), planned: its commands, and
        the image then taken as pushed."""
        from deploy.sagemaker.images import build_commands

        log(f"image {repo_uri}:{build.tag}: not pushed yet; `up` builds it ({build.dockerfile}, {build.platform}) "
            "and pushes it with Docker, from the repository root:")
        for command in build_commands(repo_uri, self.region, build):
            log(f"    $ {command}")
        self.builds += 1
        self.account.pushed.setdefault(repo_uri.split("/", 1)[1], set()).add(build.tag)

    def summary(self) -> str:
        """What the stack would keep and bill, then the count of planned calls (one line each)."""
        from deploy.sagemaker import costs

        a = self.account
        uploads = [f"s3://{c.params['Bucket']}/{c.params['Key']}" for c in self.calls if c.operation == "UploadFile"]
        kept = costs.stack_lines(
            region=self.region, endpoints={name: d for (kind, name), d in a.sm.items() if kind == "endpoint"},
            configs={name: d for (kind, name), d in a.sm.items() if kind == "endpoint config"},
            scaling=a.scaling["targets"], repositories=a.repos, roles=a.roles,
            runtimes=[r["name"] for r in a.runtimes.values()], model_data=uploads)
        changes = sum(c.changes for c in self.calls)
        builds = f" and {self.builds} image build(s) and push(es)" if self.builds else ""
        return "\n".join([*(kept[:1] + [f"  {line}" for line in kept[1:]] if len(kept) > 1 else []),
                          f"{len(self.calls)} call(s) planned, {changes} of them changes (marked *){builds}; "
                          f"nothing was called (region {self.region}, account {ACCOUNT} stands in for yours)"])


#: Permissions the operator needs beyond the actions of the calls a dry run plans, and why.
IMPLIED_ACTIONS = {
    "iam:PassRole": "CreateModel and CreateAgentRuntime hand their role to SageMaker / AgentCore",
    "sagemaker:AddTags": "the Create* calls carry Tags",
    "iam:CreateServiceLinkedRole": "the first RegisterScalableTarget on SageMaker creates Application Auto "
                                   "Scaling's service-linked role",
    "cloudwatch:PutMetricAlarm": "target tracking (PutScalingPolicy) creates its CloudWatch alarms",
    "cloudwatch:DescribeAlarms": "target tracking reads its alarms",
    "cloudwatch:DeleteAlarms": "DeleteScalingPolicy removes them",
    "ecr:GetAuthorizationToken": "docker login before an image is pushed (`up` with a Docker engine)",
    "ecr:BatchCheckLayerAvailability": "docker push",
    "ecr:InitiateLayerUpload": "docker push",
    "ecr:UploadLayerPart": "docker push",
    "ecr:CompleteLayerUpload": "docker push",
    "ecr:PutImage": "docker push",
    "ecr:TagResource": "`up` adds a missing stack tag to an existing repository",
    "iam:TagRole": "`up` adds a missing stack tag to an existing role",
    "iam:UpdateAssumeRolePolicy": "`up` repairs an existing role's trust policy",
    "iam:DetachRolePolicy": "`down` detaches managed policies someone attached to a stack role",
}


def iam_actions(calls: list[PlannedCall]) -> set[str]:
    """The IAM actions ``calls`` need."""
    return {action for call in calls if (action := call.iam_action())}
