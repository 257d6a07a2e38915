"""The dependency direction of docs/architecture.md: packages import downward only.

Reads every module's imports with `ast` (no import runs), so it also sees imports inside
functions and under TYPE_CHECKING: a lazy import still ties two packages together.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "specscope"


def _imports() -> dict[str, set[str]]:
    """Each module's `specscope.*` imports (relative imports resolved; a `from m import x`
    counts both m and m.x, since x may be a submodule)."""
    out: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        package = name if rel.name == "__init__" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                found |= {base, *(f"{base}.{a.name}" for a in node.names)}
        out[name] = {m for m in found if m.startswith("specscope.")}
    return out


MODULES = _imports()


def _package(module: str) -> str:
    return module.split(".")[1]


def _package_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for module, imported in MODULES.items():
        for target in imported:
            if _package(target) != _package(module):
                edges[_package(module)].add(_package(target))
    return edges


def _reach(edges: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _loops(edges: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Pairs (a, b) where a imports b and b reaches a."""
    return sorted({tuple(sorted((a, b))) for a in edges for b in edges[a]
                   if a in _reach(edges, b)})


def test_no_package_imports_one_that_imports_it_back() -> None:
    loops = _loops(_package_edges())
    assert not loops, f"packages that import each other: {loops}"


def test_no_module_imports_one_that_imports_it_back() -> None:
    edges = {m: {t for t in imported if t in MODULES and t != m}
             for m, imported in MODULES.items()}
    loops = _loops(edges)
    assert not loops, f"modules that import each other: {loops}"


@pytest.mark.parametrize(("package", "forbidden"), [
    ("hw_profiles", {"executor", "optimizers", "profiling", "simulator", "systems", "trace"}),
    ("optimizers", {"executor", "profiling", "simulator", "validate", "systems"}),
    ("trace", {"models", "hw_profiles", "optimizers", "executor", "profiling", "simulator"}),
    ("tree", {"trace", "models", "hw_profiles", "optimizers", "executor"}),
    ("draft", {"trace", "optimizers", "executor"}),
    ("names", {"errors", "tree", "trace", "executor", "hw_profiles"}),
    ("executor", {"profiling", "validate", "simulator", "serving", "sweeps", "dashboards",
                  "cli"}),
    ("simulator", {"executor", "profiling", "validate", "serving", "dashboards", "cli"}),
    ("serving", {"profiling", "validate", "sweeps", "dashboards", "cli"}),
])
def test_layers_import_downward(package: str, forbidden: set[str]) -> None:
    """hw_profiles only reads profiles (measuring lives in profiling/), optimizers hold solvers
    (no measuring code), and the lowest layers stand alone."""
    reached = _reach(_package_edges(), package)
    assert not reached & forbidden, f"{package} reaches {sorted(reached & forbidden)}"


def test_the_check_sees_a_loop() -> None:
    """The loop finder the checks rely on sees a two-package loop and a longer one."""
    assert _loops({"a": {"b"}, "b": {"a"}}) == [("a", "b")]
    assert _loops({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert _loops({"a": {"b"}, "b": {"c"}}) == []
