#!/usr/bin/env python3
"""CDK entry: ``cdk synth`` / ``cdk deploy`` from this directory (see cdk.json), or offline:

    python deploy/sagemaker/cdk/app.py            # writes deploy/sagemaker/cdk/cdk.out

Settings come from context (``cdk deploy -c endpoint_name=kokoro-tts -c image_uri=... ``): every
field of ``SpeechConfig`` (endpoint_name, image_uri, model_data_url, instance_type,
inference_ami_version, min_instances, max_instances, target_sessions, backend, mode,
invoke_principal_arn) plus ``agent_image_uri``, ``agent_model`` and ``agent_bedrock_model_id``. Without ``image_uri`` /
``agent_image_uri`` the images are built from the Dockerfiles as CDK assets (Docker needed at deploy
time, not at synth time). The account/region come from the CLI's environment
(``CDK_DEFAULT_ACCOUNT``/``CDK_DEFAULT_REGION``, read through :class:`deploy.settings.DeploySettings`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root, for `deploy`

import aws_cdk as cdk

from deploy.sagemaker.cdk.stacks import build_app
from deploy.settings import DeploySettings


def main() -> None:
    app = cdk.App()
    settings = DeploySettings.from_env(os.environ)
    account, region = settings.cdk_default_account, settings.cdk_default_region
    env = cdk.Environment(account=account, region=region) if account and region else None
    build_app(app, env)
    app.synth()


if __name__ == "__main__":
    main()
