"""Shared fixtures: the repository root, the real data beside the checkout, a small demo
dataset in the competition's formats, and a runner for the numbered scripts."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from common.data.preprocess import PreprocessConfig, preprocess
from common.inputs.demo import make_demo
from common.workspace import Workspace
from tests.helpers import TINY_DEMOS, run_numbered_script, tiny_demo_config

REPO = Path(__file__).resolve().parents[1]

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one thread per test worker (and per script it launches): workers already use every
    # core, and a second torch thread per worker only waits for a core
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
INPUT_FILES = ("train.csv", "questions.csv", "lectures.csv")
# About 49,000 rows: several pyarrow blocks at a 64 KiB block size, a second to preprocess.
# real-length histories (up to 10,000 events): the memory estimate scales this demo up
DEMO_CONFIG = tiny_demo_config(users=150, seed=1, max_events=10_000)


@pytest.fixture(scope="session", autouse=True)
def tiny_demos(tmp_path_factory: pytest.TempPathFactory):
    """make_tiny_demo's store for this session (see tests/helpers.py): each demo size is
    built once per test process and copied to whoever asks."""
    TINY_DEMOS["root"] = tmp_path_factory.mktemp("tiny_demos")
    yield
    TINY_DEMOS.pop("root")


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
    config = PreprocessConfig(input_dir=demo_input, output_dir=path, progress=False)
    preprocess(config, Workspace(path))
    return path


@pytest.fixture(scope="session")
def run_script() -> Callable[..., subprocess.CompletedProcess]:
    """run_script("01_preprocess.py", *args): a numbered script's main(argv), in this
    process, its output captured (a CompletedProcess: returncode, stdout, stderr; an
    uncaught exception is returncode 1 with the traceback on stderr, as in a shell).
    process=True launches it with this Python instead, from the repository root: for the
    tests where the process boundary is the point (a kill, a shell's view of a refusal)."""
    return run_numbered_script


# the modules whose tests run the pipeline end to end, 15 to 40 s each on 2 cores: queued
# first, so that no worker starts one while the other is nearly done (the suite's tail)
LONGEST_FIRST = ("test_gpu_check", "test_bench_full_scale", "test_smoke", "test_bench_kt")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each module's tests stay together and in order
