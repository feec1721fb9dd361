"""``up`` / ``down`` / ``agent`` run as a user runs them: the real CLI in its own process, against moto's
AWS served on loopback (``AWS_ENDPOINT_URL``, dummy credentials), with no Docker engine on PATH.

moto serves every call the CLI makes, AgentCore's control plane included, through botocore's own
service models. What it lacks, a SageMaker endpoint that is still ``Creating``, comes from
tests/support/moto_server.py. The smoke test is skipped here (``--skip-smoke``): it runs
against the real server in test_deploy_serve_entry.py.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import boto3
import pytest

from deploy.sagemaker.endpoint import STACK_TAG
from tests.support.live import REPO
from tests.support.moto_server import ACCOUNT, REGION, moto_server

pytestmark = [pytest.mark.cloud, pytest.mark.subprocess]

REGISTRY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"


@pytest.fixture(scope="module")
def aws():
    with moto_server() as env:
        yield env


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    # PATH holds only the interpreter's directory: no docker CLI, as on a machine without Docker
    env = env | {"PATH": os.path.dirname(sys.executable)}
    return subprocess.run([sys.executable, "-m", "deploy.sagemaker.deploy", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def client(env: dict[str, str], service: str):
    return _client(env["AWS_ENDPOINT_URL"], service)


@functools.cache
def _client(endpoint_url: str, service: str):
    # One client per server and service, reused: building one loads the service's model, which costs more
    # than the calls the tests make with it.
    return boto3.client(service, endpoint_url=endpoint_url, region_name=REGION,
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def _has_tag(tags: list[dict], stack: str) -> bool:
    return {"Key": STACK_TAG, "Value": stack} in [{"Key": t["Key"], "Value": t["Value"]} for t in tags]


def tagged(env: dict[str, str], stack: str) -> dict[str, list[str]]:
    """Every resource carrying ``kokoro-serve:stack=<stack>``, by kind (scaling targets by resource id:
    moto keeps no tags on them)."""
    sm, iam, ecr = client(env, "sagemaker"), client(env, "iam"), client(env, "ecr")
    ac, aas = client(env, "bedrock-agentcore-control"), client(env, "application-autoscaling")
    found = {
        "endpoint": [e["EndpointName"] for e in sm.list_endpoints()["Endpoints"]
                     if _has_tag(sm.list_tags(ResourceArn=e["EndpointArn"])["Tags"], stack)],
        "endpoint config": [c["EndpointConfigName"] for c in sm.list_endpoint_configs()["EndpointConfigs"]
                            if _has_tag(sm.list_tags(ResourceArn=c["EndpointConfigArn"])["Tags"], stack)],
        "model": [m["ModelName"] for m in sm.list_models()["Models"]
                  if _has_tag(sm.list_tags(ResourceArn=m["ModelArn"])["Tags"], stack)],
        "role": [r["RoleName"] for r in iam.list_roles()["Roles"]
                 if _has_tag(iam.list_role_tags(RoleName=r["RoleName"])["Tags"], stack)],
        "repository": [r["repositoryName"] for r in ecr.describe_repositories()["repositories"]
                       if _has_tag(ecr.list_tags_for_resource(resourceArn=r["repositoryArn"])["tags"], stack)],
        "agent runtime": [r["agentRuntimeName"] for r in ac.list_agent_runtimes()["agentRuntimes"]
                          if ac.list_tags_for_resource(resourceArn=r["agentRuntimeArn"])["tags"].get(STACK_TAG) == stack],
        "scaling target": [t["ResourceId"] for t in aas.describe_scalable_targets(ServiceNamespace="sagemaker")[
            "ScalableTargets"] if t["ResourceId"] == f"endpoint/{stack}/variant/AllTraffic"],
    }
    return {kind: sorted(names) for kind, names in found.items()}


NOTHING = {k: [] for k in ("endpoint", "endpoint config", "model", "role", "repository", "agent runtime",
                           "scaling target")}


def _policy(env, role: str) -> list[dict]:
    return client(env, "iam").get_role_policy(RoleName=role, PolicyName="kokoro-serve")["PolicyDocument"]["Statement"]


def _resources(statements: list[dict], sid: str) -> list[str]:
    return next(s["Resource"] for s in statements if s["Sid"] == sid)


def test_up_from_an_empty_account_then_again_changes_nothing_and_down_all_leaves_nothing(aws):
    image = f"{REGISTRY}/kz1:cpu"
    up = ["up", "--name", "kz1", "--image", image, "--instance-type", "ml.m5.xlarge", "--skip-smoke"]
    first = cli(aws, *up)
    assert first.returncode == 0, first.stderr + first.stdout
    made = tagged(aws, "kz1")
    assert {k: len(v) for k, v in made.items()} == {
        "endpoint": 1, "endpoint config": 1, "model": 1, "role": 1, "repository": 1, "agent runtime": 0,
        "scaling target": 1}
    assert made["role"] == ["kz1-sagemaker"] and made["repository"] == ["kz1"]
    assert "smoke test skipped" in first.stdout

    sm = client(aws, "sagemaker")
    ep = sm.describe_endpoint(EndpointName="kz1")
    assert ep["EndpointStatus"] == "InService"
    variant = sm.describe_endpoint_config(EndpointConfigName=ep["EndpointConfigName"])["ProductionVariants"][0]
    assert variant["InstanceType"] == "ml.m5.xlarge" and "InferenceAmiVersion" not in variant
    model = sm.describe_model(ModelName=variant["ModelName"])
    role = client(aws, "iam").get_role(RoleName="kz1-sagemaker")["Role"]
    assert model["PrimaryContainer"]["Image"] == image and model["ExecutionRoleArn"] == role["Arn"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    # least privilege: its own repository, its own log group, no model data (none was given), no wildcards
    statements = _policy(aws, "kz1-sagemaker")
    assert _resources(statements, "PullOwnImage") == [f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/kz1"]
    assert all("/aws/sagemaker/Endpoints/kz1" in r for r in _resources(statements, "WriteOwnLogs"))
    assert [s["Sid"] for s in statements if "*" in s["Resource"]] == ["EcrLogin"]
    assert not any(a.startswith("s3:") for s in statements for a in s["Action"])

    again = cli(aws, *up)
    assert again.returncode == 0, again.stderr
    assert "nothing changed" in again.stdout
    assert tagged(aws, "kz1") == made

    logs = client(aws, "logs")
    for group in ("/aws/sagemaker/Endpoints/kz1", "/aws/sagemaker/Endpoints/kz10"):  # as SageMaker makes them
        logs.create_log_group(logGroupName=group)
    down = cli(aws, "down", "--name", "kz1", "--all")
    assert down.returncode == 0, down.stderr
    assert tagged(aws, "kz1") == NOTHING
    assert "deleted ECR repository kz1" in down.stdout and "WARNING" not in down.stderr
    assert client(aws, "iam").list_roles()["Roles"] == []
    # its own log group went; another endpoint's whose name merely starts with "kz1" stayed
    assert [g["logGroupName"] for g in logs.describe_log_groups()["logGroups"]] == ["/aws/sagemaker/Endpoints/kz10"]


def test_without_docker_or_image_up_prints_the_buildx_commands_and_down_clears_the_half_finished_stack(
        aws, tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    client(aws, "s3").create_bucket(Bucket="kz-models")
    half = cli(aws, "up", "--name", "kz2", "--model-dir", str(model_dir), "--model-s3-uri", "s3://kz-models/kz2/",
               "--with-agent", "--skip-smoke")
    assert half.returncode == 1
    repo = f"{REGISTRY}/kz2"
    assert (f"aws ecr get-login-password --region {REGION} | docker login --username AWS --password-stdin "
            f"{REGISTRY}") in half.stdout
    assert (f"docker buildx build --platform linux/amd64 --provenance=false -f deploy/sagemaker/Dockerfile "
            f"-t {repo}:gpu --push .") in half.stdout  # ml.g5.xlarge by default: the GPU image
    assert (f"docker buildx build --platform linux/arm64 --provenance=false -f deploy/sagemaker/Dockerfile.agent "
            f"-t {repo}:agent-arm64 --push .") in half.stdout
    assert "run `up` again" in half.stderr
    assert tagged(aws, "kz2") == NOTHING | {"role": ["kz2-sagemaker"], "repository": ["kz2"]}
    assert _resources(_policy(aws, "kz2-sagemaker"), "ReadOwnModelData") == ["arn:aws:s3:::kz-models/kz2/*"]

    kept = cli(aws, "down", "--name", "kz2")
    assert kept.returncode == 0, kept.stderr
    assert tagged(aws, "kz2") == NOTHING | {"repository": ["kz2"]}
    assert "s3://kz-models/kz2/model.tar.gz" in kept.stderr and "ECR repository kz2" in kept.stderr
    assert "/month" in kept.stderr and "down --name kz2 --all" in kept.stderr
    client(aws, "s3").head_object(Bucket="kz-models", Key="kz2/model.tar.gz")  # kept, as it said

    gone = cli(aws, "down", "--name", "kz2", "--all")
    assert gone.returncode == 0, gone.stderr
    assert tagged(aws, "kz2") == NOTHING and "WARNING" not in gone.stderr
    assert client(aws, "s3").list_objects_v2(Bucket="kz-models").get("KeyCount") == 0


def test_agent_is_refused_while_its_endpoint_does_not_exist(aws):
    refused = cli(aws, "agent", "--name", "ghost", "--image", f"{REGISTRY}/ghost:agent-arm64",
                  "--role", f"arn:aws:iam::{ACCOUNT}:role/ghost-agentcore")
    assert refused.returncode == 1
    assert "refusing to create the agent: endpoint ghost does not exist" in refused.stderr
    assert client(aws, "bedrock-agentcore-control").list_agent_runtimes()["agentRuntimes"] == []


def test_up_with_agent_puts_the_runtime_in_front_of_the_endpoint_and_down_removes_it(aws):
    up = ["up", "--name", "kz4", "--image", f"{REGISTRY}/kz4:cpu", "--agent-image", f"{REGISTRY}/kz4:agent-arm64",
          "--instance-type", "ml.m5.xlarge", "--skip-smoke", "--with-agent"]
    first = cli(aws, *up)
    assert first.returncode == 0, first.stderr + first.stdout
    made = tagged(aws, "kz4")
    assert made["agent runtime"] == ["kz4_agent"] and made["role"] == ["kz4-agentcore", "kz4-sagemaker"]

    ac = client(aws, "bedrock-agentcore-control")
    rid = ac.list_agent_runtimes()["agentRuntimes"][0]["agentRuntimeId"]
    runtime = ac.get_agent_runtime(agentRuntimeId=rid)
    assert runtime["environmentVariables"]["KOKORO_AGENT_ENDPOINT_NAME"] == "kz4"
    assert runtime["environmentVariables"]["KOKORO_AGENT_BEDROCK_MODEL_ID"] == "us.anthropic.claude-sonnet-4-6"
    assert runtime["roleArn"].endswith(":role/kz4-agentcore")
    statements = _policy(aws, "kz4-agentcore")
    stream = next(s for s in statements if s["Sid"] == "SpeakThroughOneEndpoint")
    assert stream["Action"] == ["sagemaker:InvokeEndpointWithBidirectionalStream"]
    assert stream["Resource"] == [f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/kz4"]
    assert _resources(statements, "CallConfiguredModel") == [
        f"arn:aws:bedrock:{REGION}:{ACCOUNT}:inference-profile/us.anthropic.claude-sonnet-4-6",
        "arn:aws:bedrock:::foundation-model/anthropic.claude-sonnet-4-6"]

    again = cli(aws, *up)
    assert again.returncode == 0 and "nothing changed" in again.stdout, again.stdout + again.stderr
    assert ac.get_agent_runtime(agentRuntimeId=rid)["agentRuntimeVersion"] == runtime["agentRuntimeVersion"]

    down = cli(aws, "down", "--name", "kz4", "--all")
    assert down.returncode == 0, down.stderr
    assert tagged(aws, "kz4") == NOTHING
    assert down.stdout.index("agent runtime") < down.stdout.index("endpoint kz4")


def test_up_with_agent_refuses_while_the_endpoint_is_not_in_service():
    with moto_server(endpoints_stay_creating=True) as env:
        refused = cli(env, "up", "--name", "kz5", "--image", f"{REGISTRY}/kz5:cpu", "--agent-image",
                      f"{REGISTRY}/kz5:agent-arm64", "--instance-type", "ml.m5.xlarge", "--skip-smoke",
                      "--with-agent", "--wait-timeout", "0")
        assert refused.returncode == 1
        assert "refusing to create the agent: endpoint kz5 is Creating, not InService" in refused.stderr
        same = cli(env, "agent", "--name", "kz5", "--image", f"{REGISTRY}/kz5:agent-arm64",
                   "--role", f"arn:aws:iam::{ACCOUNT}:role/kz5-agentcore")
        assert same.returncode == 1 and "endpoint kz5 is Creating, not InService" in same.stderr
        assert client(env, "bedrock-agentcore-control").list_agent_runtimes()["agentRuntimes"] == []
        assert "kz5-agentcore" not in tagged(env, "kz5")["role"]
        assert tagged(env, "kz5")["endpoint"] == ["kz5"]  # the endpoint itself is on its way
