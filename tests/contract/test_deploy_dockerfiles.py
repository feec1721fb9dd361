"""The deploy Dockerfiles, parsed (no Docker engine here), and the rules they must keep."""

from __future__ import annotations

import subprocess
import sys

import pytest

from deploy import dockerfiles
from deploy.dockerfiles import BIDI_LABEL, Dockerfile, check

REPO = dockerfiles.REPO


@pytest.mark.parametrize("rel", sorted(dockerfiles.IMAGES))
def test_every_image_keeps_the_rules(rel):
    assert check(REPO / rel, **dockerfiles.IMAGES[rel]) == []


def test_gpu_images_pin_a_cuda_torch_at_or_above_2_10():
    for rel in ("deploy/sagemaker/Dockerfile", "deploy/runpod/Dockerfile"):
        df = Dockerfile.parse(REPO / rel)
        (pin,) = df.torch_pins()
        assert tuple(int(x) for x in pin.split(".")[:2]) >= (2, 10) and pin != "2.6.0"
        assert df.expand("${CUDA_IMAGE}").startswith("nvidia/cuda:")


def test_sagemaker_images_carry_the_bidi_label_expose_8080_and_serve():
    for rel in ("deploy/sagemaker/Dockerfile", "deploy/sagemaker/Dockerfile.cpu"):
        df = Dockerfile.parse(REPO / rel)
        assert df.labels[BIDI_LABEL] == "true"
        assert df.all("CMD")[-1].words() == ["serve"] and not df.all("ENTRYPOINT")
    assert Dockerfile.parse(REPO / "deploy/sagemaker/Dockerfile").env["KOKORO_BACKEND"] == "torch"
    assert Dockerfile.parse(REPO / "deploy/sagemaker/Dockerfile.cpu").env["KOKORO_BACKEND"] == "onnx"


def test_assets_are_built_into_the_image_not_fetched_at_start():
    df = Dockerfile.parse(REPO / "deploy/sagemaker/Dockerfile")
    assert any(dockerfiles.ASSETS_SCRIPT in ins.value for ins in df.all("RUN"))
    assert df.env["HF_HUB_OFFLINE"] == "1" and df.env["TRANSFORMERS_OFFLINE"] == "1"


@pytest.mark.parametrize("rel", [rel for rel, rules in sorted(dockerfiles.IMAGES.items()) if rules.get("model")])
def test_model_images_fetch_the_official_assets_by_default(rel):
    df = Dockerfile.parse(REPO / rel)
    assert df.args["MODEL_SOURCE"] == "official"


@pytest.fixture
def image_assets(tmp_path):
    """deploy/image_assets.sh with a stand-in `kokoro-serve` that records its arguments."""
    stub = tmp_path / "bin" / "kokoro-serve"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\necho "ARGS: $*"\n')
    stub.chmod(0o755)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", str(REPO / dockerfiles.ASSETS_SCRIPT), *args], capture_output=True, text=True,
                              env={"PATH": f"{stub.parent}:/usr/bin:/bin"})
    return run


@pytest.mark.subprocess
@pytest.mark.parametrize(("source", "expected"), [
    ("official", "assets --official --torch"),
    ("offline", "assets --torch"),
    ("s3://bucket/kokoro/", "assets --source s3://bucket/kokoro/ --torch"),
    ("https://mirror.example/kokoro", "assets --source https://mirror.example/kokoro --torch"),
])
def test_the_image_assets_script_maps_model_source_to_the_assets_command(image_assets, source, expected):
    out = image_assets(source, "--torch")
    assert out.returncode == 0, out.stderr
    assert f"ARGS: {expected}" in out.stdout.splitlines()


@pytest.mark.subprocess
def test_the_image_assets_script_refuses_an_unknown_model_source(image_assets):
    out = image_assets("offical")
    assert out.returncode == 2 and "MODEL_SOURCE must be official, offline" in out.stderr
    assert "ARGS" not in out.stdout


def test_the_checker_flags_an_image_that_does_not_default_to_the_official_assets(tmp_path):
    f = tmp_path / "Dockerfile"
    f.write_text("FROM python:3.12-slim\nARG MODEL_SOURCE=\nENV HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1\n"
                 "RUN kokoro-serve assets\n")
    problems = "\n".join(check(f, torch=True, sagemaker=False, model=True))
    assert "MODEL_SOURCE must default to official" in problems and dockerfiles.ASSETS_SCRIPT in problems


# The checker itself must catch what it is there to catch.
BAD = """\
FROM python:latest
ARG TORCH_VERSION=2.6.0
RUN pip install "torch==${TORCH_VERSION}" \\
    && python -c "from huggingface_hub import hf_hub_download; hf_hub_download('hexgrad/Kokoro-82M', 'x')"
COPY no/such/dir /app
CMD ["python", "-m", "server"]
"""


def test_the_checker_flags_a_vulnerable_torch_a_hub_download_and_a_missing_label(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text(BAD)
    problems = "\n".join(check(bad, torch=True, sagemaker=True))
    for expected in ("torch 2.6.0 is vulnerable", "model-hub download", "HF_HUB_OFFLINE=1 is not set",
                     "not pinned to a tag", "COPY source no/such/dir", BIDI_LABEL, "EXPOSE 8080",
                     "docker run IMAGE serve"):
        assert expected in problems, expected


def test_the_checker_flags_torch_in_an_image_that_must_not_carry_it_and_unpinned_torch(tmp_path):
    f = tmp_path / "Dockerfile"
    f.write_text('FROM python:3.12-slim\nENV HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1\nRUN pip install torch\n')
    assert any("must not carry" in p for p in check(f, torch=False, sagemaker=False))
    assert any("unpinned torch" in p for p in check(f, torch=True, sagemaker=False))


@pytest.mark.subprocess
def test_deploy_imports_nothing_heavy():
    code = ("import sys; import deploy.sagemaker.deploy, deploy.sagemaker.teardown, deploy.sagemaker.package_model, "
            "deploy.runpod.deploy, deploy.runpod.handler, deploy.runpod.start, deploy.smoke, deploy.dockerfiles; "
            "heavy = [m for m in ('torch', 'onnxruntime', 'numpy', 'boto3', 'botocore', 'runpod', 'aws_cdk', "
            "'websockets', 'backends', 'server', 'agent') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"
