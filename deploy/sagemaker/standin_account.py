"""The stand-in AWS account of ``--dry-run`` (:mod:`deploy.sagemaker.dry_run`): what it holds, and how
each operation the deploy code makes answers, as an account would that starts empty (no repository,
role, image, model, endpoint, scaling or agent runtime) and then holds what the run created.

Handlers are named ``<service>__<operation>`` (``-`` in a service name written ``_``); each takes the
client's error factory and the operation's name, then the call's parameters. Pure Python.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

ACCOUNT = "123456789012"
DIGEST = "sha256:" + "0" * 64  # a stand-in digest of an image the run pushed


class StandInAccount:
    """What the stand-in account holds, and how each known operation answers (see the module doc)."""

    def __init__(self, region: str, log: Callable[[str], None]):
        self.region, self.log = region, log
        self.calls: list[Any] = []  # dry_run.PlannedCall, in the order made
        self.repos: dict[str, dict] = {}
        self.roles: dict[str, dict] = {}
        self.sm: dict[tuple[str, str], dict] = {}  # (kind, name) -> description
        self.scaling: dict[str, list[dict]] = {"targets": [], "policies": []}
        self.runtimes: dict[str, dict] = {}
        self.log_groups: set[str] = set()  # what SageMaker and AgentCore write to once they run
        self.pushed: dict[str, set[str]] = {}  # repository -> image tags built and pushed by the run

    def record(self, call: Any) -> None:
        self.calls.append(call)
        for line in call.lines():
            self.log(f"  [dry run] {line}")

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

    def ecr__describe_images(self, err, op, repositoryName, imageIds=(), **p):
        self._repo(err, op, repositoryName)
        tags = {i["imageTag"] for i in imageIds if "imageTag" in i}
        if tags - self.pushed.get(repositoryName, set()):
            err.raise_("ImageNotFoundException", f"no image {sorted(tags)} in {repositoryName}", op,
                       "ImageNotFoundException")
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
