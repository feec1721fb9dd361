"""The benchmarks as a newcomer meets them after `make serve`: one documented install (the `bench`
extra) holds every package they import beyond the core, a missing one is named in one line (no
traceback), and a run on the fake runtime says its verdicts judge the harness only."""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from benchmarks import results
from benchmarks.__main__ import BENCH_MODULES
from benchmarks.results import Result

pytestmark = [pytest.mark.bench, pytest.mark.subprocess]

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"backends", "server", "agent", "deploy", "benchmarks", "tests"}
#: Imported by a suite only on a path that needs another extra, named in its error: torch (--backend
#: torch, windowed_decoder), boto3 (e2e and compare against AWS), the SageMaker HTTP/2 SDK, pip (gpu).
OTHER_EXTRAS = {"torch", "boto3", "aws_sdk_sagemaker_runtime_http2", "pip", "kokoro"}


def _requirement_name(spec: str) -> str:
    return re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].lower().replace("_", "-")


def _imported_modules() -> set[str]:
    found = set()
    for path in (ROOT / "benchmarks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in FIRST_PARTY | OTHER_EXTRAS}


def test_the_core_and_the_bench_extra_hold_every_package_the_benchmarks_import():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    allowed = {_requirement_name(s) for s in [*project["dependencies"], *project["optional-dependencies"]["bench"]]}
    assert "torch" not in {_requirement_name(s) for s in project["optional-dependencies"]["bench"]}
    distributions = md.packages_distributions()
    missing = {}
    for module in _imported_modules():
        # a package not installed here goes by the name the entry point's one-line error gives it
        names = {d.lower().replace("_", "-") for d in distributions.get(module) or [BENCH_MODULES.get(module, module)]}
        if not names & allowed:
            missing[module] = sorted(names)
    assert not missing, f"add to the bench extra in pyproject.toml: {missing}"


def test_a_missing_package_is_named_in_one_line_with_the_install(tmp_path):
    """`python -m benchmarks ttfa --quick --backend fake` without psutil."""
    shim = tmp_path / "psutil"
    shim.mkdir()
    (shim / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'psutil\'", name="psutil")\n')
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    done = subprocess.run([sys.executable, "-m", "benchmarks", "ttfa", "--quick", "--backend", "fake",
                           "--out", str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "python -m benchmarks: ttfa needs psutil, which is not installed: pip install -e '.[bench]' "
        "(the benchmarks' extra, no torch; docs/benchmarks.md)"]


def test_a_fake_run_leaves_the_model_s_goals_unjudged_and_keeps_the_harness_s():
    r = Result("load", True, "x")
    r.target("first audio", "<= 1000 ms", 2000.0, False)
    r.target("lost / misordered", "0 / 0", "1 / 0", False, any_runtime=True)
    r.judge_harness_only()
    assert [results.verdict(t) for t in r.targets] == ["not judged (fake runtime: a goal for the model)", "NOT met"]
    assert r.notes[0] == results.HARNESS_ONLY


def test_ttfa_on_the_fake_runtime_says_its_verdicts_are_for_the_harness_only(tmp_path, model_dir):
    """`python -m benchmarks ttfa --quick --backend fake`: no "NOT met" against a goal for the model,
    and one verdict for each number."""
    env = {**os.environ, "KOKORO_MODEL_DIR": str(model_dir), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "benchmarks", "ttfa", "--quick", "--backend", "fake",
                           "--out", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert f"  {results.HARNESS_ONLY}" in lines
    targets = [line for line in lines if line.startswith("  target ")]
    assert targets and not [line for line in targets if "NOT met" in line]
    assert all(line.endswith("— not judged (fake runtime: a goal for the model)") for line in targets)
    data = json.loads((tmp_path / "ttfa.json").read_text())
    assert results.validate(data) == [] and data["samples"] and data["quick"] is True
    assert data["command"] == "python -m benchmarks ttfa --quick --backend fake"
    names = [t["name"] for t in data["targets"]]
    assert len(names) == len(targets) == len(set(names))  # one verdict for each measured number
    assert "judge the harness only" in (tmp_path / "ttfa.md").read_text()
