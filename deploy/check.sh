#!/usr/bin/env bash
# Every offline deploy check in one command (`make deploy-check`). Needs no AWS account, RunPod
# account or Docker engine: each part runs against a local stand-in (see tests/contract/test_deploy_*).
#
#   bash deploy/check.sh            everything, including the deploy test suites
#   bash deploy/check.sh --static   everything but pytest and the CDK synth (for `make test`, which runs
#                                   them: tests/contract/test_deploy_cdk.py synthesises both variants
#                                   with the CloudFormation rules as errors)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 JSII_DEPRECATED=quiet HF_HUB_OFFLINE=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== ruff (deploy)"
"$PY" -m ruff check deploy deploy/sagemaker/serve tests/support tests/contract/test_deploy_*.py

echo "== Dockerfiles: torch >= 2.10 pinned, no model hub at run time, SageMaker label/port/serve, COPY sources"
"$PY" -m deploy.dockerfiles

echo "== entry points compile and import nothing heavy"
"$PY" -m py_compile deploy/sagemaker/serve deploy/runpod/handler.py deploy/runpod/start.py
"$PY" -c "import deploy.sagemaker.deploy, deploy.runpod.deploy, deploy.smoke, sys; \
heavy = [m for m in ('torch', 'boto3', 'runpod', 'aws_cdk', 'numpy') if m in sys.modules]; \
assert not heavy, heavy"

if [[ "${1:-}" == "--static" ]]; then
    # the suite synthesises both variants, rules as errors, and asserts the same
    # (tests/contract/test_deploy_cdk.py): the validator alone costs ~5 CPU-s a process
    echo "== CDK synth: not run (--static; tests/contract/test_deploy_cdk.py synthesises both variants)"
else
    echo "== CDK synth (GPU and CPU variants), CloudFormation rules as errors"
    CDK_OUTDIR="$tmp/gpu" CDK_CONTEXT_JSON='{"@aws-cdk/core:validateAgainstDefaultRules": true}' \
        "$PY" deploy/sagemaker/cdk/app.py >"$tmp/gpu.log" 2>&1 || { cat "$tmp/gpu.log"; exit 1; }
    CDK_OUTDIR="$tmp/cpu" CDK_CONTEXT_JSON='{"@aws-cdk/core:validateAgainstDefaultRules": true,
        "instance_type": "ml.c6i.xlarge", "backend": "onnx", "mode": "sequential",
        "dockerfile": "deploy/sagemaker/Dockerfile.cpu"}' \
        "$PY" deploy/sagemaker/cdk/app.py >"$tmp/cpu.log" 2>&1 || { cat "$tmp/cpu.log"; exit 1; }
    grep -q '"InstanceType": "ml.g5.xlarge"' "$tmp/gpu/KokoroSpeech.template.json"
    grep -q '"InstanceType": "ml.c6i.xlarge"' "$tmp/cpu/KokoroSpeech.template.json"
    # (a bare `! grep` never stops a `set -e` script)
    ! grep -q InferenceAmiVersion "$tmp/cpu/KokoroSpeech.template.json" || { echo "CPU variant has an InferenceAmiVersion" >&2; exit 1; }
    echo "synth OK: $(ls "$tmp/gpu" | grep -c template.json) stacks"
fi

echo "== deploy CLIs parse and plan"
for sub in up down deploy agent destroy; do "$PY" -m deploy.sagemaker.deploy "$sub" --help >/dev/null; done
"$PY" -m deploy.sagemaker.deploy up --dry-run --name check --with-agent --region us-east-1 >/dev/null
"$PY" -m deploy.sagemaker.package_model --help >/dev/null
env -u RUNPOD_API_KEY "$PY" -m deploy.runpod.deploy endpoint --image example/kokoro-serve:runpod --dry-run >/dev/null
env -u RUNPOD_API_KEY "$PY" -m deploy.runpod.deploy pod --image example/kokoro-serve:runpod --dry-run >/dev/null

if [[ "${1:-}" != "--static" ]]; then
    echo "== deploy tests (moto AWS in-process and as a server the CLI calls, CDK assertions, serve entry + RunPod worker as real processes)"
    "$PY" -m pytest -q -p no:cacheprovider tests/contract/test_deploy_*.py
fi
echo "deploy-check: OK"
