"""Every product function fits on one screen: at most 80 lines (docs/architecture.md).

A function that grew past a screen is read in pieces and changed in pieces; the limit
keeps the request path (`Executor.run` and its steps, `gateway.app`'s admit and serve)
readable top to bottom. Long SQL or template text belongs in a module constant, which
does not count. Run as a script (`python -m tests.test_function_length [limit]`) to list
the functions over a limit, longest first.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("routing", "providers", "policies", "gateway_project")  # product code; tools/ and bench/ are not
LIMIT = 80


def function_lengths() -> list[tuple[int, str]]:
    """(lines, "path:line qualified.name") for every function in product code, nested ones too."""
    found: list[tuple[int, str]] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            _collect(tree, "", path.relative_to(ROOT), found)
    return found


def _collect(node: ast.AST, prefix: str, path: Path, found: list[tuple[int, str]]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{child.name}"
            found.append((child.end_lineno - child.lineno + 1, f"{path}:{child.lineno} {name}"))
            _collect(child, f"{name}.", path, found)
        elif isinstance(child, ast.ClassDef):
            _collect(child, f"{prefix}{child.name}.", path, found)
        else:
            _collect(child, prefix, path, found)


def over(limit: int) -> list[tuple[int, str]]:
    return sorted((item for item in function_lengths() if item[0] > limit), reverse=True)


def test_no_product_function_is_longer_than_80_lines() -> None:
    assert over(LIMIT) == []


# The request path's modules: what one request goes through travels as one object (the gateway's
# Call, the executor's walk), not as a clump of loose parameters (docs/architecture.md#the-call).
REQUEST_PATH = ("routing/gateway", "routing/core/executor.py", "routing/core/limiter.py", "routing/plan/cache_key.py")
MAX_PARAMETERS = 7
BUILT_ONCE = {"Executor.__init__"}  # the composition root's, once per process: not on the request path


def parameter_counts(paths: tuple[str, ...] = REQUEST_PATH) -> list[tuple[int, str]]:
    """(parameters, "path qualified.name") of every function under `paths`, `self`/`cls` not counted."""
    found: list[tuple[int, str]] = []
    for where in paths:
        root = ROOT / where
        for path in sorted(root.rglob("*.py") if root.is_dir() else [root]):
            _parameters(ast.parse(path.read_text()), "", path.relative_to(ROOT), found)
    return found


def _parameters(node: ast.AST, prefix: str, path: Path, found: list[tuple[int, str]]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = child.args
            names = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
            if f"{prefix}{child.name}" not in BUILT_ONCE:
                count = len([n for n in names if n.arg not in ("self", "cls")])
                found.append((count, f"{path} {prefix}{child.name}"))
            _parameters(child, f"{prefix}{child.name}.", path, found)
        elif isinstance(child, ast.ClassDef):
            _parameters(child, f"{prefix}{child.name}.", path, found)
        else:
            _parameters(child, prefix, path, found)


def test_no_request_path_function_takes_8_or_more_parameters() -> None:
    assert [item for item in parameter_counts() if item[0] > MAX_PARAMETERS] == []


def test_the_counter_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    found: list[tuple[int, str]] = []
    _collect(ast.parse(f"class A:\n  def f(self):\n{body}\n"), "", tmp_path, found)
    assert found == [(LIMIT + 1, f"{tmp_path}:2 A.f")]


if __name__ == "__main__":
    for lines, where in over(int(sys.argv[1]) if len(sys.argv) > 1 else LIMIT):
        print(f"{lines:4d}  {where}")
