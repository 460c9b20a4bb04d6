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


def test_the_counter_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    found: list[tuple[int, str]] = []
    _collect(ast.parse(f"class A:\n  def f(self):\n{body}\n"), "", tmp_path, found)
    assert found == [(LIMIT + 1, f"{tmp_path}:2 A.f")]


if __name__ == "__main__":
    for lines, where in over(int(sys.argv[1]) if len(sys.argv) > 1 else LIMIT):
        print(f"{lines:4d}  {where}")
