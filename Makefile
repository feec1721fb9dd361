# kokoro-serve — the two commands: `make serve` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.stamp-install
EXTRAS ?= dev,torch,agent,deploy,s3
export KOKORO_PORT ?= 8080
export KOKORO_HOST ?= 127.0.0.1

.PHONY: install serve test lint bench deploy-check assets clean

install: $(STAMP)

# torch first, pinned to the CPU build on local disk: any other order lets a dependency pull an
# unpinned torch, which downloads a multi-GB CUDA build. PYSEC-2026-2286 is fixed from 2.10.
# kokoro and misaki go in without their dependencies: misaki[en] would pull phonemizer-fork, which
# silently replaces the `phonemizer` module that kokoro-onnx needs (tests/unit/test_install.py).
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[$(EXTRAS)]'
	$(PIP) install -q --no-deps kokoro==0.9.4 misaki==0.9.4
	$(PY) -c "import phonemizer, importlib.metadata as m; m.version('phonemizer')" \
		|| { echo "phonemizer missing or replaced"; exit 1; }
	command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
	$(VENV)/bin/kokoro-serve assets
	touch $(STAMP)

assets: install
	$(VENV)/bin/kokoro-serve assets

serve: install
	$(VENV)/bin/kokoro-serve serve --host $(KOKORO_HOST) --port $(KOKORO_PORT)

test: install
	$(VENV)/bin/ruff check backends server agent deploy benchmarks tests
	$(VENV)/bin/pytest -q -p no:cacheprovider

lint: install
	$(VENV)/bin/ruff check backends server agent deploy benchmarks tests

bench: install
	$(PY) -m benchmarks all --quick

deploy-check: install
	bash deploy/check.sh

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
