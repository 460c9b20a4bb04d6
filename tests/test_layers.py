"""The import rules of docs/architecture.md#floors: floors with no arrows running back up.

Every first-party module is given a floor; a module may import only modules on
its own floor or below, `routing.core` imports nothing from Django or from
outside the core, `routing.ops` and `routing.gateway` stand side by side (neither
imports the other), and no two modules import each other, directly or around a
loop. Imports inside functions count (a deferred import is still a dependency),
and so do imports of a package's `__init__` (its re-exports are a module too).
Two more rules of the composition root (docs/architecture.md#composition-root):
no module builds a long-lived part at import time, and at most MAX_DEFERRED
first-party imports sit inside functions, each saying why.
"""

from __future__ import annotations

import ast
from pathlib import Path

from routing.core.kinds import DIALECT_KINDS

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("routing", "providers", "policies", "gateway_project", "tools")
PRODUCT = ("routing", "providers", "policies", "gateway_project")  # tools/ is for developers, not shipped

# Lowest first. The first matching prefix wins, so list specific prefixes before general ones.
# Floors with the same rank are siblings: neither may import the other (SIBLINGS).
FLOORS: list[tuple[str, int, list[str]]] = [
    ("core", 0, ["routing.core"]),
    (
        "config",
        1,
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
    ("plan", 2, ["routing.plan", "policies.decision"]),
    ("upstream", 3, ["routing.upstream"]),
    ("runtime", 4, ["routing.runtime"]),
    ("gateway", 5, ["routing.gateway"]),
    (
        "ops",
        5,
        ["routing.ops", "routing.templatetags", "routing.admin", "providers.admin", "policies.admin"],
    ),
    (
        "entry",
        6,
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
FLOOR_RANK = {name: rank for name, rank, _ in FLOORS}
FORBIDDEN_IN_CORE = ("django", "channels", "daphne", "redis", "psycopg")
MAX_DEFERRED = 20  # first-party imports inside functions, product code (docs/architecture.md#composition-root)
# Module-level instances that are values, not parts: constants a process never changes. Anything else built at
# import time is a long-lived part and belongs to the process object (gateway_project.process.build_process).
VALUE_CLASSES = {
    "Entity": "a row of the configuration schema's table",
    "OverloadSpec": "the empty overload settings (a frozen dataclass)",
    "PriorityTicket": "the priority ticket of a request nobody classified (immutable)",
    "VertexDialect": "a dialect adapter: it keeps no state of its own",
}
# None left: the last one, the Vertex dialect's OAuth token cache, is the transport's (`Transport.tokens`), handed
# to `Dialect.authorize` (docs/architecture.md#composition-root).
KNOWN_SINGLETONS: set[str] = set()


def floor_of(module: str) -> str:
    for name, _, prefixes in FLOORS:
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return name
    if module in PACKAGES:
        return "entry"
    raise AssertionError(f"{module} has no floor in tests/test_layers.py; give it one (and say why in the docs)")


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
    """module -> the first-party modules it imports, a package's `__init__` included when it has code
    (its re-exports are a module like any other); an empty `__init__` (a docstring) is no edge, nor
    is a module's own enclosing package (Python runs it whatever the module imports)."""
    modules = first_party_modules()
    known = set(modules)
    empty = {name for name, path in modules.items() if path.name == "__init__.py" and not _has_code(path)}
    graph = {}
    for name, path in modules.items():
        deps = {d for d in imports_of(path, known) if d in known and d != name and d not in empty}
        graph[name] = {d for d in deps if not _is_package_of(d, name)}
    return graph


def _has_code(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body)


def package_edges(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The edges that end at a package's `__init__` with code (counted like any other, listed for the docs)."""
    packages = {name for name, path in first_party_modules().items() if path.name == "__init__.py"}
    return sorted((m, d) for m, deps in graph.items() for d in deps if d in packages)


def _is_package_of(package: str, module: str) -> bool:
    return module.startswith(package + ".")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Edges that run up a floor, or across to a sibling floor (gateway <-> ops)."""
    violations = []
    for module, deps in sorted(graph.items()):
        here = floor_of(module)
        for dep in sorted(deps):
            there = floor_of(dep)
            if FLOOR_RANK[there] > FLOOR_RANK[here] or (FLOOR_RANK[there] == FLOOR_RANK[here] and there != here):
                violations.append(f"{module} ({here}) imports {dep} ({there})")
    return violations


def test_no_module_imports_a_higher_floor_or_its_sibling() -> None:
    violations = upward_imports(first_party_graph())
    assert violations == [], "imports that run up a floor or across to a sibling:\n" + "\n".join(violations)


def test_edges_to_packages_count_like_any_other() -> None:
    """A package's __init__ is on a floor and its importers are checked like any module's (the test above);
    the re-exporting packages stay few: each is listed in docs/architecture.md#packages."""
    graph = first_party_graph()
    edges = package_edges(graph)
    reexporting = sorted({d for _, d in edges})
    assert reexporting == ["routing.runtime.usage", "routing.upstream.dialects"], edges


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


def module_singletons(source: str, module: str = "m") -> list[str]:
    """Module-level names bound to an instance of a first-party class built at import time (not a value)."""
    tree = ast.parse(source)
    first_party = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    frozen = {n.name for n in tree.body if isinstance(n, ast.ClassDef) and _is_value_class(n)}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            first_party.update(a.asname or a.name for a in node.names)
    found = []
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or not isinstance(node.value, ast.Call):
            continue
        func = node.value.func
        name = func.id if isinstance(func, ast.Name) else None
        if name is None or name not in first_party or not name[:1].isupper() or name in frozen:
            continue
        if name in VALUE_CLASSES:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Name) and f"{module}.{target.id}" not in KNOWN_SINGLETONS:
                found.append(f"{module}.{target.id} = {name}(...)")
    return found


def _is_value_class(node: ast.ClassDef) -> bool:
    """A frozen dataclass, a NamedTuple or an Enum: a value, whatever its module does with it."""
    for deco in node.decorator_list:
        if isinstance(deco, ast.Call) and any(
            k.arg == "frozen" and getattr(k.value, "value", False) for k in deco.keywords
        ):
            return True
    return any(isinstance(b, ast.Name) and b.id in ("NamedTuple", "Enum", "IntEnum", "StrEnum") for b in node.bases)


def test_no_module_builds_a_long_lived_part_at_import() -> None:
    """Breakers, budgets, stores, sinks...: built by the composition root and held by the process object."""
    found = []
    for name, path in sorted(first_party_modules().items()):
        if name.split(".")[0] in PRODUCT and ".migrations" not in name:
            found += module_singletons(path.read_text(), name)
    assert found == [], "module-level parts (build them in gateway_project.process.build_process):\n" + "\n".join(found)


def deferred_imports(source: str) -> list[tuple[int, bool]]:
    """(line, has a `# reason:` comment on it or the line above) of each first-party import inside a function."""
    lines = source.splitlines()
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n.split(".")[0] in PACKAGES for n in names):
                near = lines[node.lineno - 1] + (lines[node.lineno - 2] if node.lineno > 1 else "")
                found.append((node.lineno, "# reason:" in near))
    return sorted(set(found))


def test_few_first_party_imports_inside_functions_each_with_its_reason() -> None:
    """Only where Django's app loading (or a server loading a module before the settings) forces it."""
    count, silent = 0, []
    for name, path in sorted(first_party_modules().items()):
        if name.split(".")[0] not in PRODUCT or ".migrations" in name:
            continue
        for line, reasoned in deferred_imports(path.read_text()):
            count += 1
            if not reasoned:
                silent.append(f"{path.relative_to(ROOT)}:{line}")
    assert silent == [], "imports inside functions without a `# reason:` comment:\n" + "\n".join(silent)
    assert count <= MAX_DEFERRED, f"{count} first-party imports inside functions (at most {MAX_DEFERRED})"


def test_the_checks_catch_a_sibling_import_a_singleton_and_a_silent_deferred_import() -> None:
    """The checkers themselves, on deliberate violations."""
    assert upward_imports({"routing.gateway.app": {"routing.ops.controls"}}) == [
        "routing.gateway.app (gateway) imports routing.ops.controls (ops)"
    ]
    assert upward_imports({"routing.ops.controls": {"routing.gateway.app"}}) != []
    assert upward_imports({"routing.runtime.observe.metrics": {"routing.ops.controls"}}) != []
    assert upward_imports({"routing.gateway.app": {"routing.runtime.observe.metrics"}}) == []
    source = "from routing.core.breaker import BreakerRegistry\nregistry = BreakerRegistry()\n"
    assert module_singletons(source, "routing.core.x") == ["routing.core.x.registry = BreakerRegistry(...)"]
    frozen = "from dataclasses import dataclass\n@dataclass(frozen=True)\nclass V:\n    a: int = 0\nEMPTY = V()\n"
    assert module_singletons(frozen) == []
    silent = "def f():\n    from routing.models import UsageRecord\n    return UsageRecord\n"
    reasoned = (
        "def f():\n    # reason: app loading\n    from routing.models import UsageRecord\n    return UsageRecord\n"
    )
    assert deferred_imports(silent) == [(2, False)] and deferred_imports(reasoned) == [(3, True)]


# The dialect kinds table (routing/core/kinds.py DIALECT_KINDS) is the one list of dialects
# (docs/architecture.md#what-a-change-touches): every adapter in routing/upstream/dialects has its row and
# is registered, and every row has an adapter. Read from the source, like the rules above.
DIALECTS_DIR = ROOT / "routing" / "upstream" / "dialects"


def dialect_adapters(directory: Path) -> tuple[dict[str, str], set[str]]:
    """({adapter class: its dialect name} defined in the package's modules, the classes its __init__ registers)."""
    adapters: dict[str, str] = {}
    for path in sorted(directory.glob("*.py")):
        if path.name in ("__init__.py", "base.py"):
            continue
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            for stmt in node.body:
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
                value = stmt.value if isinstance(stmt, ast.Assign) else None
                if isinstance(target, ast.Name) and target.id == "name" and isinstance(value, ast.Constant):
                    adapters[node.name] = str(value.value)
    init = ast.parse((directory / "__init__.py").read_text())
    called = {n.func.id for n in ast.walk(init) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return adapters, {c for c in called if c.endswith("Dialect")}


def dialect_table_problems(directory: Path, table: set[str]) -> list[str]:
    adapters, registered = dialect_adapters(directory)
    problems = [f"{cls} ({name!r}) has no row in DIALECT_KINDS" for cls, name in adapters.items() if name not in table]
    problems += [f"{cls} is not registered in dialects/__init__.py" for cls in adapters if cls not in registered]
    problems += [f"{cls} is registered but defined nowhere" for cls in registered - set(adapters)]
    problems += [f"DIALECT_KINDS row {name!r} has no adapter" for name in table - set(adapters.values())]
    return problems


def test_the_dialect_kinds_table_and_the_adapters_match() -> None:
    assert dialect_table_problems(DIALECTS_DIR, set(DIALECT_KINDS)) == []


def test_the_dialect_check_catches_a_missing_row_an_unregistered_adapter_and_an_orphan_row(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text("DIALECTS = {d.name: d for d in (OneDialect(),)}\n")
    (tmp_path / "one.py").write_text('class OneDialect(Dialect):\n    name = "one"\n')
    (tmp_path / "two.py").write_text('class TwoDialect(Dialect):\n    name = "two"\n')
    assert dialect_table_problems(tmp_path, {"one", "gone"}) == [
        "TwoDialect ('two') has no row in DIALECT_KINDS",
        "TwoDialect is not registered in dialects/__init__.py",
        "DIALECT_KINDS row 'gone' has no adapter",
    ]
