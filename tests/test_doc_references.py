"""Every `docs/<page>.md#<anchor>` a source file cites, every link between the docs, and every
dotted name (`routing.runtime.observe.tracing`, `routing.core.errors.forbidden`) a doc names must resolve:
a reader who follows one from code or prose lands on what it promises."""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("routing", "providers", "policies", "gateway_project", "tools", "bench", "templates", "tests")
CITED = re.compile(r"docs/([A-Za-z0-9_\-]+\.md)(?:#([A-Za-z0-9_\-]+))?")
LINK = re.compile(r"\]\(([^)\s]+?\.md)(?:#([A-Za-z0-9_\-]+))?\)")
ANCHOR = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")
DOTTED = re.compile(r"`((?:routing|policies|providers|gateway_project)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?`")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    text = page.read_text()
    found = set(ANCHOR.findall(text))
    seen: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            base = slug(line.lstrip("#"))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


def broken(page: Path, anchor: str | None) -> str | None:
    if not page.is_file():
        return f"no page {page.relative_to(ROOT)}"
    if anchor and anchor not in anchors(page):
        return f"no anchor #{anchor} in {page.relative_to(ROOT)}"
    return None


def source_files() -> list[Path]:
    out: list[Path] = []
    for top in SOURCES:
        for path in (ROOT / top).rglob("*"):
            if path.suffix in {".py", ".html", ".js", ".css", ".json", ".yaml"} and path.is_file():
                out.append(path)
    return out + [ROOT / "Makefile", ROOT / ".ci" / "run"]


def test_every_docs_anchor_cited_in_code_resolves():
    problems = []
    for path in source_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for page, anchor in CITED.findall(line):
                if page == "no-such-page.md":  # the landing page's own 404 test
                    continue
                why = broken(ROOT / "docs" / page, anchor or None)
                if why:
                    problems.append(f"{path.relative_to(ROOT)}:{number}: {why}")
    assert not problems, "\n".join(problems)


def test_every_link_between_the_docs_resolves():
    problems = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for target, anchor in LINK.findall(line):
                if "://" in target:
                    continue
                page = doc if not target else (doc.parent / target).resolve()
                why = broken(page, anchor or None)
                if why:
                    problems.append(f"{doc.relative_to(ROOT)}:{number}: {why}")
    assert not problems, "\n".join(problems)


def django_name(dotted: str) -> bool:
    """`app.Model` (a model label), `app.codename` (a permission) or `app.E001` (a system check id)."""
    from django.apps import apps

    app, _, name = dotted.partition(".")
    if "." in name or app not in {c.label for c in apps.get_app_configs()}:
        return False
    if re.fullmatch(r"[EW]\d{3}", name):
        return any(dotted in path.read_text() for path in (ROOT / "routing" / "config").glob("*.py"))
    models = list(apps.get_app_config(app).get_models())
    if any(name in (m.__name__, m._meta.model_name) for m in models):  # `app.Model` or `app.model`
        return True
    for model in models:
        opts = model._meta
        codenames = {f"{verb}_{opts.model_name}" for verb in opts.default_permissions} | {
            c for c, _ in opts.permissions
        }
        if name in codenames:
            return True
    return False


def resolves(dotted: str) -> bool:
    """A module, or an attribute (a class, function, constant, method) reached from the longest module
    prefix, or a Django name (model label, permission, check id)."""
    if django_name(dotted):
        return True
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                annotations = getattr(obj, "__annotations__", {})
                slots = getattr(obj, "__slots__", ())
                if name in annotations or name in slots:
                    return True  # an instance field of a class
                return False
            obj = getattr(obj, name)
        return True
    return False


@pytest.mark.django_db
def test_every_dotted_name_in_the_docs_exists():
    problems = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for dotted in DOTTED.findall(line):
                if not resolves(dotted):
                    problems.append(f"{doc.relative_to(ROOT)}:{number}: `{dotted}` names nothing in the code")
    assert not problems, "\n".join(problems)


PATH_CITED = re.compile(
    r"`((?:routing|policies|providers|gateway_project|tools|bench|tests)/[\w/.\-]+\.(?:py|html|js|yaml))\b"
)


def test_every_source_path_in_the_docs_exists():
    problems = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for cited in PATH_CITED.findall(line):
                if f"`{cited}` →" in line:  # a rename's old name, in the history of the layout
                    continue
                if not (ROOT / cited).exists():
                    problems.append(f"{doc.relative_to(ROOT)}:{number}: `{cited}` does not exist")
    assert not problems, "\n".join(problems)
