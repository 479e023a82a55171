"""The code's shape: no function longer than a screen (60 lines, decorators excluded) in
common/, bench/ or the numbered scripts, so that each has one job a reader can see whole."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

MAX_LINES = 60


def source_files() -> list[Path]:
    files = [*REPO.glob("[0-9][0-9]_*.py")]
    for folder in ("common", "bench"):
        files += (REPO / folder).rglob("*.py")
    return sorted(files)


def long_functions(path: Path, root: Path = REPO, limit: int = MAX_LINES) -> list[str]:
    """'path:line name (n lines)' for each function or method of `path` over `limit`."""
    tree = ast.parse(path.read_text())
    return [
        f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (length := node.end_lineno - node.lineno + 1) > limit
    ]


def test_no_function_is_longer_than_a_screen():
    files = source_files()
    assert len(files) > 60
    assert [line for path in files for line in long_functions(path)] == []


def test_the_length_check_counts_a_long_function(tmp_path: Path):
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_LINES - 1))
    path = tmp_path / "probe.py"
    path.write_text(
        f"def short():\n    return 1\n\n\nclass A:\n    def long(self):\n{body}\n"
        f"        return x0\n"
    )
    assert long_functions(path, tmp_path) == [f"probe.py:6 long ({MAX_LINES + 1} lines)"]


MAX_MODULE_LINES = 550  # issue 36: a module a reader can hold in mind
MAX_CLASS_LINES = 250


def oversized(path: Path, root: Path = REPO) -> list[str]:
    """'path (n lines)' for a module of `path` over MAX_MODULE_LINES and 'path:line
    Name (n lines)' for each class over MAX_CLASS_LINES."""
    text = path.read_text()
    found = []
    if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
        found.append(f"{path.relative_to(root)} ({lines} lines)")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_CLASS_LINES:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_module_and_no_class_of_common_is_oversized():
    files = sorted((REPO / "common").rglob("*.py"))
    assert [line for path in files for line in oversized(path)] == []


def test_the_size_check_counts_a_long_class(tmp_path: Path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    path = tmp_path / "probe.py"
    path.write_text(f"class A:\n{body}\n")
    assert oversized(path, tmp_path) == [f"probe.py:1 A ({MAX_CLASS_LINES + 1} lines)"]
