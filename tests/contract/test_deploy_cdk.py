"""The CDK app synthesised offline and checked with ``aws_cdk.assertions.Template``: the GPU variant
(the defaults) and the CPU variant (ml.c6i.xlarge, ONNX, ``Dockerfile.cpu``), each once per module,
in one node process (aws-cdk-lib runs on node through jsii: ~2 s here). Both are checked by CDK's
built-in CloudFormation validation with its default rules as errors
(``@aws-cdk/core:validateAgainstDefaultRules``): a finding fails the synthesis. The validator costs
~5 s to load, once per process, and well under a second a synthesis after that, so the suite checks
both variants here and ``deploy/check.sh --static`` (beside ``make test``) synthesises nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from deploy.dockerfiles import BIDI_LABEL, REPO, Dockerfile
from deploy.sagemaker.endpoint import CONCURRENCY_METRIC, DEFAULT_GPU_AMI

pytestmark = [pytest.mark.cloud, pytest.mark.subprocess]

# None: unset (CDK_VALIDATION=false in the shell would switch the validation off)
ENV = {"JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "JSII_DEPRECATED": "quiet", "CDK_VALIDATION": None}
#: CDK's default CloudFormation rules report findings as errors (the synthesis fails), not warnings.
RULES_AS_ERRORS = {"@aws-cdk/core:validateAgainstDefaultRules": True}
#: The CPU variant: a CPU instance, the ONNX runtime, the CPU image.
CPU_CONTEXT = {"instance_type": "ml.c6i.xlarge", "backend": "onnx", "mode": "sequential",
               "dockerfile": "deploy/sagemaker/Dockerfile.cpu"}


@pytest.fixture(scope="module")
def cdk_app(tmp_path_factory):
    """``build(context)``: both stacks synthesised from ``context`` (plus the rules as errors)."""
    # set before aws_cdk is first imported: its node process reads them when it starts
    old = {k: os.environ.get(k) for k in ENV}
    for k, v in ENV.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        import aws_cdk as cdk
        from aws_cdk.assertions import Template

        from deploy.sagemaker.cdk.stacks import build_app

        def build(context: dict) -> dict:
            outdir = tmp_path_factory.mktemp("cdk.out")
            app = cdk.App(outdir=str(outdir), context={**RULES_AS_ERRORS, **context})
            speech, agent = build_app(app, cdk.Environment(account="123456789012", region="us-east-1"))
            assembly = app.synth()  # raises on a validation error
            return {"speech": Template.from_stack(speech), "agent": Template.from_stack(agent),
                    "dir": Path(assembly.directory)}

        yield build
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def synth(cdk_app):
    return cdk_app({"endpoint_name": "kokoro-tts", "max_instances": "5"})


@pytest.fixture(scope="module")
def cpu_synth(cdk_app):
    return cdk_app(CPU_CONTEXT)


def _only(template, kind):
    resources = template.find_resources(kind)
    assert len(resources) == 1, resources
    return next(iter(resources.values()))["Properties"]


def _docker_assets(directory: Path, stack: str) -> dict:
    manifest = json.loads((directory / f"{stack}.assets.json").read_text())
    return manifest["dockerImages"]


def _statements(template, role_logical_prefix):
    out = []
    for res in template.find_resources("AWS::IAM::Policy").values():
        roles = json.dumps(res["Properties"]["Roles"])
        if role_logical_prefix in roles:
            out += res["Properties"]["PolicyDocument"]["Statement"]
    return out


def _actions(statement):
    a = statement["Action"]
    return [a] if isinstance(a, str) else a


def test_endpoint_config_is_ml_g5_with_a_new_enough_gpu_driver_and_startup_timeout(synth):
    variant = _only(synth["speech"], "AWS::SageMaker::EndpointConfig")["ProductionVariants"][0]
    assert variant["InstanceType"] == "ml.g5.xlarge"
    assert variant["InferenceAmiVersion"] == DEFAULT_GPU_AMI
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] >= 600
    assert _only(synth["speech"], "AWS::SageMaker::Endpoint")["EndpointName"] == "kokoro-tts"


def test_the_model_runs_the_image_built_from_the_label_carrying_dockerfile(synth):
    images = _docker_assets(synth["dir"], "KokoroSpeech")
    (asset_hash, asset), = images.items()
    assert asset["source"]["dockerFile"] == "deploy/sagemaker/Dockerfile"
    assert asset["source"]["platform"] == "linux/amd64"
    staged = synth["dir"] / asset["source"]["directory"] / asset["source"]["dockerFile"]
    assert Dockerfile.parse(staged).labels[BIDI_LABEL] == "true"  # in the context CDK will build
    # the staged context is only what the image copies, never the virtualenv or the caches
    staged_root = synth["dir"] / asset["source"]["directory"]
    assert not (staged_root / ".venv").exists() and (staged_root / "server").is_dir()

    container = _only(synth["speech"], "AWS::SageMaker::Model")["PrimaryContainer"]
    assert asset_hash in json.dumps(container["Image"])
    assert container["Environment"] == {"KOKORO_BACKEND": "torch", "KOKORO_MODE": "concurrent"}


def test_stack_outputs_give_the_smoke_test_command_and_resources_carry_the_stack_tag(synth):
    outputs = synth["speech"].find_outputs("SmokeTestCommand")
    (command,) = [o["Value"] for o in outputs.values()]
    assert command == "python -m deploy.sagemaker.deploy --region us-east-1 smoke --name kokoro-tts"
    for template, kind in ((synth["speech"], "AWS::SageMaker::Endpoint"), (synth["agent"], "AWS::IAM::Role")):
        for res in template.find_resources(kind).values():
            assert {"Key": "kokoro-serve:stack", "Value": "kokoro-tts"} in res["Properties"]["Tags"]


def test_target_tracking_on_concurrent_requests_per_model(synth):
    target = _only(synth["speech"], "AWS::ApplicationAutoScaling::ScalableTarget")
    assert target["ResourceId"] == "endpoint/kokoro-tts/variant/AllTraffic"
    assert (target["MinCapacity"], target["MaxCapacity"]) == (1, 5)
    assert target["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    policy = _only(synth["speech"], "AWS::ApplicationAutoScaling::ScalingPolicy")
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert policy["PolicyType"] == "TargetTrackingScaling"
    assert tracking["PredefinedMetricSpecification"]["PredefinedMetricType"] == CONCURRENCY_METRIC


def test_invoke_role_may_open_bidirectional_streams_on_this_endpoint_only(synth):
    statements = [s for s in _statements(synth["speech"], "InvokeRole")
                  if "sagemaker:InvokeEndpointWithBidirectionalStream" in _actions(s)]
    assert len(statements) == 1
    resource = json.dumps(statements[0]["Resource"])
    assert "endpoint/kokoro-tts" in resource and "*" not in resource


def test_agent_runtime_env_names_the_endpoint_and_its_role_reaches_only_it(synth):
    runtime = _only(synth["agent"], "AWS::BedrockAgentCore::Runtime")
    assert runtime["EnvironmentVariables"]["KOKORO_AGENT_ENDPOINT_NAME"] == "kokoro-tts"
    assert runtime["EnvironmentVariables"]["KOKORO_AGENT_REGION"] == "us-east-1"
    assert runtime["AgentRuntimeName"] == "kokoro_tts_agent"
    sagemaker_statements = [s for s in _statements(synth["agent"], "RuntimeRole")
                            if any(a.startswith("sagemaker:") for a in _actions(s))]
    assert len(sagemaker_statements) == 1
    assert "sagemaker:InvokeEndpointWithBidirectionalStream" in _actions(sagemaker_statements[0])
    resource = json.dumps(sagemaker_statements[0]["Resource"])
    assert "endpoint/kokoro-tts" in resource and "*" not in resource


def test_agent_image_is_arm64(synth):
    (asset_hash, asset), = _docker_assets(synth["dir"], "KokoroAgent").items()
    assert asset["source"]["platform"] == "linux/arm64"
    assert asset["source"]["dockerFile"] == "deploy/sagemaker/Dockerfile.agent"
    artifact = _only(synth["agent"], "AWS::BedrockAgentCore::Runtime")["AgentRuntimeArtifact"]
    assert asset_hash in json.dumps(artifact["ContainerConfiguration"]["ContainerUri"])


def test_agent_stack_deploys_after_the_speech_stack(synth):
    manifest = json.loads((synth["dir"] / "manifest.json").read_text())
    assert "KokoroSpeech" in manifest["artifacts"]["KokoroAgent"]["dependencies"]


def test_the_agent_cli_reads_the_environment_the_runtime_is_given(synth):
    """What the stack puts in the runtime's environment is what `kokoro-agent serve` reads."""
    from agent import cli

    runtime_env = _only(synth["agent"], "AWS::BedrockAgentCore::Runtime")["EnvironmentVariables"]
    image_env = Dockerfile.parse(REPO / "deploy/sagemaker/Dockerfile.agent").env
    settings = cli.settings_from(cli._parser().parse_args(["serve"]), {**image_env, **runtime_env})
    assert (settings.endpoint_name, settings.region, settings.host, settings.port) == (
        "kokoro-tts", "us-east-1", "0.0.0.0", 8080)



def test_both_variants_pass_cloudformation_validation_with_the_default_rules_as_errors(synth, cpu_synth):
    for variant in (synth, cpu_synth):
        report = json.loads((variant["dir"] / "validation-report.json").read_text())  # written: the rules ran
        assert all(r["conclusion"] != "failure" for r in report["pluginReports"]), report


def test_the_cpu_variant_is_ml_c6i_on_onnx_without_a_gpu_ami(cpu_synth):
    variant = _only(cpu_synth["speech"], "AWS::SageMaker::EndpointConfig")["ProductionVariants"][0]
    assert variant["InstanceType"] == "ml.c6i.xlarge"
    assert "InferenceAmiVersion" not in json.dumps(cpu_synth["speech"].to_json())  # a GPU driver AMI only
    (asset,) = _docker_assets(cpu_synth["dir"], "KokoroSpeech").values()
    assert asset["source"]["dockerFile"] == "deploy/sagemaker/Dockerfile.cpu"
    container = _only(cpu_synth["speech"], "AWS::SageMaker::Model")["PrimaryContainer"]
    assert container["Environment"] == {"KOKORO_BACKEND": "onnx", "KOKORO_MODE": "sequential"}
