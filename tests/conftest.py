"""Shared fixtures: the repository root, the real data beside the checkout, a small demo
dataset in the competition's formats, and a runner for the numbered scripts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from common.demo import DemoConfig, make_demo
from common.preprocess import PreprocessConfig, preprocess

REPO = Path(__file__).resolve().parents[1]
INPUT_FILES = ("train.csv", "questions.csv", "lectures.csv")
# About 49,000 rows: several pyarrow blocks at a 64 KiB block size, a second to preprocess.
DEMO_CONFIG = DemoConfig(n_users=150, n_questions=300, seed=1)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the checkout (real Riiid rows; see its README.md)."""
    path = REPO.parent / "shared" / "data"
    if not path.is_dir():
        pytest.skip(f"real data not found: expected {path} beside the project checkout")
    return path


@pytest.fixture(scope="session")
def demo_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A demo input dir (train/questions/lectures.csv, demo_truth.csv). Read-only: copy it
    with `write_input` before changing anything."""
    path = tmp_path_factory.mktemp("demo_input")
    make_demo(DEMO_CONFIG, path)
    return path


@pytest.fixture(scope="session")
def write_input(demo_input: Path) -> Callable[[Path], Path]:
    """write_input(dest): copy a valid input dir (the demo's three CSVs) to `dest`."""

    def write(dest: Path) -> Path:
        dest.mkdir(parents=True, exist_ok=True)
        for name in INPUT_FILES:
            shutil.copyfile(demo_input / name, dest / name)
        return dest

    return write


@pytest.fixture(scope="session")
def demo_output(demo_input: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output dir holding the demo through 01_preprocess (`<it>/data`). Read-only."""
    path = tmp_path_factory.mktemp("demo_output")
    preprocess(PreprocessConfig(input_dir=demo_input, output_dir=path, progress=False))
    return path


@pytest.fixture(scope="session")
def run_script() -> Callable[..., subprocess.CompletedProcess]:
    """run_script("01_preprocess.py", *args): run a numbered script with this Python, from
    the repository root, capturing its output."""

    def run(script: str, *args: object, timeout: float = 300) -> subprocess.CompletedProcess:
        command = [sys.executable, str(REPO / script), *map(str, args)]
        return subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
        )

    return run
