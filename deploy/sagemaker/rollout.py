"""Roll a SageMaker endpoint to a spec: model, endpoint config, endpoint, autoscaling, smoke test.

:func:`deploy` is the one rollout both ``deploy`` (bring your own role and image) and ``up`` (from an
empty account, see :mod:`deploy.sagemaker.stack`) run. It blocks until the endpoint is InService and
has passed the bidirectional smoke test (InService only means /ping answered, not that the handler
reads the binary frames SageMaker delivers). A failed smoke test raises and keeps the previous
configuration for a roll-back.

boto3 is imported when a client is first needed; the smoke-test transport (the agent package's
SageMaker client) only when the smoke test runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deploy.sagemaker import endpoint
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
    changed: list[str] = field(default_factory=list)  # what this run created, updated or removed


def default_smoke(endpoint_name: str, region: str) -> Any:
    """The real check: a bidirectional stream through SageMaker (agent's transport, lazily imported)."""
    from deploy.smoke import sagemaker_smoke

    return sagemaker_smoke(endpoint_name, region)


def _scale(aas: Any, spec: EndpointSpec, scaling: Scaling, result: DeployResult, log: Callable[[str], None]) -> None:
    settings = {"min_instances": scaling.min_instances, "max_instances": scaling.max_instances,
                "target_sessions": scaling.target_sessions}
    if endpoint.autoscaling_matches(aas, spec.name, **settings):
        result.scaling_policy = endpoint.scaling_policy_name(spec.name)
        log(f"autoscaling {scaling.min_instances}-{scaling.max_instances} instances: unchanged")
        return
    result.scaling_policy = endpoint.configure_autoscaling(aas, spec.name, tags=spec.tag_dict(), **settings)
    result.changed.append(f"autoscaling {endpoint.resource_id(spec.name)}")
    log(f"autoscaling: {scaling.min_instances}-{scaling.max_instances} instances, "
        f"target {scaling.target_sessions:g} concurrent requests per instance")


def _smoke(smoke: SmokeTest, spec: EndpointSpec, region: str, result: DeployResult, log: Callable[[str], None]) -> None:
    try:
        report = smoke(spec.name, region)
    except Exception as exc:
        raise DeployError(f"endpoint {spec.name} is InService but failed the bidirectional smoke test: "
                          f"{exc}. The previous configuration (if any) was kept; `destroy` removes it "
                          "all.") from exc
    result.smoke = report.summary() if hasattr(report, "summary") else str(report)
    log(result.smoke)


def deploy(clients: Any, spec: EndpointSpec, *, scaling: Scaling | None = Scaling(),
           smoke: SmokeTest | None = default_smoke, log: Callable[[str], None] = print,
           poll_s: float = 30, timeout_s: float = 3600,
           sleep: Callable[[float], None] | None = None) -> DeployResult:
    """Create or update ``spec``'s endpoint and prove it synthesises. Raises :class:`DeployError`.

    ``smoke=None`` skips the smoke test (not recommended). Blocks until done.
    """
    sm, aas = clients.client("sagemaker"), clients.client("application-autoscaling")
    changed: list[str] = []
    model, made = endpoint.ensure_model(sm, spec)
    log(f"model {model}: {'created' if made else 'exists'}")
    changed += [f"model {model} (created)"] if made else []
    config, made = endpoint.ensure_endpoint_config(sm, spec)
    log(f"endpoint config {config}: {'created' if made else 'exists'}")
    changed += [f"endpoint config {config} (created)"] if made else []
    action = endpoint.ensure_endpoint(sm, spec, before_update=lambda: endpoint.remove_autoscaling(aas, spec.name))
    log(f"endpoint {spec.name}: {action}")
    changed += [f"endpoint {spec.name} ({action})"] if action != "unchanged" else []
    waits = {"poll_s": poll_s, "timeout_s": timeout_s, "report": log} | ({"sleep": sleep} if sleep else {})
    endpoint.wait_in_service(sm, spec.name, **waits)
    result = DeployResult(spec.name, action, model, config, changed=changed)
    if scaling is not None:
        _scale(aas, spec, scaling, result, log)
    if smoke is not None:
        _smoke(smoke, spec, clients.region, result, log)
    else:
        log("WARNING: smoke test skipped; InService does not prove the endpoint synthesises")
    result.pruned = endpoint.prune_superseded(sm, spec)
    for item in result.pruned:
        log(f"removed superseded {item}")
    result.changed += [f"removed {item}" for item in result.pruned]
    return result
