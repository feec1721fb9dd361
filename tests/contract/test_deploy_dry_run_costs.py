"""`python -m deploy.sagemaker.deploy up --dry-run --name kokoro-tts` as an operator reads it before
spending: every resource with its instance type, count range and hourly estimate (from the one dated
price table), the image build and push, no parameter cut off, and the dry-run mark on every line."""

from __future__ import annotations

import json
import re

import pytest

from deploy.sagemaker import costs, deploy
from tests.support.live import REPO

pytestmark = pytest.mark.cloud


@pytest.fixture
def dry_up(monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("a dry run made a real AWS client")

    monkeypatch.setattr(deploy, "AwsClients", refuse)

    def run(*extra: str) -> list[str]:
        assert deploy.main(["up", "--dry-run", "--name", "kokoro-tts", *extra]) == 0
        captured = capsys.readouterr()
        return (captured.out + captured.err).splitlines()

    return run


def test_every_line_carries_the_dry_run_mark(dry_up):
    lines = dry_up("--with-agent")
    assert lines and [line for line in lines if not line.lstrip().startswith("[dry run]")] == []
    assert "[dry run] endpoint kokoro-tts: InService" in lines


def test_the_endpoint_is_listed_with_its_instance_type_count_range_and_hourly_cost(dry_up):
    lines = dry_up("--max-instances", "3")
    assert ("[dry run]   endpoint kokoro-tts: ml.g5.xlarge x 1-3 instances (autoscaling): $1.41-$4.22/h "
            "(ml.g5.xlarge at $1.408/h), billed from creation until it is deleted, idle or not") in lines
    header = next(line for line in lines if "what the stack keeps, and what it bills" in line)
    assert costs.AS_OF in header and "https://aws.amazon.com/sagemaker/ai/pricing/" in header
    assert "[dry run]   ECR repository kokoro-tts: $0.10 per GB-month of images" in lines
    assert "[dry run]   IAM role kokoro-tts-sagemaker: no charge" in lines


def test_a_cpu_type_and_a_type_without_a_price(dry_up):
    assert any("endpoint kokoro-tts: ml.c6i.xlarge x 2-2 instances (autoscaling): $0.41/h" in line
               for line in dry_up("--instance-type", "ml.c6i.xlarge", "--min-instances", "2", "--max-instances", "2"))
    unknown = dry_up("--instance-type", "ml.inf2.xlarge", "--no-autoscaling")
    assert any("endpoint kokoro-tts: ml.inf2.xlarge x 1 instance(s), fixed: no price in the table for "
               "ml.inf2.xlarge: see https://aws.amazon.com/sagemaker/ai/pricing/" in line for line in unknown)


def test_the_image_build_and_push_is_part_of_the_plan(dry_up):
    lines = dry_up("--with-agent")
    builds = [line for line in lines if "$ docker buildx build" in line]
    assert [re.search(r"-f (\S+)", line).group(1) for line in builds] == [
        "deploy/sagemaker/Dockerfile", "deploy/sagemaker/Dockerfile.agent"]
    assert all("--push ." in line for line in builds)
    assert "and 2 image build(s) and push(es); nothing was called" in lines[-1]
    assert not any("$ docker" in line for line in dry_up("--image", "123.dkr.ecr.us-east-1.amazonaws.com/x:1"))


def test_no_parameter_is_cut_off(dry_up):
    lines = dry_up()
    assert not [line for line in lines if line.endswith("...") or '..."' in line]
    config = next(line for line in lines if "ProductionVariants=" in line)
    variants = json.loads(config.split("ProductionVariants=", 1)[1])
    assert (variants[0]["InstanceType"], variants[0]["InitialInstanceCount"]) == ("ml.g5.xlarge", 1)
    policy = next(line for line in lines if "PolicyDocument=" in line and "AssumeRole" not in line)
    assert json.loads(policy.split("PolicyDocument=", 1)[1])["Statement"]


def test_the_docs_price_table_is_the_dry_run_s():
    text = (REPO / "docs" / "deploy.md").read_text()
    assert f"recorded {costs.AS_OF} from https://aws.amazon.com/sagemaker/ai/pricing/" in text
    for instance_type, price in costs.PRICES.items():
        assert re.search(rf"\| {re.escape(instance_type)}( \([^)]*\))? \| {price:g} \|", text), instance_type
