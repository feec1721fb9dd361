"""The deploy tools' own variables: the region, the CDK's target account, the RunPod key.

:class:`DeploySettings` is what ``python -m deploy.sagemaker.deploy``, the CDK app
(``deploy/sagemaker/cdk/app.py``) and ``python -m deploy.runpod.deploy`` read from the operator's
environment, each building it once with ``DeploySettings.from_env(os.environ)`` at its entry point;
the table in docs/settings.md lists them.

What is left to the SDKs, which read it themselves: the AWS credentials and profile
(``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE`` ...) and ``AWS_DEFAULT_REGION`` — boto3 resolves them when a
session is made without them, as every AWS tool does, so the project passes none of them on; and
``RUNPOD_API_BASE_URL``, which only the ``runpod`` SDK reads. ``AWS_REGION`` is declared here
because boto3 does not read it for a client's region, yet it is what most AWS tools and these docs
set.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from backends.envsettings import EnvSettings


class DeploySettings(EnvSettings):
    """The deploy tools' environment. Immutable once built."""

    model_config = SettingsConfigDict(env_prefix="")

    aws_region: str | None = Field(
        None,
        description="Deploy tools: the AWS region (`--region` wins; unset: boto3's own `AWS_DEFAULT_REGION` or "
        "profile).",
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
