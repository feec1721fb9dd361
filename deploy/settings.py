"""The deploy tools' own variables: the region, the CDK's target account, the RunPod key.

:class:`DeploySettings` is what ``python -m deploy.sagemaker.deploy``, the CDK app
(``deploy/sagemaker/cdk/app.py``) and ``python -m deploy.runpod.deploy`` read from the operator's
environment, each building it once with ``DeploySettings.from_env(os.environ)`` at its entry point;
the table in docs/settings.md lists them.

What is left to the SDKs, which read it themselves: the AWS credentials and profile
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` ...) — boto3
resolves them when a session is made, as every AWS tool does, and the project never handles a
credential itself; and ``RUNPOD_API_BASE_URL``, which only the ``runpod`` SDK reads. The region is
declared here although boto3 reads ``AWS_DEFAULT_REGION`` too: boto3 does not read ``AWS_REGION``
(what most AWS tools and these docs set), and the dry run (``--dry-run``) makes no boto3 session.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from backends.envsettings import EnvSettings


class DeploySettings(EnvSettings):
    """The deploy tools' environment. Immutable once built."""

    model_config = SettingsConfigDict(env_prefix="")

    aws_region: str | None = Field(
        None, validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION"),
        description="Deploy tools: the AWS region (`--region` wins; unset: the AWS profile's).",
    )
    cdk_default_account: str | None = Field(
        None, description="CDK app: the target account, set by the `cdk` CLI (unset: an environment-agnostic stack)."
    )
    cdk_default_region: str | None = Field(
        None, description="CDK app: the target region, set by the `cdk` CLI (unset: an environment-agnostic stack)."
    )
    runpod_api_key: str | None = Field(
        None, description="RunPod deploy tool: the account's API key (not needed with `--dry-run`)."
    )
