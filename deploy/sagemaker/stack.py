"""``up`` and ``down``: a kokoro-serve stack from an empty AWS account to a smoke-tested endpoint, and back.

A stack is named once (``--name``) and everything in it is named after it and tagged
``kokoro-serve:stack=<name>``:

* the ECR repository ``<name>`` (lower case), holding the endpoint and agent images;
* the SageMaker execution role ``<name>-sagemaker`` (see :mod:`deploy.sagemaker.roles`);
* the model, endpoint config, endpoint ``<name>`` and its autoscaling (see :mod:`deploy.sagemaker.rollout`);
* with the agent: the AgentCore role ``<name>-agentcore`` and runtime ``<name>_agent``.

``up`` is idempotent: each step finds what is already there and changes only what differs, and the
run ends by saying what changed or that nothing did. ``down`` removes what ``up`` made, in the order
that leaves nothing dangling, and works after a half-finished ``up``. Both block the calling thread.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.sagemaker import agent_runtime, endpoint, images, roles, rollout, teardown
from deploy.sagemaker.endpoint import STACK_TAG, DeployError, EndpointSpec


@dataclass(frozen=True)
class StackNames:
    stack: str

    @property
    def endpoint(self) -> str:
        return self.stack

    @property
    def repository(self) -> str:
        return images.repository_name(self.stack)

    @property
    def execution_role(self) -> str:
        return f"{self.stack}-sagemaker"

    @property
    def agent_role(self) -> str:
        return f"{self.stack}-agentcore"

    @property
    def tags(self) -> dict[str, str]:
        return {STACK_TAG: self.stack}


@dataclass
class UpPlan:
    """What ``up`` builds. ``endpoint`` holds the remaining :class:`EndpointSpec` fields."""

    name: str
    image: str | None = None
    agent_image: str | None = None
    model_data_url: str | None = None
    model_dir: str | None = None
    model_s3_uri: str | None = None
    endpoint: dict[str, Any] = field(default_factory=dict)
    with_agent: bool = False
    bedrock_model_id: str | None = None
    agent_env: dict[str, str] = field(default_factory=dict)


@dataclass
class UpReport:
    changed: list[str] = field(default_factory=list)

    def step(self, what: str, action: str, log: Callable[[str], None]) -> None:
        log(f"{what}: {action}")
        if action not in ("unchanged", "exists"):
            self.changed.append(f"{what} ({action})")

    def summary(self, name: str) -> str:
        if not self.changed:
            return f"stack {name}: nothing changed, everything was already as asked"
        return f"stack {name}: {len(self.changed)} change(s): " + "; ".join(self.changed)


def default_bedrock_model(region: str) -> str:
    """The model the agent uses unless told otherwise: Claude Sonnet 4.6 through the cross-region
    inference profile of the region's geography (the Strands default)."""
    prefix = region.split("-", 1)[0]
    return f"{ {'ap': 'apac'}.get(prefix, prefix)}.anthropic.claude-sonnet-4-6"


def _retry_new_role(call: Callable[[], Any], fresh: bool, sleep: Callable[[float], None]) -> Any:
    """IAM is eventually consistent: a role made seconds ago may not be assumable yet."""
    from botocore.exceptions import ClientError

    for attempt in range(12 if fresh else 1):
        try:
            return call()
        except ClientError as exc:
            message = str(exc).lower()
            if attempt == 11 or not fresh or "role" not in message:
                raise
            sleep(5)
    raise AssertionError("unreachable")


def _model_data(clients: Any, plan: UpPlan, report: UpReport, log: Callable[[str], None]) -> str | None:
    if not plan.model_dir:
        return plan.model_data_url
    if not plan.model_s3_uri:
        raise DeployError("--model-dir needs --model-s3-uri (an S3 bucket of yours, e.g. s3://bucket/kokoro/)")
    from deploy.sagemaker import package_model

    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "model.tar.gz"
        digest = package_model.build_tarball(Path(plan.model_dir), archive)
        url, uploaded = package_model.upload(archive, plan.model_s3_uri, clients.client("s3"), digest=digest)
    report.step(f"model data {url}", "uploaded" if uploaded else "unchanged", log)
    return url


def _agent(clients: Any, place: roles.Place, names: StackNames, image: str, plan: UpPlan, report: UpReport,
           log: Callable[[str], None], sleep: Callable[[float], None]) -> None:
    agent_runtime.require_in_service(clients.client("sagemaker"), names.endpoint)
    model_id = plan.bedrock_model_id or default_bedrock_model(place.region)
    policy = roles.agent_policy(place, endpoint=names.endpoint, runtime_name=agent_runtime.runtime_name(names.endpoint),
                                repository=names.repository, model_id=model_id)
    role_arn, action = roles.ensure_role(
        clients.client("iam"), names.agent_role, trust_policy=roles.trust("bedrock-agentcore.amazonaws.com", place),
        policy=policy, tags=names.tags, description=f"kokoro-serve agent of endpoint {names.endpoint}")
    report.step(f"IAM role {names.agent_role}", action, log)
    env = {agent_runtime.BEDROCK_MODEL_ENV: model_id, **plan.agent_env}
    arn, runtime_action = _retry_new_role(lambda: agent_runtime.ensure_runtime(
        clients.client("bedrock-agentcore-control"), endpoint=names.endpoint, region=place.region, image_uri=image,
        role_arn=role_arn, extra_env=env, tags=names.tags), action == "created", sleep)
    report.step(f"agent runtime {arn} (Bedrock model {model_id})", runtime_action, log)


def _images(clients: Any, plan: UpPlan, repo_uri: str, log: Callable[[str], None]) -> tuple[str, str | None]:
    ecr = clients.client("ecr")
    builder = getattr(clients, "image_builder", None)  # a dry run plans the build instead of running Docker
    gpu = endpoint.default_ami(plan.endpoint.get("instance_type", endpoint.DEFAULT_INSTANCE_TYPE)) is not None
    image = images.resolve_image(ecr, repo_uri, clients.region, images.GPU if gpu else images.CPU,
                                 given=plan.image, log=log, builder=builder)
    agent_image = (images.resolve_image(ecr, repo_uri, clients.region, images.AGENT, given=plan.agent_image, log=log,
                                        builder=builder)
                   if plan.with_agent else None)
    if image is None or (plan.with_agent and agent_image is None):
        raise DeployError("no image to run yet: build and push it with the commands above (or pass --image / "
                          "--agent-image), then run `up` again")
    return image, agent_image


def up(clients: Any, plan: UpPlan, *, scaling: rollout.Scaling | None = rollout.Scaling(),
       smoke: rollout.SmokeTest | None = rollout.default_smoke, log: Callable[[str], None] = print,
       poll_s: float = 30, timeout_s: float = 3600, sleep: Callable[[float], None] = time.sleep) -> UpReport:
    """Bring stack ``plan.name`` to ``plan``; raises :class:`DeployError` with what to do next."""
    names, report = StackNames(plan.name), UpReport()
    place = roles.Place.from_caller_arn(clients.client("sts").get_caller_identity()["Arn"], clients.region)
    data_url = _model_data(clients, plan, report, log)
    # the model data's place goes on the repository and the role, so `down` finds it after a half-finished `up`
    tags = names.tags | ({roles.MODEL_DATA_TAG: data_url} if data_url else {})
    repo_uri, action = images.ensure_repository(clients.client("ecr"), names.repository, tags)
    report.step(f"ECR repository {repo_uri}", action, log)
    role_arn, role_action = roles.ensure_role(
        clients.client("iam"), names.execution_role, trust_policy=roles.trust("sagemaker.amazonaws.com"),
        policy=roles.execution_policy(place, endpoint=names.endpoint, repository=names.repository,
                                      model_data_url=data_url),
        tags=tags, description=f"kokoro-serve SageMaker execution role of endpoint {names.endpoint}")
    report.step(f"IAM role {names.execution_role}", role_action, log)
    image, agent_image = _images(clients, plan, repo_uri, log)

    spec = EndpointSpec(name=names.endpoint, image_uri=image, role_arn=role_arn, model_data_url=data_url,
                        tags=names.tags, **plan.endpoint)
    try:
        result = _retry_new_role(lambda: rollout.deploy(clients, spec, scaling=scaling, smoke=smoke, log=log,
                                                        poll_s=poll_s, timeout_s=timeout_s, sleep=sleep),
                                 role_action == "created", sleep)
    except DeployError as exc:
        refusal = agent_runtime.refusal(clients.client("sagemaker"), names.endpoint) if plan.with_agent else None
        raise DeployError(f"{exc}\n{refusal}" if refusal else str(exc)) from exc
    report.changed += result.changed
    if plan.with_agent and agent_image:
        _agent(clients, place, names, agent_image, plan, report, log, sleep)
    return report


def _log_groups(clients: Any, names: StackNames, everything: bool, report: teardown.DestroyReport) -> None:
    """The log groups SageMaker and AgentCore made for the stack: deleted with ``everything``, else named."""
    logs = clients.client("logs")
    endpoint_group = f"/aws/sagemaker/Endpoints/{names.endpoint}"
    agent_prefix = f"/aws/bedrock-agentcore/runtimes/{agent_runtime.runtime_name(names.endpoint)}-"
    for prefix in (endpoint_group, agent_prefix):
        for group in logs.describe_log_groups(logGroupNamePrefix=prefix)["logGroups"]:
            if prefix == endpoint_group and group["logGroupName"] != endpoint_group:
                continue  # another endpoint whose name starts with this one's
            if everything:
                logs.delete_log_group(logGroupName=group["logGroupName"])
                report.deleted.append(f"log group {group['logGroupName']}")
            else:
                report.kept.append(f"CloudWatch log group {group['logGroupName']} "
                                   f"({group.get('storedBytes', 0) / 1e6:.0f} MB stored)")


def down(clients: Any, name: str, *, everything: bool = False, timeout_s: float = 1800, poll_s: float = 15,
         sleep: Callable[[float], None] = time.sleep) -> teardown.DestroyReport:
    """Remove stack ``name``: agent runtime, autoscaling, endpoint, endpoint configs, models, roles, and
    with ``everything`` the ECR repository, the S3 model data and the log groups. Safe to re-run."""
    names = StackNames(name)
    iam, ecr = clients.client("iam"), clients.client("ecr")
    data = (roles.role_tags(iam, names.execution_role).get(roles.MODEL_DATA_TAG)
            or images.repository_tags(ecr, names.repository).get(roles.MODEL_DATA_TAG))
    repo_uri = images.repository_uri(ecr, names.repository)
    report = teardown.destroy(
        clients, names.endpoint, delete_model_data=everything,
        delete_ecr_repo=frozenset({names.repository}) if everything else False,
        model_data_urls=(data,) if data else (), images=(repo_uri,) if repo_uri else (),
        timeout_s=timeout_s, poll_s=poll_s, sleep=sleep, hint=f"`down --name {name} --all`")
    for role in (names.agent_role, names.execution_role):
        if roles.delete_role(iam, role):
            report.deleted.append(f"IAM role {role} and its inline policy")
    _log_groups(clients, names, everything, report)
    return report
