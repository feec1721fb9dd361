"""``--dry-run``: the deploy commands run their real code against a stand-in AWS account that records
every call and changes nothing anywhere.

:class:`DryRunClients` has the interface of :class:`~deploy.sagemaker.rollout.AwsClients`; each of its
clients answers the boto3 operations the deploy code makes as an account would that starts empty
(the stack's images taken as pushed, so no Docker build starts) and then holds what the run created,
so ``up`` plans its creates and ``down`` after it plans its deletes. Each call is printed as it is
planned (service, operation, key parameters) and kept in :attr:`DryRunClients.calls`. Nothing is
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

ACCOUNT = "123456789012"
DIGEST = "sha256:" + "0" * 64  # a stand-in digest: the dry run takes the stack's images as pushed
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

    def line(self) -> str:
        shown = " ".join(f"{k}={_short(v)}" for k, v in self.params.items())
        return f"{'*' if self.changes else ' '} {self.service} {self.operation} {shown}".rstrip()


def _short(value: Any, limit: int = 72) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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

    def __init__(self, service: str, account: _Account):
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


class _Account:
    """What the stand-in account holds, and how each known operation answers. Handlers are named
    ``<service>__<operation>`` (``-`` in a service name written ``_``)."""

    def __init__(self, region: str, log: Callable[[str], None]):
        self.region, self.log = region, log
        self.calls: list[PlannedCall] = []
        self.repos: dict[str, dict] = {}
        self.roles: dict[str, dict] = {}
        self.sm: dict[tuple[str, str], dict] = {}  # (kind, name) -> description
        self.scaling: dict[str, list[dict]] = {"targets": [], "policies": []}
        self.runtimes: dict[str, dict] = {}
        self.log_groups: set[str] = set()  # what SageMaker and AgentCore write to once they run

    def record(self, call: PlannedCall) -> None:
        self.calls.append(call)
        self.log(f"  [dry run] {call.line()}")

    # -- sts, s3, logs -------------------------------------------------------------------------
    def sts__get_caller_identity(self, err, op, **p):
        return {"Arn": f"arn:aws:iam::{ACCOUNT}:user/operator", "Account": ACCOUNT, "UserId": "AIDADRYRUN"}

    def s3__head_object(self, err, op, **p):
        err.raise_("404", "Not Found", op)

    def logs__describe_log_groups(self, err, op, logGroupNamePrefix="", **p):
        return {"logGroups": [{"logGroupName": g, "storedBytes": 0} for g in sorted(self.log_groups)
                              if g.startswith(logGroupNamePrefix)]}

    def logs__delete_log_group(self, err, op, logGroupName, **p):
        self.log_groups.discard(logGroupName)
        return {}

    # -- ecr -----------------------------------------------------------------------------------
    def _repo(self, err, op, name):
        if name not in self.repos:
            err.raise_("RepositoryNotFoundException", f"repository {name} not found", op,
                       "RepositoryNotFoundException")
        return self.repos[name]

    def ecr__describe_repositories(self, err, op, repositoryNames, **p):
        return {"repositories": [self._repo(err, op, repositoryNames[0])]}

    def ecr__create_repository(self, err, op, repositoryName, tags=(), **p):
        uri = f"{ACCOUNT}.dkr.ecr.{self.region}.amazonaws.com/{repositoryName}"
        self.repos[repositoryName] = {"repositoryName": repositoryName, "repositoryUri": uri, "tags": list(tags),
                                      "repositoryArn": f"arn:aws:ecr:{self.region}:{ACCOUNT}:repository/{repositoryName}"}
        return {"repository": self.repos[repositoryName]}

    def ecr__list_tags_for_resource(self, err, op, resourceArn, **p):
        return {"tags": next((r["tags"] for r in self.repos.values() if r["repositoryArn"] == resourceArn), [])}

    def ecr__describe_images(self, err, op, repositoryName, **p):
        self._repo(err, op, repositoryName)
        return {"imageDetails": [{"imageDigest": DIGEST, "imageSizeInBytes": 0}]}

    def ecr__delete_repository(self, err, op, repositoryName, **p):
        self._repo(err, op, repositoryName)
        del self.repos[repositoryName]
        return {}

    # -- iam -----------------------------------------------------------------------------------
    def _role(self, err, op, name):
        if name not in self.roles:
            err.raise_("NoSuchEntity", f"role {name} not found", op, "NoSuchEntityException")
        return self.roles[name]

    def iam__get_role(self, err, op, RoleName, **p):
        return {"Role": self._role(err, op, RoleName)}

    def iam__create_role(self, err, op, RoleName, AssumeRolePolicyDocument, Tags=(), **p):
        self.roles[RoleName] = {"RoleName": RoleName, "Arn": f"arn:aws:iam::{ACCOUNT}:role/{RoleName}",
                                "AssumeRolePolicyDocument": json.loads(AssumeRolePolicyDocument),
                                "Tags": list(Tags), "Policies": {}}
        return {"Role": self.roles[RoleName]}

    def iam__put_role_policy(self, err, op, RoleName, PolicyName, PolicyDocument, **p):
        self._role(err, op, RoleName)["Policies"][PolicyName] = json.loads(PolicyDocument)
        return {}

    def iam__get_role_policy(self, err, op, RoleName, PolicyName, **p):
        policies = self._role(err, op, RoleName)["Policies"]
        if PolicyName not in policies:
            err.raise_("NoSuchEntity", f"policy {PolicyName} not found", op, "NoSuchEntityException")
        return {"PolicyDocument": policies[PolicyName]}

    def iam__list_role_tags(self, err, op, RoleName, **p):
        return {"Tags": self._role(err, op, RoleName)["Tags"]}

    def iam__list_role_policies(self, err, op, RoleName, **p):
        return {"PolicyNames": sorted(self._role(err, op, RoleName)["Policies"])}

    def iam__list_attached_role_policies(self, err, op, RoleName, **p):
        self._role(err, op, RoleName)
        return {"AttachedPolicies": []}

    def iam__delete_role_policy(self, err, op, RoleName, PolicyName, **p):
        self._role(err, op, RoleName)["Policies"].pop(PolicyName, None)
        return {}

    def iam__delete_role(self, err, op, RoleName, **p):
        self._role(err, op, RoleName)
        del self.roles[RoleName]
        return {}

    # -- sagemaker -----------------------------------------------------------------------------
    def _sm(self, err, op, kind, name):
        if (kind, name) not in self.sm:
            err.raise_("ValidationException", f"Could not find {kind} \"{name}\".", op)
        return self.sm[(kind, name)]

    def _sm_create(self, kind, name, params):
        self.sm[(kind, name)] = dict(params)
        return {f"{kind.title().replace(' ', '')}Arn": f"arn:aws:sagemaker:{self.region}:{ACCOUNT}:{kind}/{name}"}

    def sagemaker__describe_model(self, err, op, ModelName, **p):
        return self._sm(err, op, "model", ModelName)

    def sagemaker__create_model(self, err, op, ModelName, **p):
        return self._sm_create("model", ModelName, {"ModelName": ModelName, **p})

    def sagemaker__describe_endpoint_config(self, err, op, EndpointConfigName, **p):
        return self._sm(err, op, "endpoint config", EndpointConfigName)

    def sagemaker__create_endpoint_config(self, err, op, EndpointConfigName, **p):
        return self._sm_create("endpoint config", EndpointConfigName, {"EndpointConfigName": EndpointConfigName, **p})

    def sagemaker__describe_endpoint(self, err, op, EndpointName, **p):
        return self._sm(err, op, "endpoint", EndpointName)

    def sagemaker__create_endpoint(self, err, op, EndpointName, EndpointConfigName, **p):
        self.log_groups.add(f"/aws/sagemaker/Endpoints/{EndpointName}")
        return self._sm_create("endpoint", EndpointName, {"EndpointName": EndpointName, "EndpointStatus": "InService",
                                                          "EndpointConfigName": EndpointConfigName})

    def sagemaker__update_endpoint(self, err, op, EndpointName, EndpointConfigName, **p):
        self._sm(err, op, "endpoint", EndpointName)["EndpointConfigName"] = EndpointConfigName
        return {}

    def _sm_list(self, kind, key, NameContains="", **p):
        return [{key: name} for k, name in self.sm if k == kind and NameContains in name]

    def sagemaker__list_endpoint_configs(self, err, op, **p):
        return {"EndpointConfigs": self._sm_list("endpoint config", "EndpointConfigName", **p)}

    def sagemaker__list_models(self, err, op, **p):
        return {"Models": self._sm_list("model", "ModelName", **p)}

    def _sm_delete(self, err, op, kind, name):
        self._sm(err, op, kind, name)
        del self.sm[(kind, name)]
        return {}

    def sagemaker__delete_endpoint(self, err, op, EndpointName, **p):
        return self._sm_delete(err, op, "endpoint", EndpointName)

    def sagemaker__delete_endpoint_config(self, err, op, EndpointConfigName, **p):
        return self._sm_delete(err, op, "endpoint config", EndpointConfigName)

    def sagemaker__delete_model(self, err, op, ModelName, **p):
        return self._sm_delete(err, op, "model", ModelName)

    # -- application-autoscaling ---------------------------------------------------------------
    def application_autoscaling__describe_scalable_targets(self, err, op, **p):
        return {"ScalableTargets": list(self.scaling["targets"])}

    def application_autoscaling__describe_scaling_policies(self, err, op, **p):
        return {"ScalingPolicies": list(self.scaling["policies"])}

    def application_autoscaling__register_scalable_target(self, err, op, **p):
        self.scaling["targets"] = [p]
        return {}

    def application_autoscaling__put_scaling_policy(self, err, op, PolicyName, **p):
        self.scaling["policies"] = [{"PolicyName": PolicyName, **p}]
        return {"PolicyARN": f"arn:aws:autoscaling:{self.region}:{ACCOUNT}:scalingPolicy/{PolicyName}"}

    def application_autoscaling__delete_scaling_policy(self, err, op, **p):
        self.scaling["policies"] = []
        return {}

    def application_autoscaling__deregister_scalable_target(self, err, op, **p):
        self.scaling["targets"] = []
        return {}

    # -- bedrock-agentcore-control -------------------------------------------------------------
    def bedrock_agentcore_control__list_agent_runtimes(self, err, op, **p):
        return {"agentRuntimes": [{"agentRuntimeName": r["name"], "agentRuntimeId": rid}
                                  for rid, r in self.runtimes.items()]}

    def bedrock_agentcore_control__create_agent_runtime(self, err, op, agentRuntimeName, **p):
        rid = f"{agentRuntimeName}-dryrun"
        arn = f"arn:aws:bedrock-agentcore:{self.region}:{ACCOUNT}:runtime/{rid}"
        self.runtimes[rid] = {"name": agentRuntimeName, "agentRuntimeArn": arn, **p}
        self.log_groups.add(f"/aws/bedrock-agentcore/runtimes/{rid}-DEFAULT")
        return {"agentRuntimeArn": arn, "agentRuntimeId": rid}

    def bedrock_agentcore_control__get_agent_runtime(self, err, op, agentRuntimeId, **p):
        return self.runtimes[agentRuntimeId]

    def bedrock_agentcore_control__update_agent_runtime(self, err, op, agentRuntimeId, **p):
        self.runtimes[agentRuntimeId].update(p)
        return {"agentRuntimeArn": self.runtimes[agentRuntimeId]["agentRuntimeArn"]}

    def bedrock_agentcore_control__delete_agent_runtime(self, err, op, agentRuntimeId, **p):
        self.runtimes.pop(agentRuntimeId, None)
        return {}


class DryRunClients:
    """Stand-in for :class:`~deploy.sagemaker.rollout.AwsClients`: clients of one recording account."""

    def __init__(self, region: str | None = None, *, log: Callable[[str], None] = print) -> None:
        self.region = region or "us-east-1"
        self.account = _Account(self.region, log)
        self._clients: dict[tuple[str, str], _Client] = {}

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

    def summary(self) -> str:
        changes = sum(c.changes for c in self.calls)
        return (f"dry run: {len(self.calls)} call(s) planned, {changes} of them changes (marked *); nothing was "
                f"called (region {self.region}, account {ACCOUNT} stands in for yours)")


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
