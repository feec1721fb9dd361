"""boto3 deploy / autoscale / destroy of the SageMaker endpoint, against moto's AWS.

moto's two SageMaker gaps (no ml.g5 instance types, no UpdateEndpoint) are filled in the test
(tests/support/moto_sagemaker.py), never in the code under test. The smoke test is injected
here and records what it saw; the real one runs against a real server in
test_deploy_serve_entry.py.
"""

from __future__ import annotations

import io
import tarfile

import pytest

from deploy.sagemaker import agent_runtime, endpoint, package_model, teardown
from deploy.sagemaker import deploy as sm_deploy
from deploy.sagemaker.endpoint import DeployError, EndpointSpec
from tests.support.moto_sagemaker import REGION, mocked_aws

pytestmark = pytest.mark.cloud

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/kokoro-serve:gpu"


@pytest.fixture
def aws(monkeypatch):
    with mocked_aws(monkeypatch) as clients:
        yield clients


class Smoke:
    """Records each call and what the endpoint looked like at that moment."""

    def __init__(self, clients, fail: str | None = None):
        self.clients, self.fail, self.calls = clients, fail, []

    def __call__(self, name, region):
        desc = self.clients.client("sagemaker").describe_endpoint(EndpointName=name)
        self.calls.append((name, region, desc["EndpointStatus"], desc["EndpointConfigName"]))
        if self.fail:
            raise RuntimeError(self.fail)
        return "bidi smoke OK"


def _spec(clients, **kw) -> EndpointSpec:
    base = dict(name="kokoro-tts", image_uri=IMAGE, role_arn=clients.role,
                environment={"KOKORO_BACKEND": "torch", "KOKORO_MODE": "concurrent"})
    return EndpointSpec(**{**base, **kw})


def _deploy(clients, spec, smoke, **kw):
    return sm_deploy.deploy(clients, spec, smoke=smoke, log=lambda _m: None, poll_s=0, sleep=lambda _s: None, **kw)


def test_deploy_creates_a_g5_endpoint_scales_it_and_smoke_tests_it_in_service(aws):
    smoke = Smoke(aws)
    result = _deploy(aws, _spec(aws), smoke, scaling=sm_deploy.Scaling(1, 3, 6))
    sm = aws.client("sagemaker")
    ep = sm.describe_endpoint(EndpointName="kokoro-tts")
    assert ep["EndpointStatus"] == "InService" and result.action == "created"
    variant = sm.describe_endpoint_config(EndpointConfigName=ep["EndpointConfigName"])["ProductionVariants"][0]
    assert variant["InstanceType"] == "ml.g5.xlarge"
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] == endpoint.DEFAULT_STARTUP_TIMEOUT_S
    assert variant["InferenceAmiVersion"] == endpoint.DEFAULT_GPU_AMI  # g5's default driver is too old
    container = sm.describe_model(ModelName=variant["ModelName"])["PrimaryContainer"]
    assert container["Image"] == IMAGE and container["Environment"]["KOKORO_BACKEND"] == "torch"
    # the smoke test ran against the live, InService endpoint, not merely after a status call
    assert smoke.calls == [("kokoro-tts", REGION, "InService", ep["EndpointConfigName"])]

    aas = aws.client("application-autoscaling")
    target = aas.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
    assert [(t["ResourceId"], t["MinCapacity"], t["MaxCapacity"]) for t in target] == [
        ("endpoint/kokoro-tts/variant/AllTraffic", 1, 3)]
    policy = aas.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"][0]
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert policy["PolicyType"] == "TargetTrackingScaling" and tracking["TargetValue"] == 6.0
    assert tracking["PredefinedMetricSpecification"]["PredefinedMetricType"] == (
        "SageMakerVariantConcurrentRequestsPerModelHighResolution")


def test_deploying_the_same_spec_again_changes_nothing(aws):
    spec = _spec(aws)
    _deploy(aws, spec, Smoke(aws))
    again = _deploy(aws, spec, Smoke(aws))
    assert again.action == "unchanged" and again.pruned == []
    assert len(aws.client("sagemaker").list_endpoint_configs()["EndpointConfigs"]) == 1


def test_a_changed_spec_updates_the_endpoint_then_removes_the_old_config(aws):
    sm = aws.client("sagemaker")
    first = _deploy(aws, _spec(aws), Smoke(aws))
    smoke = Smoke(aws)
    second = _deploy(aws, _spec(aws, instance_type="ml.g5.2xlarge", initial_instance_count=2), smoke)
    assert second.action == "updated" and second.config != first.config
    ep = sm.describe_endpoint(EndpointName="kokoro-tts")
    assert ep["EndpointConfigName"] == second.config and ep["EndpointStatus"] == "InService"
    assert smoke.calls[0][2:] == ("InService", second.config)  # waited through Updating
    assert [c["EndpointConfigName"] for c in sm.list_endpoint_configs()["EndpointConfigs"]] == [second.config]
    assert f"endpoint config {first.config}" in second.pruned
    # the model did not change (same image/env), so it is reused, not duplicated
    assert second.model == first.model
    targets = aws.client("application-autoscaling").describe_scalable_targets(ServiceNamespace="sagemaker")
    assert len(targets["ScalableTargets"]) == 1  # re-registered after the update


def test_a_failed_smoke_test_fails_the_deploy_and_keeps_the_previous_config(aws):
    sm = aws.client("sagemaker")
    first = _deploy(aws, _spec(aws), Smoke(aws))
    with pytest.raises(DeployError, match=r"smoke test.*binary frame"):
        _deploy(aws, _spec(aws, environment={"KOKORO_BACKEND": "onnx"}), Smoke(aws, fail="handler dropped a binary frame"))
    names = {c["EndpointConfigName"] for c in sm.list_endpoint_configs()["EndpointConfigs"]}
    assert first.config in names and len(names) == 2  # roll back with UpdateEndpoint to the first


def test_a_failed_endpoint_is_reported_with_its_reason(aws):
    from moto.sagemaker.models import sagemaker_backends

    _deploy(aws, _spec(aws), Smoke(aws))
    fake = sagemaker_backends["123456789012"][REGION].endpoints["kokoro-tts"]
    fake.endpoint_status, fake.failure_reason = "Failed", "The primary container did not pass the ping health check."
    with pytest.raises(DeployError, match="ping health check"):
        endpoint.wait_in_service(aws.client("sagemaker"), "kokoro-tts", poll_s=0, sleep=lambda _s: None)


def _record_calls(clients, services):
    calls = []
    for service in services:
        clients.client(service).meta.events.register(
            "before-call", lambda model, **_: calls.append(model.name) if model.name.startswith(("Delete", "Deregister")) else None)
    return calls


def _full_deployment(aws, tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    (model_dir / "voices.npz").write_bytes(b"\0" * 64)
    aws.client("s3").create_bucket(Bucket="kokoro-models")
    url = package_model.package_and_upload(model_dir, "s3://kokoro-models/tts/", s3=aws.client("s3"))
    aws.client("ecr").create_repository(repositoryName="kokoro-serve")
    _deploy(aws, _spec(aws, model_data_url=url), Smoke(aws))
    agent_runtime.ensure_runtime(aws.client("bedrock-agentcore-control"), endpoint="kokoro-tts", region=REGION,
                                 image_uri=IMAGE.replace("kokoro-serve:gpu", "kokoro-agent:arm64"), role_arn=aws.role)
    return url


def test_destroy_goes_agent_then_endpoint_then_config_then_model_and_warns_about_what_still_costs(aws, tmp_path):
    url = _full_deployment(aws, tmp_path)
    calls = _record_calls(aws, ["bedrock-agentcore-control", "application-autoscaling", "sagemaker", "s3", "ecr"])
    report = teardown.destroy(aws, "kokoro-tts", poll_s=0, sleep=lambda _s: None)

    order = [calls.index(op) for op in ("DeleteAgentRuntime", "DeregisterScalableTarget", "DeleteEndpoint",
                                        "DeleteEndpointConfig", "DeleteModel")]
    assert order == sorted(order), calls
    assert "DeleteObject" not in calls and "DeleteRepository" not in calls
    sm = aws.client("sagemaker")
    assert sm.list_endpoints()["Endpoints"] == [] and sm.list_endpoint_configs()["EndpointConfigs"] == []
    assert agent_runtime.find_runtimes(aws.client("bedrock-agentcore-control"), "kokoro_tts_agent") == []
    # kept, named, and still there
    warning = report.warning()
    assert url in warning and "ECR repository kokoro-serve" in warning
    aws.client("s3").head_object(Bucket="kokoro-models", Key="tts/model.tar.gz")
    assert aws.client("ecr").describe_repositories()["repositories"]

    # destroying again is harmless, and can still remove what was kept when told where it is
    again = teardown.destroy(aws, "kokoro-tts", delete_model_data=True, delete_ecr_repo=True,
                             model_data_urls=(url,), images=(IMAGE,), poll_s=0, sleep=lambda _s: None)
    assert again.warning() is None
    assert aws.client("s3").list_objects_v2(Bucket="kokoro-models").get("KeyCount") == 0
    assert aws.client("ecr").describe_repositories()["repositories"] == []


def test_destroy_with_flags_removes_the_model_cache_and_the_ecr_repo(aws, tmp_path):
    _full_deployment(aws, tmp_path)
    report = teardown.destroy(aws, "kokoro-tts", delete_model_data=True, delete_ecr_repo=True,
                              poll_s=0, sleep=lambda _s: None)
    assert report.warning() is None
    assert "S3 object s3://kokoro-models/tts/model.tar.gz" in report.deleted
    assert "ECR repository kokoro-serve" in report.deleted
    assert aws.client("ecr").describe_repositories()["repositories"] == []


def test_cli_packages_the_model_dir_deploys_and_destroys(aws, tmp_path, capsys):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "kokoro-v1.0.int8.onnx").write_bytes(b"onnx" * 100)
    (model_dir / ".cache").mkdir()
    (model_dir / ".cache" / "junk").write_text("x")
    aws.client("s3").create_bucket(Bucket="bkt")
    smoke = Smoke(aws)
    rc = sm_deploy.main(["deploy", "--name", "tts-cli", "--image", IMAGE, "--role", aws.role,
                         "--model-dir", str(model_dir), "--model-s3-uri", "s3://bkt/k/model.tar.gz",
                         "--max-instances", "2"], clients=aws, smoke=smoke)
    assert rc == 0 and smoke.calls
    body = aws.client("s3").get_object(Bucket="bkt", Key="k/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert tar.getnames() == ["kokoro-v1.0.int8.onnx"]  # at the root, hidden files left out
    model = aws.client("sagemaker").list_models()["Models"][0]["ModelName"]
    container = aws.client("sagemaker").describe_model(ModelName=model)["PrimaryContainer"]
    assert container["ModelDataUrl"] == "s3://bkt/k/model.tar.gz"

    assert sm_deploy.main(["destroy", "--name", "tts-cli"], clients=aws) == 0
    err = capsys.readouterr().err
    assert "s3://bkt/k/model.tar.gz" in err and "ECR repository kokoro-serve" in err and "--delete-ecr-repo" in err


def test_cpu_instance_types_get_no_gpu_ami(aws):
    args = sm_deploy._parser().parse_args(["deploy", "--name", "n", "--image", IMAGE, "--role", aws.role,
                                           "--instance-type", "ml.c6i.xlarge", "--backend", "onnx"])
    spec = sm_deploy.spec_from_args(args, None)
    assert spec.inference_ami_version is None and spec.environment["KOKORO_BACKEND"] == "onnx"


def test_model_archive_is_reproducible_and_upload_is_skipped_when_unchanged(aws, tmp_path):
    model_dir = tmp_path / "m"
    (model_dir / "sub").mkdir(parents=True)
    (model_dir / "config.json").write_text('{"a": 1}')
    (model_dir / "sub" / "af_heart.pt").write_bytes(b"\1" * 10)
    a, b = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    assert package_model.build_tarball(model_dir, a) == package_model.build_tarball(model_dir, b)
    with tarfile.open(a) as tar:
        assert sorted(tar.getnames()) == ["config.json", "sub/af_heart.pt"]
    s3 = aws.client("s3")
    s3.create_bucket(Bucket="mdl")
    assert package_model.upload(a, "s3://mdl/x/model.tar.gz", s3) == ("s3://mdl/x/model.tar.gz", True)
    assert package_model.upload(b, "s3://mdl/x/model.tar.gz", s3) == ("s3://mdl/x/model.tar.gz", False)
    with pytest.raises(ValueError, match="no model files"):
        package_model.build_tarball(tmp_path / "empty-does-not-exist", tmp_path / "c.tar.gz")


def test_up_ends_with_the_smoke_test_on_the_in_service_endpoint_and_fails_when_it_fails(aws, capsys):
    smoke = Smoke(aws)
    assert sm_deploy.main(["up", "--name", "tts-up", "--image", IMAGE], clients=aws, smoke=smoke) == 0
    config = aws.client("sagemaker").describe_endpoint(EndpointName="tts-up")["EndpointConfigName"]
    assert smoke.calls == [("tts-up", REGION, "InService", config)]
    assert "bidi smoke OK" in capsys.readouterr().out

    failing = Smoke(aws, fail="no synthesis_start")
    assert sm_deploy.main(["up", "--name", "tts-up", "--image", IMAGE], clients=aws, smoke=failing) == 1
    assert failing.calls and "failed the bidirectional smoke test: no synthesis_start" in capsys.readouterr().err
