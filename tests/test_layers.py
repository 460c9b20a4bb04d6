"""The import rule of docs/architecture.md: floors with no arrows running back up.

Every first-party module is given a floor; a module may import only modules on
its own floor or below, `routing.core` imports nothing from Django or from
outside the core, and no two modules import each other, directly or around a
loop. Imports inside functions count: a deferred import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("routing", "providers", "policies", "gateway_project", "tools")

# Lowest first. The first matching prefix wins, so list specific prefixes before general ones.
FLOORS: list[tuple[str, list[str]]] = [
    ("core", ["routing.core"]),
    (
        "config",
        [
            "routing.config",
            "routing.models",
            "routing.migrations",
            "providers.models",
            "providers.migrations",
            "policies.models",
            "policies.migrations",
            "policies.matcher",
            "policies.keys",
            "policies.tokens",
        ],
    ),
    ("plan", ["routing.plan", "policies.decision"]),
    ("upstream", ["routing.upstream"]),
    ("runtime", ["routing.runtime"]),
    (
        "ops",
        [
            "routing.ops",
            "routing.templatetags",
            "routing.admin",
            "providers.admin",
            "policies.admin",
        ],
    ),
    ("gateway", ["routing.gateway"]),
    (
        "entry",
        [
            "gateway_project",
            "routing.management",
            "providers.management",
            "policies.management",
            "routing.apps",
            "providers.apps",
            "policies.apps",
            "tools",
        ],
    ),
]
FLOOR_RANK = {name: rank for rank, (name, _) in enumerate(FLOORS)}
FORBIDDEN_IN_CORE = ("django", "channels", "daphne", "redis", "psycopg")


def floor_of(module: str) -> str:
    for name, prefixes in FLOORS:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return name
    if module.split(".")[-1] == "__init__" or module in PACKAGES:
        return "entry"
    raise AssertionError(f"{module} has no floor in tests/test_layers.py; give it one (and say why in the README)")


def first_party_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every module (first-party or not) that `path` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            for alias in node.names:  # `from routing.ops import usage` imports routing.ops.usage
                candidate = f"{node.module}.{alias.name}"
                if candidate in known:
                    found.add(candidate)
    return found


def first_party_graph() -> dict[str, set[str]]:
    modules = first_party_modules()
    known = set(modules)
    graph = {}
    for name, path in modules.items():
        deps = {d for d in imports_of(path, known) if d in known and d != name}
        # importing a package's submodule runs the package's __init__ too, which is fine; only edges to modules count
        graph[name] = {d for d in deps if not _is_package_of(d, name) and modules[d].name != "__init__.py"}
    return graph


def _is_package_of(package: str, module: str) -> bool:
    return module.startswith(package + ".")


def test_no_module_imports_a_higher_floor() -> None:
    graph = first_party_graph()
    violations = []
    for module, deps in sorted(graph.items()):
        rank = FLOOR_RANK[floor_of(module)]
        for dep in sorted(deps):
            if FLOOR_RANK[floor_of(dep)] > rank:
                violations.append(f"{module} ({floor_of(module)}) imports {dep} ({floor_of(dep)})")
    assert violations == [], "imports that run up a floor:\n" + "\n".join(violations)


def test_core_imports_no_django_and_nothing_outside_core() -> None:
    modules = first_party_modules()
    known = set(modules)
    violations = []
    for name, path in sorted(modules.items()):
        if floor_of(name) != "core":
            continue
        for dep in sorted(imports_of(path, known)):
            top = dep.split(".")[0]
            if top in FORBIDDEN_IN_CORE or (top in PACKAGES and not dep.startswith("routing.core")):
                violations.append(f"{name} imports {dep}")
    assert violations == [], "the core must stay pure:\n" + "\n".join(violations)


def test_no_import_cycles() -> None:
    graph = first_party_graph()
    cycles = _cycles(graph)
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each as a readable loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: a core module importing the gateway, and a two-module loop, are found."""
    graph = {"routing.core.x": {"routing.gateway.app"}, "routing.gateway.app": {"routing.core.x"}}
    assert FLOOR_RANK[floor_of("routing.gateway.app")] > FLOOR_RANK[floor_of("routing.core.x")]
    assert _cycles(graph) == [["routing.core.x", "routing.gateway.app"]]
