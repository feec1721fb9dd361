"""The stack's ECR repository and the images in it: found, built and pushed, or the commands printed.

One repository per stack holds the endpoint image (``gpu`` or ``cpu`` tag, x86-64) and the agent image
(``agent-arm64``: AgentCore runs ARM64 only). An image already pushed is used by digest, so a rebuilt
image makes a new SageMaker model while an unchanged one changes nothing. With a Docker engine at hand
the image is built with ``docker buildx`` and pushed; without one, :func:`resolve_image` prints the
exact commands and returns None. ``--provenance=false`` keeps the pushed manifest a plain image
manifest: SageMaker rejects the image index that buildx writes by default.

Blocks the calling thread (docker runs as a subprocess); boto3 clients are passed in.
"""

from __future__ import annotations

import base64
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Build:
    dockerfile: str
    platform: str
    tag: str


GPU = Build("deploy/sagemaker/Dockerfile", "linux/amd64", "gpu")
CPU = Build("deploy/sagemaker/Dockerfile.cpu", "linux/amd64", "cpu")
AGENT = Build("deploy/sagemaker/Dockerfile.agent", "linux/arm64", "agent-arm64")


def repository_name(stack: str) -> str:
    """ECR names are lower case."""
    return stack.lower()


def ensure_repository(ecr: Any, name: str, tags: dict[str, str]) -> tuple[str, str]:
    """The repository's URI, creating it (tagged, scanned on push) or adding missing ``tags``.
    Returns ``(uri, "created" | "updated" | "unchanged")``."""
    try:
        repo = ecr.describe_repositories(repositoryNames=[name])["repositories"][0]
    except ecr.exceptions.RepositoryNotFoundException:
        repo = ecr.create_repository(repositoryName=name, imageScanningConfiguration={"scanOnPush": True},
                                     tags=[{"Key": k, "Value": v} for k, v in tags.items()])["repository"]
        return repo["repositoryUri"], "created"
    have = repository_tags(ecr, name)
    if all(have.get(k) == v for k, v in tags.items()):
        return repo["repositoryUri"], "unchanged"
    ecr.tag_resource(resourceArn=repo["repositoryArn"], tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    return repo["repositoryUri"], "updated"


def repository_tags(ecr: Any, name: str) -> dict[str, str]:
    """The repository's tags; empty when it does not exist."""
    try:
        arn = ecr.describe_repositories(repositoryNames=[name])["repositories"][0]["repositoryArn"]
    except ecr.exceptions.RepositoryNotFoundException:
        return {}
    return {t["Key"]: t["Value"] for t in ecr.list_tags_for_resource(resourceArn=arn)["tags"]}


def repository_uri(ecr: Any, name: str) -> str | None:
    try:
        return ecr.describe_repositories(repositoryNames=[name])["repositories"][0]["repositoryUri"]
    except ecr.exceptions.RepositoryNotFoundException:
        return None


def pushed_image(ecr: Any, repo_uri: str, tag: str) -> str | None:
    """``repo@sha256:…`` of the image tagged ``tag``, or None when there is none."""
    name = repo_uri.split("/", 1)[1]
    try:
        found = ecr.describe_images(repositoryName=name, imageIds=[{"imageTag": tag}])["imageDetails"]
    except (ecr.exceptions.ImageNotFoundException, ecr.exceptions.RepositoryNotFoundException):
        return None
    return f"{repo_uri}@{found[0]['imageDigest']}" if found else None


def build_commands(repo_uri: str, region: str, build: Build) -> list[str]:
    """The shell commands that build ``build`` and push it to ``repo_uri:<tag>`` (run from the repo root)."""
    registry = repo_uri.split("/", 1)[0]
    return [
        f"aws ecr get-login-password --region {region} | docker login --username AWS --password-stdin {registry}",
        f"docker buildx build --platform {build.platform} --provenance=false -f {build.dockerfile} "
        f"-t {repo_uri}:{build.tag} --push .",
    ]


def docker_available() -> bool:
    """A docker CLI on PATH whose engine answers."""
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        return subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def build_and_push(ecr: Any, repo_uri: str, build: Build, log: Callable[[str], None]) -> None:
    """Log docker in to the registry with an ECR token, then build and push (raises on failure)."""
    auth = ecr.get_authorization_token()["authorizationData"][0]
    user, _, password = base64.b64decode(auth["authorizationToken"]).decode().partition(":")
    registry = repo_uri.split("/", 1)[0]
    subprocess.run(["docker", "login", "--username", user, "--password-stdin", registry],
                   input=password.encode(), check=True, capture_output=True)
    command = shlex.split(build_commands(repo_uri, "", build)[1])
    log("$ " + shlex.join(command))
    subprocess.run(command, cwd=REPO_ROOT, check=True)


#: Builds and pushes an image: ``(ecr, repo_uri, build, log)`` (:func:`build_and_push`, or a dry run's plan).
Builder = Callable[[Any, str, Build, Callable[[str], None]], None]


def resolve_image(ecr: Any, repo_uri: str, region: str, build: Build, *, given: str | None,
                  log: Callable[[str], None], builder: Builder | None = None) -> str | None:
    """The image to run: ``given``, else the one pushed under ``build.tag``, else one built now with
    Docker (``builder`` instead where given). Without Docker, log the commands to run and return None."""
    if given:
        return given
    found = pushed_image(ecr, repo_uri, build.tag)
    if found:
        log(f"image {found}: exists")
        return found
    if builder is not None:
        builder(ecr, repo_uri, build, log)
        return pushed_image(ecr, repo_uri, build.tag)
    if docker_available():
        build_and_push(ecr, repo_uri, build, log)
        return pushed_image(ecr, repo_uri, build.tag)
    log(f"no Docker engine here and no {build.tag} image in {repo_uri}; build and push it "
        f"({build.platform}) from the repository root:")
    for command in build_commands(repo_uri, region, build):
        log(f"    {command}")
    return None
