"""What a GPU machine with PyTorch needs besides it, for ``benchmarks/gpu_check.sh``: the project's
dependencies and its ``torch`` extra less torch itself, and the benchmarks' matplotlib and psutil.
``python -m benchmarks.gpu_requirements [--missing]``: one a line (for ``pip download``), or only those
this interpreter lacks or has at a wrong version. Standard library only (it runs before anything is
installed); versions are checked with pip's own ``packaging`` where pip is there, by name otherwise.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
EXTRA = ("matplotlib>=3.8", "psutil>=5.9")
SKIP = {"torch"}  # the machine brings its own CUDA build


def requirements(pyproject: Path = PYPROJECT) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = [*project["dependencies"], *project["optional-dependencies"]["torch"], *EXTRA]
    return [r for r in reqs if _name(r) not in SKIP]


def _name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower().replace("_", "-")


def satisfied(req: str) -> bool:
    try:
        installed = md.version(_name(req))
    except md.PackageNotFoundError:
        return False
    try:
        from pip._vendor.packaging.requirements import Requirement
    except ImportError:
        return True
    parsed = Requirement(req)
    if parsed.marker is not None and not parsed.marker.evaluate():
        return True
    return parsed.specifier.contains(installed, prereleases=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_requirements", description=__doc__.split("\n")[0])
    parser.add_argument("--missing", action="store_true", help="only the requirements this interpreter does not meet")
    args = parser.parse_args(argv)
    for req in requirements():
        if not (args.missing and satisfied(req)):
            print(req)
    return 0


if __name__ == "__main__":
    sys.exit(main())
