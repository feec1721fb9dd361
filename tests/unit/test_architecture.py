"""The shape the project holds itself to: imports point one way (no cycle among the product's
modules, at module level or inside a function) and no product module grows past 400 lines.
Complexity is held by ruff (C901, at most 15), which ``make test`` runs first."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.live import REPO

PACKAGES = ("backends", "server", "agent", "deploy", "benchmarks")


def product_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The product modules ``name`` imports (an import of a package's member counts as the member's
    module when there is one, else the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_no_import_cycle_among_the_products_modules():
    modules = product_modules()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert graph["server.app"] and graph["agent.tts_client"]  # the walk sees imports at all

    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, trail = stack.pop()
            for dep in graph[node]:
                if dep == start:
                    return [*trail, dep]
                if dep not in seen:
                    seen.add(dep)
                    stack.append((dep, [*trail, dep]))
        return None

    # A package's __init__ importing its own members is no cycle of interest; every other one is.
    cycles = [c for name in graph if (c := cycle_from(name)) and not all(m.startswith(c[0] + ".") for m in c[1:-1])]
    assert cycles == []


def test_no_product_module_over_400_lines():
    long = {name: n for name, path in product_modules().items() if (n := len(path.read_text().splitlines())) > 400}
    assert long == {}


def test_imports_point_down_the_layers():
    """backends imports none of the packages above it; the server neither the agent nor deploy (the
    agent talks to the server over the wire); the agent no server. Imports inside functions count."""
    modules = product_modules()
    above = {"backends": ("server", "agent", "deploy", "benchmarks"), "server": ("agent", "deploy", "benchmarks"),
             "agent": ("server", "deploy", "benchmarks")}
    wrong = {
        (name, dep)
        for name, path in modules.items()
        for dep in imports_of(name, path, modules)
        if dep.split(".")[0] in above.get(name.split(".")[0], ())
    }
    assert wrong == set()
