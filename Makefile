# kokoro-serve — the two commands: `make serve` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.stamp-install
EXTRAS ?= dev,torch,agent,deploy,s3
# pyenv's python3.12 shim can fail when 3.12 is not the selected version: prefer the real binary.
PY312 ?= $(shell ls ~/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -1 || command -v python3.12)
STAMP312 := .venv312/.stamp-install
export KOKORO_PORT ?= 8080
export KOKORO_HOST ?= 127.0.0.1

.PHONY: install serve test lint bench deploy-check assets clean

install: $(STAMP)

# torch first, pinned to the CPU build on local disk: any other order lets a dependency pull an
# unpinned torch, which downloads a multi-GB CUDA build. PYSEC-2026-2286 is fixed from 2.10.
# kokoro goes in without its dependencies: it would pull misaki[en] and so phonemizer-fork, which
# silently replaces the `phonemizer` module that kokoro-onnx needs (tests/unit/test_install.py).
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[$(EXTRAS)]'
	$(PIP) install -q --no-deps kokoro==0.9.4
	$(PY) -c "import phonemizer, importlib.metadata as m; m.version('phonemizer')" \
		|| { echo "phonemizer missing or replaced"; exit 1; }
	command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
	$(VENV)/bin/kokoro-serve assets
	touch $(STAMP)

assets: install
	$(VENV)/bin/kokoro-serve assets

serve: install
	$(VENV)/bin/kokoro-serve serve --host $(KOKORO_HOST) --port $(KOKORO_PORT)

# The SageMaker HTTP/2 client (aws-sdk-sagemaker-runtime-http2) needs Python >= 3.12: its tests run
# in a venv of their own.
$(STAMP312): Makefile
	test -x .venv312/bin/python || $(PY312) -m venv .venv312
	.venv312/bin/python -m pip install -q 'aws-sdk-sagemaker-runtime-http2[awscrt]>=0.12,<0.13' boto3 websockets \
		pytest pytest-asyncio pytest-timeout
	touch $(STAMP312)

test: install $(STAMP312)
	$(VENV)/bin/ruff check backends server agent deploy benchmarks tests settings_table.py
	$(VENV)/bin/pytest -q -p no:cacheprovider
	.venv312/bin/python -m pytest --noconftest -q -p no:cacheprovider tests/agent_py312
	bash deploy/check.sh --static

lint: install
	$(VENV)/bin/ruff check backends server agent deploy benchmarks tests settings_table.py

bench: install
	$(PY) -m benchmarks all --quick

deploy-check: install
	bash deploy/check.sh

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
