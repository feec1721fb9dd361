"""The two IAM roles ``up`` creates, each with one least-privilege inline policy.

* the SageMaker execution role: pull from the stack's own ECR repository, write the endpoint's log
  group, read the stack's model-data prefix (when there is model data);
* the AgentCore runtime role: open bidirectional streams on this one endpoint, call the configured
  Bedrock model, write the runtime's log group, pull the agent image.

:func:`ensure_role` creates a role or brings its trust and inline policy to what is asked, and says
which of the two it did (or that nothing changed); :func:`delete_role` removes the inline and
attached policies first, as IAM requires. Blocks the calling thread; the IAM client is passed in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

POLICY_NAME = "kokoro-serve"
# Where `up` records the model archive it uploaded, so `down` finds it after a half-finished `up`.
MODEL_DATA_TAG = "kokoro-serve:model-data"
ECR_PULL = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"]
LOG_WRITE = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]


@dataclass(frozen=True)
class Place:
    """Where the stack lives: ARNs are built from these."""

    partition: str
    region: str
    account: str

    @classmethod
    def from_caller_arn(cls, arn: str, region: str) -> Place:
        parts = arn.split(":")
        return cls(partition=parts[1], region=region, account=parts[4])

    def arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        return (f"arn:{self.partition}:{service}:{self.region if region else ''}:"
                f"{self.account if account else ''}:{resource}")


def _doc(*statements: dict) -> dict:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def _allow(sid: str, actions: list[str], resources: list[str], **extra: Any) -> dict:
    return {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resources, **extra}


def trust(service: str, place: Place | None = None) -> dict:
    """Only ``service`` may assume the role; with ``place``, only on behalf of that account (AgentCore
    documents this confused-deputy condition for its runtime role)."""
    statement: dict[str, Any] = {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
    if place is not None:
        statement["Condition"] = {"StringEquals": {"aws:SourceAccount": place.account}}
    return _doc(statement)


def s3_prefix_arn(place: Place, s3_uri: str) -> str:
    bucket, _, key = s3_uri[len("s3://"):].partition("/")
    prefix = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
    return f"arn:{place.partition}:s3:::{bucket}/{prefix}*"


def execution_policy(place: Place, *, endpoint: str, repository: str, model_data_url: str | None) -> dict:
    """SageMaker execution role: its image, its endpoint's logs, its model data; nothing else."""
    log_group = place.arn("logs", f"log-group:/aws/sagemaker/Endpoints/{endpoint}")
    statements = [
        _allow("EcrLogin", ["ecr:GetAuthorizationToken"], ["*"]),  # takes no resource
        _allow("PullOwnImage", ECR_PULL, [place.arn("ecr", f"repository/{repository}")]),
        _allow("WriteOwnLogs", LOG_WRITE, [log_group, f"{log_group}:log-stream:*"]),
    ]
    if model_data_url:
        statements.append(_allow("ReadOwnModelData", ["s3:GetObject"], [s3_prefix_arn(place, model_data_url)]))
    return _doc(*statements)


def bedrock_model_arns(place: Place, model_id: str) -> list[str]:
    """A cross-region inference profile (``us.…``, ``global.…``) and the foundation model it routes to."""
    scope, _, base = model_id.partition(".")
    if scope in ("us", "eu", "apac", "ap", "ca", "jp", "au", "global", "us-gov") and base:
        return [place.arn("bedrock", f"inference-profile/{model_id}"),
                place.arn("bedrock", f"foundation-model/{base}", region=False, account=False)]
    return [place.arn("bedrock", f"foundation-model/{model_id}", account=False)]


def agent_policy(place: Place, *, endpoint: str, runtime_name: str, repository: str, model_id: str) -> dict:
    """AgentCore runtime role: this endpoint's stream, the configured model, its own logs and image."""
    log_group = place.arn("logs", f"log-group:/aws/bedrock-agentcore/runtimes/{runtime_name}-*")
    return _doc(
        _allow("SpeakThroughOneEndpoint", ["sagemaker:InvokeEndpointWithBidirectionalStream"],
               [place.arn("sagemaker", f"endpoint/{endpoint.lower()}")]),
        _allow("CallConfiguredModel", ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"],
               bedrock_model_arns(place, model_id)),
        _allow("WriteOwnLogs", [*LOG_WRITE, "logs:DescribeLogGroups"], [log_group, f"{log_group}:log-stream:*"]),
        _allow("EcrLogin", ["ecr:GetAuthorizationToken"], ["*"]),
        _allow("PullOwnImage", ECR_PULL, [place.arn("ecr", f"repository/{repository}")]),
    )


def _current_policy(iam: Any, name: str) -> dict | None:
    try:
        return iam.get_role_policy(RoleName=name, PolicyName=POLICY_NAME)["PolicyDocument"]
    except iam.exceptions.NoSuchEntityException:
        return None


def _as_doc(value: Any) -> dict:
    """IAM answers documents as dicts (boto3 decodes them) or, from some stand-ins, as JSON text."""
    if isinstance(value, str):
        from urllib.parse import unquote

        return json.loads(unquote(value))
    return value


def ensure_role(iam: Any, name: str, *, trust_policy: dict, policy: dict, tags: dict[str, str],
                description: str) -> tuple[str, str]:
    """Create role ``name`` or bring its trust and inline policy to these. Returns ``(arn, action)``."""
    try:
        role = iam.get_role(RoleName=name)["Role"]
    except iam.exceptions.NoSuchEntityException:
        role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust_policy),
                               Description=description, Tags=[{"Key": k, "Value": v} for k, v in tags.items()])["Role"]
        iam.put_role_policy(RoleName=name, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(policy))
        return role["Arn"], "created"
    action = "unchanged"
    if _as_doc(role["AssumeRolePolicyDocument"]) != trust_policy:
        iam.update_assume_role_policy(RoleName=name, PolicyDocument=json.dumps(trust_policy))
        action = "updated"
    current = _current_policy(iam, name)
    if current is None or _as_doc(current) != policy:
        iam.put_role_policy(RoleName=name, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(policy))
        action = "updated"
    have = {t["Key"]: t["Value"] for t in iam.list_role_tags(RoleName=name)["Tags"]}
    if any(have.get(k) != v for k, v in tags.items()):
        iam.tag_role(RoleName=name, Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
        action = "updated"
    return role["Arn"], action


def role_tags(iam: Any, name: str) -> dict[str, str]:
    """The role's tags; empty when the role does not exist."""
    try:
        return {t["Key"]: t["Value"] for t in iam.list_role_tags(RoleName=name)["Tags"]}
    except iam.exceptions.NoSuchEntityException:
        return {}


def delete_role(iam: Any, name: str) -> bool:
    """Delete role ``name`` with its inline and attached policies. False when it did not exist."""
    try:
        for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]:
            iam.delete_role_policy(RoleName=name, PolicyName=policy)
        for attached in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]:
            iam.detach_role_policy(RoleName=name, PolicyArn=attached["PolicyArn"])
        iam.delete_role(RoleName=name)
    except iam.exceptions.NoSuchEntityException:
        return False
    return True
