"""Shared test helpers (plain functions; fixtures that use them live in the test files)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from common.data import DATA_SUBDIR, TrainArrays, load_questions, question_parts
from common.preprocess import PreprocessConfig, preprocess

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def shared_file(*parts: str) -> Path:
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data {path} is not here (it sits beside the checkout in CI)")
    return path


def preprocess_real_rows(tmp: Path, train_file: str, assign_row_ids: bool = False):
    """Run 01 on real train rows with the real question/lecture metadata; returns
    (output_dir, arrays, parts)."""
    source = shared_file("riiid_train_sample", train_file)
    input_dir = tmp / "input"
    input_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, input_dir / "train.csv")
    for name in ("questions.csv", "lectures.csv"):
        shutil.copyfile(shared_file("riiid_metadata", name), input_dir / name)
    output_dir = tmp / "output"
    preprocess(
        PreprocessConfig(input_dir, output_dir, assign_row_ids=assign_row_ids, progress=False)
    )
    data_dir = output_dir / DATA_SUBDIR
    return output_dir, TrainArrays.load(data_dir), question_parts(load_questions(data_dir))


def make_tiny_demo(tmp: Path, users: int = 150, questions: int = 300, seed: int = 0) -> Path:
    """A small demo dataset through 01 and 02 (user strategy); returns the output dir."""
    from common.demo import DemoConfig, make_demo
    from common.folds import FoldConfig, make_folds

    input_dir = tmp / "input"
    make_demo(DemoConfig(n_users=users, n_questions=questions, seed=seed), input_dir)
    output_dir = tmp / "output"
    preprocess(PreprocessConfig(input_dir, output_dir, progress=False))
    make_folds(output_dir, FoldConfig(n_folds=5, seed=seed))
    return output_dir
