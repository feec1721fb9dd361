"""The AgentCore runtime that fronts a kokoro-serve endpoint (boto3, ``bedrock-agentcore-control``).

The agent container (ARM64, ``Dockerfile.agent``) reads the endpoint it speaks through from its
environment (:data:`ENDPOINT_ENV`), so one runtime is bound to one endpoint; its IAM role should
allow ``sagemaker:InvokeEndpointWithBidirectionalStream`` on that endpoint only (the CDK agent
stack builds such a role; with boto3 you pass one in).

AgentCore runtime names allow letters, digits and underscores only, so the runtime of endpoint
``kokoro-tts`` is ``kokoro_tts_agent``. The agent is created only once its endpoint is InService
(:func:`require_in_service`): an agent in front of a missing endpoint fails every request. Functions
block the calling thread; boto3 clients are passed in.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from deploy.sagemaker.endpoint import DeployError, describe_or_none

# The variables `kokoro-agent serve` reads (agent/cli.py); used here and by the CDK agent stack.
ENDPOINT_ENV = "KOKORO_AGENT_ENDPOINT_NAME"
REGION_ENV = "KOKORO_AGENT_REGION"
BEDROCK_MODEL_ENV = "KOKORO_AGENT_BEDROCK_MODEL_ID"


def refusal(sm: Any, endpoint: str) -> str | None:
    """Why no agent may be put in front of SageMaker endpoint ``endpoint`` now; None when it is InService."""
    desc = describe_or_none(sm.describe_endpoint, EndpointName=endpoint)
    if desc is None:
        return (f"refusing to create the agent: endpoint {endpoint} does not exist. The agent speaks through it: "
                f"create it first (`up --name {endpoint}`)")
    status = desc["EndpointStatus"]
    if status != "InService":
        return (f"refusing to create the agent: endpoint {endpoint} is {status}, not InService. The agent runtime "
                "is created only once its endpoint serves: wait for InService, then run this again")
    return None


def require_in_service(sm: Any, endpoint: str) -> None:
    """Raise :class:`DeployError` (with :func:`refusal`'s reason) unless the endpoint is InService."""
    reason = refusal(sm, endpoint)
    if reason:
        raise DeployError(reason)


def runtime_name(endpoint: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", endpoint)
    if not name[:1].isalpha():
        name = "a_" + name
    return f"{name}_agent"[:48]


def runtime_environment(endpoint: str, region: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {ENDPOINT_ENV: endpoint, REGION_ENV: region, **(extra or {})}


def find_runtimes(ac: Any, name: str) -> list[dict]:
    """Summaries of the runtimes called ``name`` (there is at most one, but list them all)."""
    found, token = [], None
    while True:
        page = ac.list_agent_runtimes(**({"nextToken": token} if token else {}))
        found += [r for r in page.get("agentRuntimes", []) if r["agentRuntimeName"] == name]
        token = page.get("nextToken")
        if not token:
            return found


def _same(current: dict, args: dict) -> bool:
    keys = ("agentRuntimeArtifact", "roleArn", "networkConfiguration", "environmentVariables")
    return all(current.get(k) == args[k] for k in keys)


def ensure_runtime(ac: Any, *, endpoint: str, region: str, image_uri: str, role_arn: str,
                   extra_env: dict[str, str] | None = None, tags: dict[str, str] | None = None) -> tuple[str, str]:
    """Create the endpoint's agent runtime, or update it to this image/role/environment.

    Returns ``(runtime_arn, "created" | "updated" | "unchanged")``; ``tags`` go on a new runtime.
    """
    name = runtime_name(endpoint)
    args = {
        "agentRuntimeArtifact": {"containerConfiguration": {"containerUri": image_uri}},
        "roleArn": role_arn,
        "networkConfiguration": {"networkMode": "PUBLIC"},
        "environmentVariables": runtime_environment(endpoint, region, extra_env),
        "description": f"kokoro-serve agent speaking through SageMaker endpoint {endpoint}",
    }
    existing = find_runtimes(ac, name)
    if existing:
        rid = existing[0]["agentRuntimeId"]
        current = ac.get_agent_runtime(agentRuntimeId=rid)
        if _same(current, args):
            return current["agentRuntimeArn"], "unchanged"
        out = ac.update_agent_runtime(agentRuntimeId=rid, **args)
        return out["agentRuntimeArn"], "updated"
    out = ac.create_agent_runtime(agentRuntimeName=name, **args, **({"tags": tags} if tags else {}))
    return out["agentRuntimeArn"], "created"


def delete_runtimes(ac: Any, endpoint: str, *, timeout_s: float = 600, poll_s: float = 10,
                    sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """Delete the endpoint's agent runtime(s) and wait until they are gone. Returns their ids."""
    name = runtime_name(endpoint)
    ids = [r["agentRuntimeId"] for r in find_runtimes(ac, name)]
    for rid in ids:
        ac.delete_agent_runtime(agentRuntimeId=rid)
    deadline = time.monotonic() + timeout_s
    while ids and find_runtimes(ac, name):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"agent runtime {name} still present after {timeout_s:.0f} s")
        sleep(poll_s)
    return ids
