"""The benchmarks' import graph: bench/ is a package whose scripts run as modules
(`python -m bench.x`), so each imports the others by their full names (no sys.path
tricks), every module imports, and no two import each other, even for annotations only."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.test_imports import find_cycle

BENCH = REPO / "bench"
# needs pykt-toolkit, installed only in its own venv (see the script's docstring)
NEEDS_PYKT = {"bench.pykt_saint_throughput"}


def bench_modules() -> dict[str, Path]:
    """{'bench.kt.run': its path, ...} for every module of the package (not bench/out/)."""
    names = {}
    for path in BENCH.rglob("*.py"):
        if path.relative_to(BENCH).parts[0] == "out":  # the benchmarks' git-ignored work
            continue
        parts = path.relative_to(REPO).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported_names(path: Path) -> list[str]:
    """Every module an import statement of `path` names, wherever the statement is (an
    annotation-only import under TYPE_CHECKING counts: it is how a circle hides)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def bench_graph() -> dict[str, set[str]]:
    modules = bench_modules()
    return {
        name: {m for m in imported_names(path) if m in modules and m != name}
        for name, path in modules.items()
    }


def test_the_families_are_sub_packages():
    modules = bench_modules()
    for family in ("kt", "rehearsal"):
        assert f"bench.{family}" in modules, f"bench/{family}/__init__.py"
    assert "bench.kt.run" in modules and "bench.rehearsal.full_scale" in modules


def test_bench_modules_import_each_other_by_full_name():
    """A bare `import benchlib` works only with bench/ on sys.path: what the package
    layout replaced."""
    bare = {path.stem for path in bench_modules().values()} - {"__init__"}
    found = [
        f"{name}: {imported}"
        for name, path in bench_modules().items()
        for imported in imported_names(path)
        if imported.split(".")[0] in bare
    ]
    assert found == []


def test_bench_has_no_import_cycle():
    graph = bench_graph()
    assert "bench.kt.report" in graph["bench.kt.run"]
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


@pytest.mark.parametrize("name", sorted(set(bench_modules()) - NEEDS_PYKT))
def test_every_bench_module_imports(name):
    importlib.import_module(name)
