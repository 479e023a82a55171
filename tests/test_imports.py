"""The package's import graph: one folder per stage, imports only running down (a stage
imports itself, the stages below it and the ground floor; the ground floor imports only
itself), no cycle (an import under `if TYPE_CHECKING:` counts: a circle of annotations is
still a circle), no import inside a function, and streaming does not load training."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import REPO

PACKAGE = REPO / "common"
# lowest first: each stage may import the ones before it (and the ground floor, common/*.py)
STAGES = ("data", "inputs", "model", "runs", "train", "stream", "report")
GROUND = "ground"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage_of(module: str) -> str:
    """'common.stream.online' -> 'stream'; a module of common/ itself -> the ground floor."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else GROUND


def is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in (
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
    )


def imported_modules(node: ast.AST) -> list[str]:
    """The modules of `common` an import statement names ('from common import cli'
    names common.cli)."""
    if isinstance(node, ast.ImportFrom) and node.module:
        if node.module == "common" or (node.module.startswith("common.") and node.level == 0):
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            return [n for n in names if module_path(n) is not None]
    elif isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("common.")]
    return []


def module_path(name: str) -> Path | None:
    """The file of module `name` of the package (a package: its __init__.py), or None."""
    path = REPO.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def imports_of(path: Path) -> tuple[set[str], list[str], set[str]]:
    """(modules of `common` that `path` imports at run time, at module level; 'line:
    module' of those it imports inside a function or class; those it imports under `if
    TYPE_CHECKING:`, for annotations only, which count as neither of the others)."""
    tree = ast.parse(path.read_text())
    checking_blocks = [node for node in tree.body if is_type_checking_block(node)]
    checking = {id(inner) for node in checking_blocks for inner in ast.walk(node)}
    top, nested, annotations = set(), [], set()
    for node in tree.body:
        top.update(imported_modules(node))
    for node in ast.walk(tree):
        if id(node) in checking:
            annotations.update(imported_modules(node))
        elif node not in tree.body:
            nested += [f"{path.name}:{node.lineno}: {name}" for name in imported_modules(node)]
    return top, nested, annotations


def import_graph(
    package: Path = PACKAGE, annotations: bool = False
) -> tuple[dict[str, set[str]], list[str]]:
    """({module: the modules it imports at run time}, imports inside a function);
    annotations: the imports under `if TYPE_CHECKING:` are edges too (the cycle check)."""
    graph, nested = {}, []
    for path in sorted(package.rglob("*.py")):
        top, inner, checking = imports_of(path)
        graph[module_name(path, package)] = top | checking if annotations else top
        nested += inner
    return graph, nested


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b' for every import of a module of a higher stage (or, from the ground floor,
    of any stage)."""
    rank = {GROUND: -1} | {stage: i for i, stage in enumerate(STAGES)}
    return sorted(
        f"{module} ({stage_of(module)}) -> {target} ({stage_of(target)})"
        for module, targets in graph.items()
        for target in targets
        if rank[stage_of(target)] > rank[stage_of(module)]
    )


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


def test_every_module_lies_in_a_stage_folder_or_on_the_ground_floor():
    graph, _ = import_graph()
    assert len(graph) > 40
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(STAGES)
    for stage in STAGES:
        assert (PACKAGE / stage / "__init__.py").read_text().startswith('"""'), stage
    assert {stage_of(m) for m in graph} == {GROUND, *STAGES}


def test_imports_only_run_down():
    graph, _ = import_graph()
    assert upward_imports(graph) == []


def test_the_direction_check_finds_an_upward_import():
    graph = {
        "common.files": set(),
        "common.data.arrays": {"common.files"},
        "common.model.saint": {"common.data.arrays", "common.stream.online"},
        "common.stream.online": {"common.model.saint"},
        "common.workspace": {"common.data.arrays"},
    }
    assert upward_imports(graph) == [
        "common.model.saint (model) -> common.stream.online (stream)",
        "common.workspace (ground) -> common.data.arrays (data)",
    ]


def test_an_upward_import_in_the_package_fails_the_check(tmp_path: Path):
    """A copy of the package in which the model imports the training stage."""
    package = tmp_path / "common"
    for path in PACKAGE.rglob("*.py"):
        target = package / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    saint = package / "model" / "saint" / "model.py"
    saint.write_text(saint.read_text() + "\nfrom common.train.plan import lr_factor\n")
    graph, _ = import_graph(package)
    assert upward_imports(graph) == [
        "common.model.saint.model (model) -> common.train.plan (train)",
    ]


def test_the_package_has_no_import_cycle():
    graph, _ = import_graph(annotations=True)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_an_annotation_only_circle_in_the_package_fails_the_check(tmp_path: Path):
    """A copy of the package in which the report's renderer imports the evaluation (which
    imports the renderer) under `if TYPE_CHECKING:`, as it once did."""
    package = tmp_path / "common"
    for path in PACKAGE.rglob("*.py"):
        target = package / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    render = package / "report" / "render.py"
    render.write_text(
        render.read_text() + "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        "    from common.report.evaluate import evaluate\n"
    )
    runtime, _ = import_graph(package)
    assert find_cycle(runtime) is None  # invisible at run time
    graph, _ = import_graph(package, annotations=True)
    assert find_cycle(graph) == [
        "common.report.evaluate",
        "common.report.render",
        "common.report.evaluate",
    ]


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_inside_a_function():
    _, nested = import_graph()
    assert nested == []


@pytest.mark.parametrize(
    ("source", "runtime", "nested", "annotations"),
    [
        ("from common.train.config import TrainConfig\n", {"common.train.config"}, [], set()),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from common.train.config import TrainConfig\n",
            set(),
            [],
            {"common.train.config"},
        ),
        (
            "def f():\n    from common.train import config\n",
            set(),
            ["m.py:2: common.train", "m.py:2: common.train.config"],
            set(),
        ),
    ],
)
def test_annotation_only_imports_are_not_run_time_imports(
    tmp_path, source, runtime, nested, annotations
):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert imports_of(path) == (runtime, nested, annotations)


def test_streaming_does_not_load_the_training_stage():
    graph, _ = import_graph()
    for module in (m for m in graph if stage_of(m) == "stream"):
        assert not {m for m in reachable(graph, module) if stage_of(m) == "train"}, module
    top, _, _ = imports_of(REPO / "04_infer.py")
    assert not {m for m in set().union(*(reachable(graph, m) for m in top)) if "train" in m}
