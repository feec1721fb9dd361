"""The suite's parallel run keeps a module's tests on one worker (tests/conftest.py's groups, sent by
pytest-xdist's ``--dist loadgroup``), so a module's fixtures, and the shared servers and runtimes, are
built once. Were the groups lost (as with a pytest whose node ids drop xdist's group suffix), every
worker would build them again and the suite would take minutes longer without failing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

REPO = Path(__file__).resolve().parents[2]
MODULE = """
import os
from pathlib import Path

import pytest

@pytest.mark.parametrize("n", range(6))
def test_records_its_worker(n):
    Path(os.environ["RECORD"]).joinpath(f"{{__name__}}-{{n}}").write_text(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_each_modules_tests_run_on_one_worker(tmp_path):
    suite, record = tmp_path / "suite", tmp_path / "record"
    suite.mkdir()
    record.mkdir()
    (suite / "conftest.py").write_text("from tests.conftest import pytest_addoption, pytest_collection_modifyitems  # noqa: F401\n")
    for name in ("test_one", "test_two", "test_three"):
        (suite / f"{name}.py").write_text(MODULE.format())
    env = {**os.environ, "PYTHONPATH": str(REPO), "RECORD": str(record)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup",
         "--no-loadscope-reorder", str(suite)], cwd=suite, env=env, capture_output=True, text=True, timeout=100)
    assert run.returncode == 0, run.stdout + run.stderr
    workers: dict[str, set[str]] = {}
    for path in record.iterdir():
        workers.setdefault(path.name.rsplit("-", 1)[0], set()).add(path.read_text())
    assert len(workers) == 3 and sum(1 for _ in record.iterdir()) == 18
    assert all(len(used) == 1 for used in workers.values()), workers
