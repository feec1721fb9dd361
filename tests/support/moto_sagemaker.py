"""moto's AWS, with the two SageMaker gaps the deploy tests need filled (in tests, not in the code):

* moto's endpoint-config validation lists no ml.g5/ml.g6 instance types (SageMaker accepts them);
* moto has no ``UpdateEndpoint``. The stand-in does what SageMaker does: the endpoint reads
  ``Updating`` on the next describe, then ``InService`` on the new config.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

REGION = "us-east-1"
ACCOUNT = "123456789012"


def patch_moto(monkeypatch) -> None:
    from moto.sagemaker import models as sm_models
    from moto.sagemaker import responses as sm_responses

    original = sm_models.FakeEndpointConfig.validate_instance_type

    def validate_instance_type(self, instance_type):
        if instance_type.startswith(("ml.g5.", "ml.g6.")):
            return None
        return original(self, instance_type)

    monkeypatch.setattr(sm_models.FakeEndpointConfig, "validate_instance_type", validate_instance_type)

    def update_endpoint(self, endpoint_name, endpoint_config_name):
        ep = self.endpoints[endpoint_name]
        config = self.describe_endpoint_config(endpoint_config_name)
        ep.endpoint_config_name = endpoint_config_name
        ep.production_variants = ep._process_production_variants(config["ProductionVariants"])
        ep.endpoint_status = "Updating"
        ep._describes_until_in_service = 1
        return ep

    original_describe = sm_models.SageMakerModelBackend.describe_endpoint

    def describe_endpoint(self, endpoint_name):
        ep = self.endpoints.get(endpoint_name)
        out = original_describe(self, endpoint_name)
        if ep is not None and getattr(ep, "_describes_until_in_service", 0):
            ep._describes_until_in_service -= 1
            ep.endpoint_status = "InService"
        return out

    def update_endpoint_response(self):
        ep = self.sagemaker_backend.update_endpoint(self._get_param("EndpointName"),
                                                    self._get_param("EndpointConfigName"))
        return sm_responses.ActionResult({"EndpointArn": ep.arn})

    monkeypatch.setattr(sm_models.SageMakerModelBackend, "update_endpoint", update_endpoint, raising=False)
    monkeypatch.setattr(sm_models.SageMakerModelBackend, "describe_endpoint", describe_endpoint)
    monkeypatch.setattr(sm_responses.SageMakerResponse, "update_endpoint", update_endpoint_response, raising=False)


@contextlib.contextmanager
def mocked_aws(monkeypatch) -> Iterator:
    """moto's AWS with fake credentials; yields ``AwsClients`` with ``.role`` (an IAM role ARN)."""
    import boto3
    import moto

    from deploy.sagemaker.deploy import AwsClients

    for var, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}.items():
        monkeypatch.setenv(var, value)
    patch_moto(monkeypatch)
    with moto.mock_aws():
        clients = AwsClients(session=boto3.session.Session(region_name=REGION))
        role = clients.client("iam").create_role(RoleName="kokoro-sm", AssumeRolePolicyDocument="{}")
        clients.role = role["Role"]["Arn"]
        yield clients
