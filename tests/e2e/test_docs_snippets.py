"""Every shell and Python snippet of README.md and docs/*.md, run as a reader would paste it.

One live server (``python -m server serve``, the real ONNX runtime: the suite's shared ``onnx_server``) serves them; each
snippet's default address (``127.0.0.1:8080`` / ``localhost:8080``) is rewritten to it, and each
block runs on its own in a fresh temporary directory (with ``.venv`` there pointing at this
interpreter's venv, so ``. .venv/bin/activate`` works), the venv's ``bin`` first on ``PATH``, and no
``KOKORO_*``/``AWS_*`` variables from the shell that runs the tests. A shell block runs under
``bash -e -o pipefail`` (every command must succeed, not only the last) and its ``curl`` fails on an
HTTP error status (``--fail-with-body``), so an example that answers 404 fails here; it must exit 0,
and leave no empty file behind (an audio file it wrote has audio in it).

A block right after ``<!-- not run: REASON -->`` (it needs AWS, a GPU, a browser, minutes of
benchmarking, or it starts a server) is only parsed: ``bash -n``, :func:`ast.parse`. Each block is
its own test, named by file and line (``test_snippet_runs[docs/openai-api.md:5]``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.live import REPO
from tests.support.snippets import Snippet, collect, for_server, parse

pytestmark = pytest.mark.subprocess

SNIPPETS = collect(REPO)
RUN = [s for s in SNIPPETS if s.not_run is None]
PARSE_ONLY = [s for s in SNIPPETS if s.not_run is not None]
#: One snippet's wall-clock limit: snippets are short requests, not benchmarks (generous for a loaded machine).
SNIPPET_TIMEOUT_S = 120
#: Variables a snippet never inherits from the shell that runs the tests (no cloud account is reached).
_CONFIG_PREFIXES = ("KOKORO_", "SAGEMAKER_", "RUNPOD_", "AWS_")
#: ``curl`` as the snippets get it: an HTTP error status is a failure (exit 22), with the body shown.
_CURL_SHIM = """#!/usr/bin/env bash
for arg in "$@"; do
  case "$arg" in -f|--fail|--fail-with-body) exec {curl} "$@";; esac
done
exec {curl} --fail-with-body "$@"
"""


@pytest.fixture(scope="module")
def server(onnx_server):
    """The suite's shared real-model server (``onnx_server``): a snippet only talks to it."""
    return onnx_server


@pytest.fixture(scope="module")
def snippet_env(model_dir, tmp_path_factory) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CONFIG_PREFIXES)}
    path = [str(Path(sys.executable).parent), env.get("PATH", "")]
    curl = shutil.which("curl")
    if curl is not None:
        shims = tmp_path_factory.mktemp("docs-shims")
        (shims / "curl").write_text(_CURL_SHIM.format(curl=curl))
        (shims / "curl").chmod(0o755)
        path.insert(0, str(shims))
    env.update({
        "PATH": os.pathsep.join(path),
        # this checkout's packages, whichever checkout the venv's editable install points at
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
        "KOKORO_MODEL_DIR": str(model_dir),
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    })
    return env


def test_the_documentation_has_snippets_to_run():
    """The collection itself: README's examples are found and run, so an empty parametrisation
    (a broken extractor) cannot pass as "nothing to check"."""
    assert any(s.path == "README.md" for s in RUN), [s.id for s in SNIPPETS]
    assert {s.lang for s in RUN} == {"bash", "python"}


@pytest.mark.parametrize("snippet", RUN, ids=[s.id for s in RUN])
@pytest.mark.timeout(SNIPPET_TIMEOUT_S + 120)  # the snippet's own limit, and the shared server's start
def test_snippet_runs(snippet: Snippet, server, snippet_env, tmp_path):
    problem = parse(snippet)
    assert problem is None, f"{snippet.id} does not parse: {problem}"
    code, done = run(snippet, server.port, snippet_env, tmp_path)
    assert done.returncode == 0, (
        f"{snippet.id} exited {done.returncode}\n--- code\n{code}--- stdout\n{_tail(done.stdout)}\n"
        f"--- stderr\n{_tail(done.stderr)}\n--- server log\n{_tail(server.log())}"
    )
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name not in ("snippet.py", "snippet.sh")
               and ".venv" not in p.relative_to(tmp_path).parts]
    empty = [p.name for p in written if p.stat().st_size == 0]
    assert not empty, f"{snippet.id} wrote empty files: {empty}"


@pytest.mark.parametrize(("lang", "code"), [
    ("bash", "curl -s localhost:8080/invocations -d '{\"text\": \"Hi.\", \"voice\": \"no_such_voice\"}' -o x.wav\n"),
    ("bash", "false\necho the last command succeeds\n"),
    ("bash", "curl -s localhost:8080/ping | grep -q no-such-status | cat\n"),
    ("python", "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:8080/no-such-route')\n"),
], ids=["curl-error-status", "failed-command-mid-block", "failed-pipe", "python-raises"])
def test_a_snippet_that_fails_as_pasted_fails_here(lang, code, server, snippet_env, tmp_path):
    """The runner's own check: an example that answers 404, or whose middle command fails, is caught."""
    _, done = run(Snippet("docs/example.md", 1, lang, code), server.port, snippet_env, tmp_path)
    assert done.returncode != 0, done


def run(snippet: Snippet, port: int, env: dict[str, str], cwd: Path) -> tuple[str, subprocess.CompletedProcess]:
    """Run ``snippet`` against the server on ``port`` in ``cwd``; returns the code run and its result."""
    (cwd / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    code = for_server(snippet.code, f"127.0.0.1:{port}")
    if snippet.lang == "python":
        (cwd / "snippet.py").write_text(code)
        argv = [sys.executable, "snippet.py"]
    else:
        (cwd / "snippet.sh").write_text(code)
        argv = ["bash", "-e", "-o", "pipefail", "snippet.sh"]
    try:
        return code, subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                                    timeout=SNIPPET_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{snippet.id} ran past {SNIPPET_TIMEOUT_S} s:\n{_tail(e.stdout)}\n{_tail(e.stderr)}")


@pytest.mark.parametrize("snippet", PARSE_ONLY, ids=[s.id for s in PARSE_ONLY])
def test_snippet_not_run_still_parses(snippet: Snippet):
    problem = parse(snippet)
    assert problem is None, f"{snippet.id} (not run: {snippet.not_run}) does not parse: {problem}"


def _tail(text: str | bytes | None, n: int = 4000) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return (text or "")[-n:]
