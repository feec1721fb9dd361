"""Create or update a SageMaker real-time endpoint for kokoro-serve, and scale it.

SageMaker models and endpoint configs are immutable, so each distinct configuration gets its own
name, ``<endpoint>-<digest>``, derived from what it contains. Deploying the same spec twice is a
no-op; a changed spec creates a new model/config and moves the endpoint to it with
``UpdateEndpoint`` (SageMaker swaps instances without downtime). The superseded ones are removed
by :func:`prune_superseded` once the new configuration has passed the smoke test.

Every function takes boto3 clients as arguments (no globals, no import of boto3 here), blocks the
calling thread, and is safe to re-run after an interruption.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_INSTANCE_TYPE = "ml.g5.xlarge"
# ml.g5's default GPU driver is 470 (CUDA 11.4); the image's CUDA 12/13 PyTorch needs a newer one.
# This AMI brings NVIDIA driver 580 (CUDA 13.0), which runs CUDA 12.x and 13.0 builds alike.
DEFAULT_GPU_AMI = "al2023-ami-sagemaker-inference-gpu-4-1"
GPU_FAMILIES = ("ml.g4dn.", "ml.g5.", "ml.g6.", "ml.g6e.", "ml.p3.", "ml.p4d.", "ml.p4de.", "ml.p5.")
# Model load + warm-up (and, without an official .pth, the ONNX -> PyTorch rebuild) before /ping
# answers 200. SageMaker's default is too short for a cold GPU start.
DEFAULT_STARTUP_TIMEOUT_S = 900
DEFAULT_DOWNLOAD_TIMEOUT_S = 900
VARIANT = "AllTraffic"
SCALABLE_DIMENSION = "sagemaker:variant:DesiredInstanceCount"
# Concurrent requests per model copy, sampled every 10 s: a bidirectional stream counts as one
# request for as long as it is open, so this tracks live sessions, which is what loads the GPU.
CONCURRENCY_METRIC = "SageMakerVariantConcurrentRequestsPerModelHighResolution"
# The tag every resource `up` creates carries (value: the stack name); `down` and the tests find them by it.
STACK_TAG = "kokoro-serve:stack"


def default_ami(instance_type: str) -> str | None:
    """The InferenceAmiVersion to ask for: the CUDA 13 driver AMI on GPU types, none on CPU types."""
    return DEFAULT_GPU_AMI if instance_type.startswith(GPU_FAMILIES) else None


class DeployError(RuntimeError):
    """A SageMaker resource did not reach the state the deploy needs."""


@dataclass(frozen=True)
class EndpointSpec:
    """Everything that defines one deployment. ``name`` is the endpoint name (<= 52 chars)."""

    name: str
    image_uri: str
    role_arn: str
    model_data_url: str | None = None
    instance_type: str = DEFAULT_INSTANCE_TYPE
    initial_instance_count: int = 1
    environment: dict[str, str] = field(default_factory=dict)
    startup_timeout_s: int = DEFAULT_STARTUP_TIMEOUT_S
    download_timeout_s: int = DEFAULT_DOWNLOAD_TIMEOUT_S
    inference_ami_version: str | None = DEFAULT_GPU_AMI
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= len(self.name) <= 52:
            raise ValueError("endpoint name must be 1-52 characters (11 are kept for the digest suffix)")

    def _digest(self, part: dict[str, Any]) -> str:
        return hashlib.sha256(json.dumps(part, sort_keys=True).encode()).hexdigest()[:10]

    @property
    def model_name(self) -> str:
        part = {k: v for k, v in asdict(self).items() if k in ("image_uri", "role_arn", "model_data_url", "environment")}
        return f"{self.name}-{self._digest(part)}"

    @property
    def config_name(self) -> str:
        keys = ("instance_type", "initial_instance_count", "startup_timeout_s", "download_timeout_s",
                "inference_ami_version")
        part = {k: v for k, v in asdict(self).items() if k in keys}
        part["model"] = self.model_name
        return f"{self.name}-{self._digest(part)}"

    def tag_dict(self) -> dict[str, str]:
        return {"kokoro-serve:endpoint": self.name, **self.tags}

    def tag_list(self) -> list[dict[str, str]]:
        return [{"Key": k, "Value": v} for k, v in sorted(self.tag_dict().items())]


def _missing(exc: Exception) -> bool:
    """True for SageMaker's 'does not exist' answers (a ValidationException with that text)."""
    err = getattr(exc, "response", {}).get("Error", {})
    message = err.get("Message", "")
    return err.get("Code") in ("ValidationException", "ResourceNotFound") and (
        "not exist" in message or "not find" in message or "not found" in message.lower()
    )


def describe_or_none(call: Callable[..., dict], **kwargs: Any) -> dict | None:
    """Run a ``Describe*`` call; None when the resource does not exist."""
    try:
        return call(**kwargs)
    except Exception as exc:
        if _missing(exc):
            return None
        raise


def ensure_model(sm: Any, spec: EndpointSpec) -> tuple[str, bool]:
    """Create the SageMaker model for ``spec`` unless it exists. Returns ``(name, created)``."""
    name = spec.model_name
    if describe_or_none(sm.describe_model, ModelName=name):
        return name, False
    container: dict[str, Any] = {"Image": spec.image_uri, "Environment": dict(spec.environment)}
    if spec.model_data_url:
        container["ModelDataUrl"] = spec.model_data_url
    sm.create_model(ModelName=name, PrimaryContainer=container, ExecutionRoleArn=spec.role_arn,
                    Tags=spec.tag_list())
    return name, True


def ensure_endpoint_config(sm: Any, spec: EndpointSpec) -> tuple[str, bool]:
    """Create the endpoint config for ``spec`` unless it exists. Returns ``(name, created)``."""
    name = spec.config_name
    if describe_or_none(sm.describe_endpoint_config, EndpointConfigName=name):
        return name, False
    variant: dict[str, Any] = {
        "VariantName": VARIANT,
        "ModelName": spec.model_name,
        "InstanceType": spec.instance_type,
        "InitialInstanceCount": spec.initial_instance_count,
        "InitialVariantWeight": 1.0,
        "ContainerStartupHealthCheckTimeoutInSeconds": spec.startup_timeout_s,
        "ModelDataDownloadTimeoutInSeconds": spec.download_timeout_s,
    }
    if spec.inference_ami_version:
        variant["InferenceAmiVersion"] = spec.inference_ami_version
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[variant], Tags=spec.tag_list())
    return name, True


def ensure_endpoint(sm: Any, spec: EndpointSpec, *, before_update: Callable[[], None] | None = None) -> str:
    """Point the endpoint at ``spec``'s config; returns "created", "updated" or "unchanged".

    ``before_update`` runs just before an ``UpdateEndpoint`` (used to deregister autoscaling,
    which SageMaker requires before the variant's instances can be replaced).
    """
    current = describe_or_none(sm.describe_endpoint, EndpointName=spec.name)
    if current is None:
        sm.create_endpoint(EndpointName=spec.name, EndpointConfigName=spec.config_name, Tags=spec.tag_list())
        return "created"
    if current["EndpointStatus"] == "Failed":
        raise DeployError(f"endpoint {spec.name} is Failed ({current.get('FailureReason', 'no reason given')}); "
                          "run `destroy` and deploy again")
    if current["EndpointConfigName"] == spec.config_name:
        return "unchanged"
    wait_in_service(sm, spec.name)  # an endpoint that is still Creating/Updating cannot be updated
    if before_update:
        before_update()
    sm.update_endpoint(EndpointName=spec.name, EndpointConfigName=spec.config_name)
    return "updated"


def wait_in_service(sm: Any, name: str, *, timeout_s: float = 3600, poll_s: float = 30,
                    sleep: Callable[[float], None] = time.sleep,
                    report: Callable[[str], None] = lambda _msg: None) -> dict:
    """Poll until the endpoint is InService; raise :class:`DeployError` on Failed or timeout."""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        desc = sm.describe_endpoint(EndpointName=name)
        status = desc["EndpointStatus"]
        if status != last:
            report(f"endpoint {name}: {status}")
            last = status
        if status == "InService":
            return desc
        if status in ("Failed", "OutOfService", "Deleting"):
            raise DeployError(f"endpoint {name} is {status}: {desc.get('FailureReason', 'no reason given')}")
        if time.monotonic() >= deadline:
            raise DeployError(f"endpoint {name} still {status} after {timeout_s:.0f} s")
        sleep(poll_s)


def resource_id(endpoint: str, variant: str = VARIANT) -> str:
    return f"endpoint/{endpoint}/variant/{variant}"


def scaling_policy_name(endpoint: str) -> str:
    return f"{endpoint}-concurrency"


def _target_tracking(target_sessions: float, scale_in_cooldown_s: int, scale_out_cooldown_s: int) -> dict:
    return {
        "TargetValue": float(target_sessions),
        "PredefinedMetricSpecification": {"PredefinedMetricType": CONCURRENCY_METRIC},
        "ScaleInCooldown": scale_in_cooldown_s,
        "ScaleOutCooldown": scale_out_cooldown_s,
    }


def configure_autoscaling(aas: Any, endpoint: str, *, min_instances: int, max_instances: int,
                          target_sessions: float, scale_in_cooldown_s: int = 300,
                          scale_out_cooldown_s: int = 60, tags: dict[str, str] | None = None) -> str:
    """Register the variant as a scalable target and track concurrent requests per model.

    ``target_sessions`` is the number of open sessions/requests per instance the policy aims
    for. Returns the policy name. Idempotent (both calls are upserts); ``tags`` go on a new target.
    """
    if not 1 <= min_instances <= max_instances:
        raise ValueError("need 1 <= min_instances <= max_instances")
    rid = resource_id(endpoint)
    aas.register_scalable_target(ServiceNamespace="sagemaker", ResourceId=rid, ScalableDimension=SCALABLE_DIMENSION,
                                 MinCapacity=min_instances, MaxCapacity=max_instances,
                                 **({"Tags": tags} if tags else {}))
    policy = scaling_policy_name(endpoint)
    aas.put_scaling_policy(
        PolicyName=policy, ServiceNamespace="sagemaker", ResourceId=rid, ScalableDimension=SCALABLE_DIMENSION,
        PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration=_target_tracking(target_sessions, scale_in_cooldown_s,
                                                                  scale_out_cooldown_s),
    )
    return policy


def autoscaling_matches(aas: Any, endpoint: str, *, min_instances: int, max_instances: int,
                        target_sessions: float, scale_in_cooldown_s: int = 300, scale_out_cooldown_s: int = 60) -> bool:
    """True when the target and policy already say what :func:`configure_autoscaling` would write."""
    rid = resource_id(endpoint)
    targets = aas.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=[rid],
                                            ScalableDimension=SCALABLE_DIMENSION)["ScalableTargets"]
    if [(t["MinCapacity"], t["MaxCapacity"]) for t in targets] != [(min_instances, max_instances)]:
        return False
    name = scaling_policy_name(endpoint)
    policies = aas.describe_scaling_policies(ServiceNamespace="sagemaker", ResourceId=rid,
                                             ScalableDimension=SCALABLE_DIMENSION,
                                             PolicyNames=[name])["ScalingPolicies"]
    want = _target_tracking(target_sessions, scale_in_cooldown_s, scale_out_cooldown_s)
    return [p.get("TargetTrackingScalingPolicyConfiguration") for p in policies if p["PolicyName"] == name] == [want]


def remove_autoscaling(aas: Any, endpoint: str) -> list[str]:
    """Delete the variant's scaling policies, then deregister its target. Returns what was removed."""
    rid = resource_id(endpoint)
    where = {"ServiceNamespace": "sagemaker", "ResourceId": rid, "ScalableDimension": SCALABLE_DIMENSION}
    removed = []
    for policy in aas.describe_scaling_policies(**where)["ScalingPolicies"]:
        aas.delete_scaling_policy(PolicyName=policy["PolicyName"], **where)
        removed.append(f"scaling policy {policy['PolicyName']}")
    found = aas.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=[rid],
                                          ScalableDimension=SCALABLE_DIMENSION)["ScalableTargets"]
    if found:
        aas.deregister_scalable_target(**where)
        removed.append(f"autoscaling target {rid}")
    return removed


def owned_names(items: list[dict], key: str, endpoint: str) -> list[str]:
    """Names of the ``<endpoint>-<10 hex digest>`` resources among ``items``."""
    prefix = f"{endpoint}-"
    out = []
    for item in items:
        name = item[key]
        suffix = name[len(prefix):]
        if name.startswith(prefix) and len(suffix) == 10 and all(c in "0123456789abcdef" for c in suffix):
            out.append(name)
    return out


def list_configs(sm: Any, endpoint: str) -> list[str]:
    pages = sm.get_paginator("list_endpoint_configs").paginate(NameContains=endpoint)
    return owned_names([c for page in pages for c in page["EndpointConfigs"]], "EndpointConfigName", endpoint)


def list_models(sm: Any, endpoint: str) -> list[str]:
    pages = sm.get_paginator("list_models").paginate(NameContains=endpoint)
    return owned_names([m for page in pages for m in page["Models"]], "ModelName", endpoint)


def prune_superseded(sm: Any, spec: EndpointSpec) -> list[str]:
    """Delete this endpoint's configs and models other than ``spec``'s. Returns what was deleted."""
    deleted = []
    for name in list_configs(sm, spec.name):
        if name != spec.config_name:
            sm.delete_endpoint_config(EndpointConfigName=name)
            deleted.append(f"endpoint config {name}")
    for name in list_models(sm, spec.name):
        if name != spec.model_name:
            sm.delete_model(ModelName=name)
            deleted.append(f"model {name}")
    return deleted
