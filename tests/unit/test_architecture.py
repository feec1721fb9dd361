"""The shape the project holds itself to: imports point one way (no cycle among the product's
modules, at module level or inside a function), the seams between the rooms hold (the server
reaches the engine only through its door, runtimes and the engine stay apart, providers only map
wire formats, the agent uses only pure text helpers), every room says what it holds, and no product
module grows past 400 lines. Complexity is held by ruff (C901, at most 15), which ``make test`` runs
first."""

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


# The seams inside the packages (docs/architecture.md). Each rule: importer prefix -> the only
# prefixes of backends/ (or server/) it may import. Imports inside functions count.
PURE_TEXT = ("backends.text.sentences", "backends.text.chunker")
PURE_SUPPORT = ("backends.envsettings", "backends.logs", "backends.startup")
SERVER_DOOR = ("backends.api", "backends.config", "backends.factory", "backends.audio", *PURE_TEXT, *PURE_SUPPORT)


def _violations(importer: str, allowed: tuple[str, ...], within: str) -> set[tuple[str, str]]:
    modules = product_modules()
    return {
        (name, dep)
        for name, path in modules.items()
        if name == importer or name.startswith(importer + ".")
        for dep in imports_of(name, path, modules)
        if dep.startswith(within + ".") and not dep.startswith(importer)
        and not any(dep == a or dep.startswith(a + ".") for a in allowed)
    }


def test_the_server_reaches_backends_only_through_its_door():
    """The server sees the engine through ``backends.api``, builds it through ``config`` and
    ``factory``, encodes audio through ``audio`` and cuts text with the pure sentence rules. The CLI's
    ``assets`` and ``voices`` commands (and the settings' default download URL) front the assets room."""
    wrong = _violations("server", SERVER_DOOR, "backends")
    assert {(n, d) for n, d in wrong if not (n.startswith(("server.cli", "server.settings"))
                                             and d.startswith("backends.assets"))} == set()


def test_the_engine_never_imports_a_runtime_and_runtimes_neither_the_engine_nor_the_text_front_ends():
    modules = product_modules()
    engine_to_runtimes = {(n, d) for n, p in modules.items() if n.startswith("backends.engine")
                          for d in imports_of(n, p, modules) if d.startswith("backends.runtimes")}
    runtimes_up = {(n, d) for n, p in modules.items() if n.startswith("backends.runtimes")
                   for d in imports_of(n, p, modules) if d.startswith(("backends.engine", "backends.text"))}
    assert engine_to_runtimes == set() and runtimes_up == set()


def test_providers_map_wire_messages_onto_the_session_core_and_the_pipeline_only():
    """A provider module maps its wire format; sessions, streaming text, synthesis and auth are the
    shared rooms' (no provider imports another room of the server, nor the engine)."""
    shared = ("server.websocket", "server.streaming", "server.pipeline", "server.auth", "server.state")
    assert _violations("server.providers", shared, "server") == set()
    assert _violations("server.providers", ("backends.api", "backends.audio", *PURE_TEXT), "backends") == set()


def test_the_agent_uses_only_the_pure_text_helpers_of_backends():
    assert _violations("agent", (*PURE_TEXT, *PURE_SUPPORT), "backends") == set()


def test_every_room_says_what_it_holds_and_the_tops_stay_small():
    """A newcomer finds a concept by its room's name: every package has a docstring, and backends/ and
    server/ keep at most eight modules at their top (the rest lives in rooms)."""
    silent = [str(p.relative_to(REPO)) for pkg in PACKAGES for p in (REPO / pkg).rglob("__init__.py")
              if pkg in ("backends", "server") and p.parent != REPO / pkg and ast.get_docstring(ast.parse(p.read_text())) is None]
    assert silent == []
    for top in ("backends", "server"):
        modules = [p.name for p in (REPO / top).glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
        assert len(modules) <= 8, (top, sorted(modules))
