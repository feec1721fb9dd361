"""`python -m deploy.sagemaker.deploy ... --dry-run`: the real deploy code against a recording stand-in
account, global options anywhere on the command line, and the operator's IAM list in docs/deploy.md
checked against the calls the dry runs plan."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from deploy.sagemaker import deploy
from deploy.sagemaker.dry_run import IMPLIED_ACTIONS, DryRunClients, iam_actions
from tests.support.live import REPO

pytestmark = pytest.mark.cloud


@pytest.fixture
def no_aws(monkeypatch):
    """A dry run must not make a boto3 client (or read credentials)."""
    def refuse(*args, **kwargs):
        raise AssertionError("a dry run made a real AWS client")

    monkeypatch.setattr(deploy, "AwsClients", refuse)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "refused")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "refused")


def test_up_dry_run_prints_the_planned_calls_and_calls_nothing(no_aws, capsys):
    assert deploy.main(["up", "--name", "kokoro-tts", "--with-agent", "--dry-run", "--region", "eu-west-1"]) == 0
    out = capsys.readouterr().out
    planned = [line.split("] ", 1)[1] for line in out.splitlines() if line.startswith("  [dry run]")]
    changes = [line[2:].split()[:2] for line in planned if line.startswith("*")]
    assert changes == [
        ["ecr", "CreateRepository"], ["iam", "CreateRole"], ["iam", "PutRolePolicy"],
        ["sagemaker", "CreateModel"], ["sagemaker", "CreateEndpointConfig"], ["sagemaker", "CreateEndpoint"],
        ["application-autoscaling", "RegisterScalableTarget"], ["application-autoscaling", "PutScalingPolicy"],
        ["iam", "CreateRole"], ["iam", "PutRolePolicy"], ["bedrock-agentcore-control", "CreateAgentRuntime"],
    ]
    assert any("InvokeEndpointWithBidirectionalStream EndpointName=kokoro-tts" in line for line in planned)
    assert "RoleName=kokoro-tts-sagemaker" in out and ".dkr.ecr.eu-west-1.amazonaws.com/kokoro-tts" in out
    assert "nothing was called" in out.splitlines()[-1]


@pytest.mark.parametrize("argv", [
    ["--region", "eu-west-1", "--stack", "tts", "--dry-run", "down", "--all"],
    ["down", "--all", "--region", "eu-west-1", "--name", "tts", "--dry-run"],
    ["--dry-run", "down", "--stack", "tts", "--region", "eu-west-1", "--all"],
    ["--region", "us-west-2", "down", "--name", "tts", "--all", "--region", "eu-west-1", "--dry-run"],
])
def test_global_options_go_before_or_after_the_subcommand(argv):
    args = deploy._parser().parse_args(argv)
    assert (args.command, args.region, args.name, args.dry_run, args.all) == ("down", "eu-west-1", "tts", True, True)


def test_a_region_before_the_subcommand_is_not_lost(monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    args = deploy._parser().parse_args(["--region", "ap-south-1", "smoke", "--name", "tts"])
    assert (args.region, args.name, args.dry_run) == ("ap-south-1", "tts", False)


def test_a_command_without_a_name_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        deploy.main(["up", "--dry-run"])
    assert exc.value.code == 2 and "--name (or --stack) is required" in capsys.readouterr().err


def test_an_operation_the_stand_in_does_not_know_is_an_error():
    with pytest.raises(NotImplementedError, match="IAM list"):
        DryRunClients(log=lambda _m: None).client("sagemaker").create_cluster(ClusterName="x")


def _documented_actions() -> set[str]:
    text = (REPO / "docs" / "deploy.md").read_text()
    section = text.split("## The operator's IAM permissions", 1)[1]
    block = re.search(r"```json\n(.*?)\n```", section, re.S).group(1)
    return {action for statement in json.loads(block)["Statement"] for action in statement["Action"]}


def test_the_iam_list_in_the_docs_covers_every_call_the_deploy_commands_make(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    clients = DryRunClients("eu-west-1", log=lambda _m: None)
    data = ["--model-dir", str(model_dir), "--model-s3-uri", "s3://bucket/kokoro/"]
    runs = [
        ["up", "--name", "s1", "--with-agent", *data],
        ["up", "--name", "s1", "--with-agent", *data],  # again: the paths that find the stack in place
        ["deploy", "--name", "s1", "--image", "img", "--role", "arn:aws:iam::1:role/r", "--instance-count", "2"],
        ["scale", "--name", "s1", "--max-instances", "6"],
        ["agent", "--name", "s1", "--image", "img2", "--role", "arn:aws:iam::1:role/r"],
        ["smoke", "--name", "s1"],
        ["down", "--name", "s1", "--all"],
        ["up", "--name", "s2"],
        ["destroy", "--name", "s2", "--delete-model-data", "--delete-ecr-repo"],
    ]
    for argv in runs:
        with contextlib.redirect_stdout(io.StringIO()):
            assert deploy.main(argv, clients=clients, smoke=clients.smoke) == 0, argv
    planned = iam_actions(clients.calls)
    assert {"sagemaker:DeleteEndpoint", "iam:DeleteRole", "logs:DeleteLogGroup", "s3:PutObject"} <= planned
    documented = _documented_actions()
    assert planned - documented == set(), "docs/deploy.md lacks these"
    assert documented - planned - set(IMPLIED_ACTIONS) == set(), "docs/deploy.md lists actions nothing needs"
