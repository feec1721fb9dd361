"""Remove a kokoro-serve deployment, in the order that leaves nothing dangling.

1. the AgentCore runtime (it calls the endpoint),
2. the variant's autoscaling target (SageMaker wants it gone before the endpoint),
3. the endpoint (waits until it is deleted: that is when billing for its instances stops),
4. its endpoint configs, then 5. its models.

The S3 model archive and the ECR repository behind the image are found from the model before it
is deleted. They are removed only when asked (``delete_model_data`` / ``delete_ecr_repo``);
otherwise :func:`destroy` returns a warning naming them with their size and what that costs a
month, since both keep billing. Blocks the calling thread; boto3 clients are passed in through
``clients``.
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


# List prices per GB-month (us-east-1): S3 Standard and ECR private storage.
S3_USD_PER_GB_MONTH = 0.023
ECR_USD_PER_GB_MONTH = 0.10


@dataclass
class DestroyReport:
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    hint: str = "destroy with --delete-model-data / --delete-ecr-repo"  # how to remove what was kept

    def warning(self) -> str | None:
        if not self.kept:
            return None
        return "WARNING: still billed, kept: " + "; ".join(self.kept) + f". Re-run {self.hint} to remove them."


def _cost(size: int | None, usd_per_gb_month: float) -> str:
    if size is None:
        return f"${usd_per_gb_month}/GB-month"
    return f"{size / 1e6:.0f} MB, about ${size / 1e9 * usd_per_gb_month:.2f}/month at ${usd_per_gb_month}/GB-month"


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


def _delete_model_data(clients: Any, urls: set[str], delete: bool, report: DestroyReport) -> None:
    s3 = clients.client("s3") if urls else None
    for url in sorted(urls):
        bucket, key = url[5:].split("/", 1)
        if delete:
            s3.delete_object(Bucket=bucket, Key=key)
            report.deleted.append(f"S3 object {url}")
            continue
        try:
            size = s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
        except Exception:  # gone already, or no read access: still name it
            size = None
        report.kept.append(f"S3 model cache {url} ({_cost(size, S3_USD_PER_GB_MONTH)})")


def _repository_size(ecr: Any, repo: str) -> int | None:
    try:
        pages = ecr.get_paginator("describe_images").paginate(repositoryName=repo)
        return sum(image.get("imageSizeInBytes", 0) for page in pages for image in page["imageDetails"])
    except Exception:  # gone already, or no read access: still name it
        return None


def _delete_repositories(clients: Any, found: set[tuple[str, str]], delete: bool | frozenset[str],
                         report: DestroyReport) -> None:
    """``delete``: True for every repository found, or the names that may be deleted."""
    for region, repo in sorted(found):
        ecr = clients.client("ecr", region_name=region)
        if delete is not True and repo not in (delete or ()):
            report.kept.append(f"ECR repository {repo} ({region}; {_cost(_repository_size(ecr, repo), ECR_USD_PER_GB_MONTH)})")
            continue
        try:
            ecr.delete_repository(repositoryName=repo, force=True)
            report.deleted.append(f"ECR repository {repo}")
        except ecr.exceptions.RepositoryNotFoundException:
            pass


def _delete_serving(sm: Any, name: str, report: DestroyReport, wait: dict) -> set[str]:
    """Endpoint, then its endpoint configs; returns the models they named (plus this endpoint's)."""
    desc = endpoint.describe_or_none(sm.describe_endpoint, EndpointName=name)
    configs = set(endpoint.list_configs(sm, name))
    if desc:
        configs.add(desc["EndpointConfigName"])
        sm.delete_endpoint(EndpointName=name)
        _wait_deleted(sm, name, **wait)
        report.deleted.append(f"endpoint {name}")
    models = set(endpoint.list_models(sm, name))
    for config in sorted(configs):
        cdesc = endpoint.describe_or_none(sm.describe_endpoint_config, EndpointConfigName=config)
        if cdesc:
            models.update(v["ModelName"] for v in cdesc.get("ProductionVariants", []))
            sm.delete_endpoint_config(EndpointConfigName=config)
            report.deleted.append(f"endpoint config {config}")
    return models


def destroy(clients: Any, name: str, *, delete_model_data: bool = False,
            delete_ecr_repo: bool | frozenset[str] = False,
            model_data_urls: tuple[str, ...] = (), images: tuple[str, ...] = (),
            timeout_s: float = 1800, poll_s: float = 15,
            sleep: Callable[[float], None] = time.sleep, hint: str | None = None) -> DestroyReport:
    """Tear down endpoint ``name`` and everything deploy created for it. Safe to re-run.

    ``clients`` has ``client(service_name, region_name=None)`` returning a boto3 client (see
    ``deploy.sagemaker.rollout.AwsClients``). ``model_data_urls``/``images`` name artifacts to
    consider beyond those found on the models (for a re-run after the models are gone).
    ``delete_ecr_repo`` may name the only repositories that may go (others are kept and reported);
    ``hint`` says how to remove what was kept.
    """
    sm = clients.client("sagemaker")
    report = DestroyReport(**({"hint": hint} if hint else {}))

    _delete_agent(clients, name, report, timeout_s=timeout_s, poll_s=poll_s, sleep=sleep)
    report.deleted += endpoint.remove_autoscaling(clients.client("application-autoscaling"), name)
    models = _delete_serving(sm, name, report, {"timeout_s": timeout_s, "poll_s": poll_s, "sleep": sleep})

    data_urls, found_images = _model_artifacts(sm, sorted(models))
    for model in sorted(models):
        if endpoint.describe_or_none(sm.describe_model, ModelName=model):
            sm.delete_model(ModelName=model)
            report.deleted.append(f"model {model}")

    _delete_model_data(clients, data_urls | set(model_data_urls), delete_model_data, report)
    repos = {r for r in map(ecr_repository, found_images | set(images)) if r}
    _delete_repositories(clients, repos, delete_ecr_repo, report)
    return report
