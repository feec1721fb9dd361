"""Remove a kokoro-serve deployment, in the order that leaves nothing dangling.

1. the AgentCore runtime (it calls the endpoint),
2. the variant's autoscaling target (SageMaker wants it gone before the endpoint),
3. the endpoint (waits until it is deleted: that is when billing for its instances stops),
4. its endpoint configs, then 5. its models.

The S3 model archive and the ECR repository behind the image are found from the model before it
is deleted. They are removed only when asked (``delete_model_data`` / ``delete_ecr_repo``);
otherwise :func:`destroy` returns a warning naming them, since both keep costing money.
Blocks the calling thread; boto3 clients are passed in through ``clients``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deploy.sagemaker import agent_runtime, endpoint

_ECR_URI = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?/"
                      r"(?P<repo>[a-z0-9._/-]+?)(?::[\w.-]+)?(?:@sha256:[0-9a-f]{64})?$")


@dataclass
class DestroyReport:
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def warning(self) -> str | None:
        if not self.kept:
            return None
        return ("WARNING: still billed, kept: " + "; ".join(self.kept)
                + ". Re-run destroy with --delete-model-data / --delete-ecr-repo to remove them.")


def ecr_repository(image_uri: str) -> tuple[str, str] | None:
    """``(region, repository)`` of an ECR image URI; None for other registries."""
    m = _ECR_URI.match(image_uri)
    return (m["region"], m["repo"]) if m else None


def _model_artifacts(sm: Any, model_names: list[str]) -> tuple[set[str], set[str]]:
    data, images = set(), set()
    for name in model_names:
        desc = endpoint.describe_or_none(sm.describe_model, ModelName=name)
        if not desc:
            continue
        for container in [desc.get("PrimaryContainer"), *desc.get("Containers", [])]:
            if container:
                if container.get("ModelDataUrl"):
                    data.add(container["ModelDataUrl"])
                if container.get("Image"):
                    images.add(container["Image"])
    return data, images


def _wait_deleted(sm: Any, name: str, timeout_s: float, poll_s: float, sleep: Callable[[float], None]) -> None:
    deadline = time.monotonic() + timeout_s
    while endpoint.describe_or_none(sm.describe_endpoint, EndpointName=name) is not None:
        if time.monotonic() >= deadline:
            raise endpoint.DeployError(f"endpoint {name} still present after {timeout_s:.0f} s")
        sleep(poll_s)


def _delete_agent(clients: Any, name: str, report: DestroyReport, **wait: Any) -> None:
    from botocore.exceptions import EndpointConnectionError

    try:
        ids = agent_runtime.delete_runtimes(clients.client("bedrock-agentcore-control"), name, **wait)
    except EndpointConnectionError:  # AgentCore is not offered in this region: nothing to delete
        return
    report.deleted += [f"agent runtime {rid}" for rid in ids]


def destroy(clients: Any, name: str, *, delete_model_data: bool = False, delete_ecr_repo: bool = False,
            model_data_urls: tuple[str, ...] = (), images: tuple[str, ...] = (),
            timeout_s: float = 1800, poll_s: float = 15,
            sleep: Callable[[float], None] = time.sleep) -> DestroyReport:
    """Tear down endpoint ``name`` and everything deploy created for it. Safe to re-run.

    ``clients`` has ``client(service_name, region_name=None)`` returning a boto3 client (see
    ``deploy.sagemaker.deploy.AwsClients``). ``model_data_urls``/``images`` name artifacts to
    consider beyond those found on the models (for a re-run after the models are gone).
    """
    sm = clients.client("sagemaker")
    report = DestroyReport()

    _delete_agent(clients, name, report, timeout_s=timeout_s, poll_s=poll_s, sleep=sleep)
    if endpoint.remove_autoscaling(clients.client("application-autoscaling"), name):
        report.deleted.append(f"autoscaling target {endpoint.resource_id(name)}")

    desc = endpoint.describe_or_none(sm.describe_endpoint, EndpointName=name)
    configs = set(endpoint.list_configs(sm, name))
    if desc:
        configs.add(desc["EndpointConfigName"])
        sm.delete_endpoint(EndpointName=name)
        _wait_deleted(sm, name, timeout_s, poll_s, sleep)
        report.deleted.append(f"endpoint {name}")

    models = set(endpoint.list_models(sm, name))
    for config in sorted(configs):
        cdesc = endpoint.describe_or_none(sm.describe_endpoint_config, EndpointConfigName=config)
        if cdesc:
            models.update(v["ModelName"] for v in cdesc.get("ProductionVariants", []))
            sm.delete_endpoint_config(EndpointConfigName=config)
            report.deleted.append(f"endpoint config {config}")

    data_urls, found_images = _model_artifacts(sm, sorted(models))
    data_urls.update(model_data_urls)
    found_images.update(images)
    for model in sorted(models):
        if endpoint.describe_or_none(sm.describe_model, ModelName=model):
            sm.delete_model(ModelName=model)
            report.deleted.append(f"model {model}")

    s3 = clients.client("s3") if data_urls and delete_model_data else None
    for url in sorted(data_urls):
        if s3 is None:
            report.kept.append(f"S3 model cache {url}")
            continue
        bucket, key = url[5:].split("/", 1)
        s3.delete_object(Bucket=bucket, Key=key)
        report.deleted.append(f"S3 object {url}")

    for region, repo in sorted({r for r in map(ecr_repository, found_images) if r}):
        if not delete_ecr_repo:
            report.kept.append(f"ECR repository {repo} ({region})")
            continue
        ecr = clients.client("ecr", region_name=region)
        try:
            ecr.delete_repository(repositoryName=repo, force=True)
            report.deleted.append(f"ECR repository {repo}")
        except ecr.exceptions.RepositoryNotFoundException:
            pass
    return report
