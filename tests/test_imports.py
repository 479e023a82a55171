"""The package's import graph: no cycle, no import inside a function, and streaming
(04's modules) does not load the training module."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

PACKAGE = REPO / "common"


def imports_of(path: Path) -> tuple[set[str], list[str]]:
    """(modules of `common` that `path` imports at module level, 'line: module' of those
    it imports inside a function or class)."""
    tree = ast.parse(path.read_text())
    top, nested = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
            if node.module == "common":
                names = [f"common.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in (n for n in names if n.startswith("common.")):
            if node.col_offset == 0:
                top.add(name)
            else:
                nested.append(f"{path.name}:{node.lineno}: {name}")
    return top, nested


def import_graph() -> tuple[dict[str, set[str]], list[str]]:
    graph, nested = {}, []
    for path in sorted(PACKAGE.glob("*.py")):
        top, inner = imports_of(path)
        graph[f"common.{path.stem}"] = top
        nested += inner
    return graph, nested


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[module] = 2
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph.get(module, ())
    return seen


def test_the_package_has_no_import_cycle():
    graph, _ = import_graph()
    assert len(graph) > 10
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_inside_a_function():
    _, nested = import_graph()
    assert nested == []


def test_streaming_does_not_load_the_training_module():
    graph, _ = import_graph()
    assert "common.training" not in reachable(graph, "common.inference")
    top, _ = imports_of(REPO / "04_infer.py")
    assert "common.training" not in set().union(*(reachable(graph, m) for m in top))
