"""CDK stacks: the speech endpoint (SageMaker) and the agent (AgentCore runtime) in front of it.

``SpeechStack``: an execution role, the model (image built from ``deploy/sagemaker/Dockerfile``, which
carries the bidirectional-streaming label, or a given image URI; optional ``model.tar.gz``), an
endpoint config (ml.g5.xlarge, a GPU AMI with a driver new enough for the image's CUDA, a start-up
health-check timeout for a cold GPU start), the endpoint, target-tracking autoscaling on concurrent
requests per model, and an invoke role allowed ``sagemaker:InvokeEndpointWithBidirectionalStream``
(and ``InvokeEndpoint``) on this endpoint only.

``AgentStack``: an AgentCore runtime from an ARM64 image (``deploy/sagemaker/Dockerfile.agent``),
its environment naming the endpoint, its role allowed to invoke that one endpoint (plus Bedrock
model streaming, its image, logs and traces).

The endpoint name is fixed (``SpeechConfig.endpoint_name``) so the agent stack can be scoped to it
without a cross-stack export; the agent stack depends on the speech stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as autoscaling
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from deploy.sagemaker import agent_runtime
from deploy.sagemaker.endpoint import (
    CONCURRENCY_METRIC,
    DEFAULT_INSTANCE_TYPE,
    DEFAULT_STARTUP_TIMEOUT_S,
    SCALABLE_DIMENSION,
    STACK_TAG,
    VARIANT,
    default_ami,
)

REPO = Path(__file__).resolve().parents[3]
# The build context is the repository root; only what the images copy goes into the asset hash.
CONTEXT_EXCLUDE = ["*", "!pyproject.toml", "!README.md", "!backends/**", "!server/**", "!agent/**",
                   "!deploy/**", "**/__pycache__", "**/*.pyc", "deploy/**/cdk.out"]
INVOKE_ACTIONS = ["sagemaker:InvokeEndpointWithBidirectionalStream", "sagemaker:InvokeEndpoint",
                  "sagemaker:InvokeEndpointWithResponseStream"]


@dataclass(frozen=True)
class SpeechConfig:
    endpoint_name: str = "kokoro-tts"
    image_uri: str | None = None  # None: build deploy/sagemaker/Dockerfile as a CDK asset
    dockerfile: str = "deploy/sagemaker/Dockerfile"
    model_data_url: str | None = None
    instance_type: str = DEFAULT_INSTANCE_TYPE
    inference_ami_version: str = "auto"  # auto: a CUDA 13 driver AMI on GPU types, none on CPU types
    initial_instance_count: int = 1
    startup_timeout_s: int = DEFAULT_STARTUP_TIMEOUT_S
    min_instances: int = 1
    max_instances: int = 4
    target_sessions: float = 8.0
    backend: str = "torch"
    mode: str = "concurrent"
    invoke_principal_arn: str | None = None  # None: the account root (then IAM policies decide)

    @classmethod
    def from_context(cls, node: Construct) -> SpeechConfig:
        """Fields from ``cdk -c key=value`` context (numbers parsed), defaults otherwise."""
        values = {}
        for name, field in cls.__dataclass_fields__.items():
            raw = node.node.try_get_context(name)
            if raw is None:
                continue
            kind = field.type if isinstance(field.type, str) else field.type.__name__
            values[name] = int(raw) if kind == "int" else float(raw) if kind == "float" else str(raw)
        return cls(**values)


def smoke_command(region: str, endpoint_name: str) -> str:
    """The bidirectional smoke test of the deployed endpoint, as a shell command."""
    return f"python -m deploy.sagemaker.deploy --region {region} smoke --name {endpoint_name}"


def endpoint_arn(stack: cdk.Stack, endpoint_name: str) -> str:
    # SageMaker ARNs carry the endpoint name in lower case.
    return stack.format_arn(service="sagemaker", resource="endpoint", resource_name=endpoint_name.lower())


class SpeechStack(cdk.Stack):
    """The SageMaker endpoint serving kokoro-serve's bidirectional contract."""

    def __init__(self, scope: Construct, construct_id: str, *, config: SpeechConfig, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config

        role = iam.Role(self, "ExecutionRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
                        description="kokoro-serve SageMaker execution role")
        role.add_to_policy(iam.PolicyStatement(
            actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            resources=[self.format_arn(service="logs", resource="log-group",
                                       resource_name="/aws/sagemaker/*", arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)]))
        role.add_to_policy(iam.PolicyStatement(actions=["cloudwatch:PutMetricData"], resources=["*"]))

        if config.image_uri:
            image_uri = config.image_uri
            role.add_to_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))
            role.add_to_policy(iam.PolicyStatement(
                actions=["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"],
                resources=["*"]))
        else:
            asset = ecr_assets.DockerImageAsset(
                self, "Image", directory=str(REPO), file=config.dockerfile, platform=ecr_assets.Platform.LINUX_AMD64,
                exclude=CONTEXT_EXCLUDE, ignore_mode=cdk.IgnoreMode.DOCKER)
            asset.repository.grant_pull(role)
            image_uri = asset.image_uri

        container: dict = {"image": image_uri, "environment": {
            "KOKORO_BACKEND": config.backend, "KOKORO_MODE": config.mode}}
        if config.model_data_url:
            container["model_data_url"] = config.model_data_url
            bucket, _, key = config.model_data_url[5:].partition("/")
            role.add_to_policy(iam.PolicyStatement(
                actions=["s3:GetObject"], resources=[f"arn:{self.partition}:s3:::{bucket}/{key}"]))

        model = sagemaker.CfnModel(self, "Model", execution_role_arn=role.role_arn,
                                   primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(**container))
        model.node.add_dependency(role)

        variant = sagemaker.CfnEndpointConfig.ProductionVariantProperty(
            variant_name=VARIANT, model_name=model.attr_model_name, instance_type=config.instance_type,
            initial_instance_count=config.initial_instance_count, initial_variant_weight=1.0,
            container_startup_health_check_timeout_in_seconds=config.startup_timeout_s,
            model_data_download_timeout_in_seconds=config.startup_timeout_s,
            inference_ami_version=(default_ami(config.instance_type) if config.inference_ami_version == "auto"
                                   else config.inference_ami_version or None))
        endpoint_config = sagemaker.CfnEndpointConfig(self, "EndpointConfig", production_variants=[variant])
        self.endpoint = sagemaker.CfnEndpoint(self, "Endpoint", endpoint_name=config.endpoint_name,
                                              endpoint_config_name=endpoint_config.attr_endpoint_config_name)

        target = autoscaling.CfnScalableTarget(
            self, "ScalableTarget", service_namespace="sagemaker", scalable_dimension=SCALABLE_DIMENSION,
            resource_id=f"endpoint/{config.endpoint_name}/variant/{VARIANT}",
            min_capacity=config.min_instances, max_capacity=config.max_instances)
        target.add_dependency(self.endpoint)
        policy = autoscaling.CfnScalingPolicy(
            self, "ConcurrencyScaling", policy_name=f"{config.endpoint_name}-concurrency",
            policy_type="TargetTrackingScaling", scaling_target_id=target.ref,
            target_tracking_scaling_policy_configuration=autoscaling.CfnScalingPolicy.TargetTrackingScalingPolicyConfigurationProperty(
                target_value=config.target_sessions, scale_in_cooldown=300, scale_out_cooldown=60,
                predefined_metric_specification=autoscaling.CfnScalingPolicy.PredefinedMetricSpecificationProperty(
                    predefined_metric_type=CONCURRENCY_METRIC)))
        policy.add_dependency(target)

        principal = (iam.ArnPrincipal(config.invoke_principal_arn) if config.invoke_principal_arn
                     else iam.AccountRootPrincipal())
        self.invoke_role = iam.Role(self, "InvokeRole", assumed_by=principal,
                                    description=f"May stream speech from SageMaker endpoint {config.endpoint_name}")
        self.invoke_role.add_to_policy(iam.PolicyStatement(
            actions=INVOKE_ACTIONS, resources=[endpoint_arn(self, config.endpoint_name)]))

        cdk.CfnOutput(self, "EndpointName", value=self.endpoint.attr_endpoint_name)
        cdk.CfnOutput(self, "InvokeRoleArn", value=self.invoke_role.role_arn)
        # InService proves only that /ping answered: the deploy is done once this passes.
        cdk.CfnOutput(self, "SmokeTestCommand", value=smoke_command(self.region, config.endpoint_name),
                      description="run from the repository root (Python >= 3.12, pip install 'kokoro-serve[agent]')")
        cdk.Tags.of(self).add(STACK_TAG, config.endpoint_name)


@dataclass(frozen=True)
class AgentConfig:
    endpoint_name: str = "kokoro-tts"
    image_uri: str | None = None  # None: build deploy/sagemaker/Dockerfile.agent (ARM64) as an asset
    dockerfile: str = "deploy/sagemaker/Dockerfile.agent"
    model: str = "bedrock"
    bedrock_model_id: str | None = None  # None: the agent's default (Claude Sonnet 4.6, regional profile)


class AgentStack(cdk.Stack):
    """The AgentCore runtime that speaks through exactly one kokoro-serve endpoint."""

    def __init__(self, scope: Construct, construct_id: str, *, config: AgentConfig, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        from aws_cdk import aws_bedrockagentcore as agentcore

        role = iam.Role(self, "RuntimeRole", assumed_by=iam.ServicePrincipal(
            "bedrock-agentcore.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": self.account}}),
            description=f"kokoro-serve agent; may invoke only SageMaker endpoint {config.endpoint_name}")
        role.add_to_policy(iam.PolicyStatement(
            sid="SpeakThroughOneEndpoint", actions=INVOKE_ACTIONS, resources=[endpoint_arn(self, config.endpoint_name)]))
        role.add_to_policy(iam.PolicyStatement(
            sid="BedrockModels", actions=["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"],
            resources=[f"arn:{self.partition}:bedrock:*::foundation-model/*",
                       self.format_arn(service="bedrock", resource="inference-profile", resource_name="*")]))
        role.add_to_policy(iam.PolicyStatement(
            sid="Logs", actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents",
                                 "logs:DescribeLogStreams", "logs:DescribeLogGroups"],
            resources=[self.format_arn(service="logs", resource="log-group", resource_name="/aws/bedrock-agentcore/runtimes/*",
                                       arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)]))
        role.add_to_policy(iam.PolicyStatement(
            sid="Telemetry", actions=["xray:PutTraceSegments", "xray:PutTelemetryRecords", "cloudwatch:PutMetricData"],
            resources=["*"]))
        role.add_to_policy(iam.PolicyStatement(
            sid="WorkloadIdentity", actions=["bedrock-agentcore:GetWorkloadAccessToken",
                                             "bedrock-agentcore:GetWorkloadAccessTokenForJWT",
                                             "bedrock-agentcore:GetWorkloadAccessTokenForUserId"],
            resources=[self.format_arn(service="bedrock-agentcore", resource="workload-identity-directory",
                                       resource_name="default/*")]))

        if config.image_uri:
            image_uri = config.image_uri
            role.add_to_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))
            role.add_to_policy(iam.PolicyStatement(actions=["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
                                                   resources=["*"]))
        else:
            asset = ecr_assets.DockerImageAsset(
                self, "Image", directory=str(REPO), file=config.dockerfile, platform=ecr_assets.Platform.LINUX_ARM64,
                exclude=CONTEXT_EXCLUDE, ignore_mode=cdk.IgnoreMode.DOCKER)
            asset.repository.grant_pull(role)
            image_uri = asset.image_uri

        extra = {"KOKORO_AGENT_MODEL": config.model}
        if config.bedrock_model_id:
            extra[agent_runtime.BEDROCK_MODEL_ENV] = config.bedrock_model_id
        env = agent_runtime.runtime_environment(config.endpoint_name, self.region, extra)
        self.runtime = agentcore.CfnRuntime(
            self, "Runtime", agent_runtime_name=agent_runtime.runtime_name(config.endpoint_name),
            description=f"kokoro-serve agent speaking through SageMaker endpoint {config.endpoint_name}",
            role_arn=role.role_arn, environment_variables=env, protocol_configuration="HTTP",
            network_configuration=agentcore.CfnRuntime.NetworkConfigurationProperty(network_mode="PUBLIC"),
            agent_runtime_artifact=agentcore.CfnRuntime.AgentRuntimeArtifactProperty(
                container_configuration=agentcore.CfnRuntime.ContainerConfigurationProperty(container_uri=image_uri)))
        self.runtime.node.add_dependency(role)
        cdk.CfnOutput(self, "AgentRuntimeArn", value=self.runtime.attr_agent_runtime_arn)
        cdk.Tags.of(self).add(STACK_TAG, config.endpoint_name)


def build_app(app: cdk.App, env: cdk.Environment | None = None) -> tuple[SpeechStack, AgentStack]:
    """Both stacks from the app's context; the agent stack deploys after the speech stack."""
    speech_config = SpeechConfig.from_context(app)
    speech = SpeechStack(app, "KokoroSpeech", config=speech_config, env=env)
    agent_config = AgentConfig(endpoint_name=speech_config.endpoint_name,
                               image_uri=app.node.try_get_context("agent_image_uri"),
                               model=app.node.try_get_context("agent_model") or "bedrock",
                               bedrock_model_id=app.node.try_get_context("agent_bedrock_model_id"))
    agent = AgentStack(app, "KokoroAgent", config=agent_config, env=env)
    agent.add_dependency(speech)
    return speech, agent
