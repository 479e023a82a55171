"""How data moves through the house (issue 36): every output name is spelled in
common/workspace.py alone, and one 04 run opens the data set, the folds' manifest and its
fold once each."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from common.data import fold_data
from common.data.dataset import Dataset
from tests.helpers import REPO, RUN, make_tiny_demo, run_numbered_script

WORKSPACE = REPO / "common" / "workspace.py"
# runs in pyKT's own environment and imports nothing of the project (bench/kt/pykt_peer.py):
# the history.csv it writes is its own, in the peer's folder
EXEMPT = {REPO / "bench" / "kt" / "pykt_peer.py"}
FILE_NAME = re.compile(r"^[A-Za-z0-9_{}:-]+\.(pt|csv|json|parquet|npz|npy|md|png|ipynb)$")


def workspace_names() -> set[str]:
    """The file names common/workspace.py spells (literals and f-string parts)."""
    names = set()
    for node in ast.walk(ast.parse(WORKSPACE.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.lstrip("/")
            if FILE_NAME.match(text):
                names.add(text)
    names.discard("")
    return names


def path_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of the string literals (and literal parts of f-strings) that could
    name a path: no whitespace. Prose (help texts, messages, docstrings) may mention a
    file by name; code that builds a path may not."""
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.strip()
        and not any(c.isspace() for c in node.value)
    ]


def spelled_outside(names: set[str], roots=("common", "bench"), base: Path = REPO) -> list[str]:
    """'path:line: name' wherever a module other than workspace.py spells one of `names`
    in a path literal: the whole literal, or its last path component."""
    found = []
    for root in roots:
        for path in sorted((base / root).rglob("*.py")):
            if path == WORKSPACE or path in EXEMPT:
                continue
            for line, text in path_literals(ast.parse(path.read_text())):
                last = text.rstrip("/").rsplit("/", 1)[-1]
                if last in names:
                    found.append(f"{path.relative_to(base)}:{line}: {last}")
    return found


def test_the_workspace_spells_the_output_names():
    names = workspace_names()
    # the names a newcomer looks for are there, each once
    for name in ("best.pt", "history.csv", "folds.json", "oof.parquet", "runs.csv"):
        assert name in names
    assert len(names) >= 25


def test_no_output_file_name_is_spelled_outside_the_workspace():
    assert spelled_outside(workspace_names()) == []


def test_the_name_check_finds_a_spelled_name(tmp_path):
    """The check itself: a module that spells best.pt is found."""
    planted = tmp_path / "common" / "planted.py"
    planted.parent.mkdir()
    planted.write_text('CHECKPOINT = "best.pt"\nHISTORY = f"{1}/history.csv"\n')
    found = spelled_outside({"best.pt", "history.csv"}, roots=("common",), base=tmp_path)
    assert [line.split(": ")[-1] for line in found] == ["best.pt", "history.csv"]


# ---------------------------------------------------------------------------------------
# one 04 run: one load of the data set, one read of the fold


TINY = ("--d-model", 16, "--heads", 2, "--layers", 1, "--window", 20, "--batch-size", 16)
TINY += ("--warmup", 5, "--no-progress", "--device", "cpu", "--run", RUN)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    out = make_tiny_demo(tmp_path_factory.mktemp("workspace_flow"), users=40)
    done = run_numbered_script(
        "03_train.py", "--output-dir", out, "--fold", 0, "--epochs", 1, *TINY
    )
    assert done.returncode == 0, done.stderr
    return out


def counting(monkeypatch) -> dict[str, int]:
    """Counters of the disk reads of the data set, the folds' manifest and a fold."""
    counts = {"data set": 0, "manifest": 0, "fold": 0}

    def counted(key, function):
        def wrapper(*args, **kwargs):
            counts[key] += 1
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(Dataset, "load", classmethod(counted("data set", Dataset.load.__func__)))
    fold_load = fold_data.Fold.load.__func__
    monkeypatch.setattr(fold_data.Fold, "load", classmethod(counted("fold", fold_load)))
    reader = counted("manifest", fold_data._read_fold_config)
    monkeypatch.setattr(fold_data, "_read_fold_config", reader)
    return counts


def test_one_04_run_loads_the_data_set_and_reads_its_fold_once(trained, monkeypatch):
    """04 on one fold streams it, fits the trees, writes the out-of-fold file and exports
    the Kaggle bundle (every student's state): each stage of it takes the data set and the
    fold from the one workspace the script opened."""
    counts = counting(monkeypatch)
    done = run_numbered_script("04_infer.py", "--output-dir", trained, "--fold", 0, "--run", RUN)
    assert done.returncode == 0, done.stderr
    assert counts == {"data set": 1, "manifest": 1, "fold": 1}
