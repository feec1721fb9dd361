"""The one settings mechanism: every class reads the environment it is given and nothing else."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent.settings import AgentSettings
from backends.config import BackendConfig
from backends.envsettings import EnvSettings
from deploy.runpod.settings import RunPodSettings
from deploy.sagemaker.settings import ServeSettings
from deploy.settings import DeploySettings
from server.settings import Settings
from settings_table import SETTINGS_CLASSES


def test_every_settings_class_of_the_project_is_in_the_table():
    def subclasses(cls: type) -> set[type]:
        return {sub for direct in cls.__subclasses__() for sub in {direct, *subclasses(direct)}}

    project = {c for c in subclasses(EnvSettings) if c.__module__.split(".")[0] in ("backends", "server", "agent",
                                                                                     "deploy")}
    assert project - {BackendConfig} == set(SETTINGS_CLASSES)  # the backend's rows come with the server's


@pytest.mark.parametrize("cls", SETTINGS_CLASSES)
def test_the_constructor_reads_no_environment(cls, monkeypatch):
    for name in cls.model_fields:
        for env in cls.env_names(name):
            monkeypatch.setenv(env, "polluted")
    assert cls() == cls.from_env({})


def test_overrides_win_over_the_environment_and_empty_is_unset():
    env = {"KOKORO_AGENT_PORT": "9001", "KOKORO_AGENT_VOICE": "", "KOKORO_AGENT_TOKENS_PER_SECOND": "7"}
    s = AgentSettings.from_env(env, port=9100)
    assert (s.port, s.voice, s.tokens_per_second) == (9100, None, 7.0)


def test_the_first_alias_set_wins():
    assert AgentSettings.from_env({"AWS_REGION": "us-east-2"}).region == "us-east-2"
    assert AgentSettings.from_env({"AWS_REGION": "us-east-2", "KOKORO_AGENT_REGION": "eu-west-1"}).region == "eu-west-1"
    assert AgentSettings.from_env({"KOKORO_AGENT_REPLY": "Hi."}).scripted_reply == "Hi."


def test_a_bad_value_names_its_field():
    with pytest.raises(ValidationError, match="max_queue"):
        Settings.from_env({"KOKORO_MAX_QUEUE": "many"})
    with pytest.raises(ValidationError, match="allow_no_auth"):
        RunPodSettings.from_env({"KOKORO_ALLOW_NO_AUTH": "perhaps"})


def test_the_deploy_tools_read_their_variables_through_their_settings():
    from deploy.runpod import start as rp_start
    from deploy.sagemaker import deploy as sm_deploy

    s = DeploySettings.from_env({"AWS_REGION": "eu-west-3", "CDK_DEFAULT_ACCOUNT": "123456789012",
                                 "RUNPOD_API_KEY": "rp-key", "AWS_DEFAULT_REGION": "us-west-1"})
    assert (s.aws_region, s.cdk_default_account, s.cdk_default_region, s.runpod_api_key) == (
        "eu-west-3", "123456789012", None, "rp-key")
    assert sm_deploy._parser(s).parse_args(["smoke", "--name", "n"]).region == "eu-west-3"
    assert DeploySettings.from_env({"AWS_DEFAULT_REGION": "us-west-1"}).aws_region == "us-west-1"
    assert sm_deploy._parser(DeploySettings()).parse_args(["smoke", "--name", "n"]).region is None  # the profile's
    assert rp_start.mode_of({"RUNPOD_WEBHOOK_GET_JOB": "https://jobs"}) == "serverless"
    assert rp_start.mode_of({"RUNPOD_WEBHOOK_GET_JOB": ""}) == "pod"
    assert ServeSettings.from_env({"KOKORO_SM_MODEL_DIR": "/m"}).sm_model_dir.as_posix() == "/m"
