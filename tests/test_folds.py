"""02_make_folds: every strategy gives each row one role per fold, validation is a tail
of whole containers streamed in virtual time, and a seed fixes the artifact byte for byte."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from common.data.arrays import TrainArrays, container_starts
from common.data.fold_data import Fold, load_fold_config
from common.data.folds import STRATEGIES, FoldConfig, make_folds, read_row_folds
from common.workspace import Workspace

# One configuration per strategy, sized for the ~49,000-row, 150-student demo.
CONFIGS = {
    "user": FoldConfig(strategy="user", n_folds=5, new_share=0.25),
    "last-n": FoldConfig(strategy="last-n", n_folds=4, last_n=100),
    "virtual-time": FoldConfig(strategy="virtual-time", n_folds=3, valid_share=0.1),
    "unseen": FoldConfig(strategy="unseen", n_folds=5),
    "dataset": FoldConfig(strategy="dataset", n_folds=4),
}
DISJOINT = ("user", "last-n", "unseen", "dataset")  # a student validates in one fold at most


def test_every_strategy_is_tested() -> None:
    assert set(CONFIGS) == set(STRATEGIES)


@dataclass
class Built:
    config: FoldConfig
    output_dir: Path
    input_dir: Path
    arrays: TrainArrays
    folds: list[Fold]
    stats: list[dict]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.arrays.offsets)

    def position(self) -> np.ndarray:
        """(n_rows,) each row's index within its student."""
        return np.arange(self.arrays.n_rows) - np.repeat(self.arrays.offsets[:-1], self.lengths)


def write_user_folds(arrays: TrainArrays, n_folds: int, path: Path) -> np.ndarray:
    """A user_folds.csv with students dealt round-robin in a shuffled order; returns each
    student's fold."""
    order = np.random.default_rng(7).permutation(arrays.n_students)
    fold = np.empty(arrays.n_students, dtype=np.int64)
    fold[order] = np.arange(arrays.n_students) % n_folds
    pd.DataFrame({"user_id": arrays.users, "fold": fold}).to_csv(path, index=False)
    return fold


def build(demo_output: Path, dest: Path, config: FoldConfig) -> Built:
    output_dir, input_dir = dest / "output", dest / "input"
    workspace = Workspace(output_dir)
    shutil.copytree(Workspace(demo_output).data.path, workspace.data.path)
    input_dir.mkdir()
    arrays = TrainArrays.load(workspace.data)
    if config.strategy == "dataset":
        write_user_folds(arrays, config.n_folds, input_dir / "user_folds.csv")
    stats = make_folds(workspace, config, input_dir)
    folds = [Fold.load(workspace, k) for k in range(config.n_folds)]
    return Built(config, output_dir, input_dir, arrays, folds, stats)


@pytest.fixture(scope="module")
def folds_of(demo_output: Path, tmp_path_factory: pytest.TempPathFactory):
    """folds_of(strategy): the demo's folds under CONFIGS[strategy], built once."""
    cache: dict[str, Built] = {}

    def get(strategy: str) -> Built:
        if strategy not in cache:
            dest = tmp_path_factory.mktemp(f"folds_{strategy}")
            cache[strategy] = build(demo_output, dest, CONFIGS[strategy])
        return cache[strategy]

    return get


@pytest.fixture(params=STRATEGIES)
def built(request, folds_of) -> Built:
    return folds_of(request.param)


def test_row_folds_csv_lists_each_folds_validation_rows(built: Built) -> None:
    """folds/row_folds.csv says what the fold files say, by row_id: fold k's validation
    lines are exactly the rows its stream holds; with folds that share no student (every
    strategy but virtual-time) one line per row, history lines before a student's cut."""
    table = read_row_folds(Workspace(built.output_dir).folds.row_folds)
    row_id = np.asarray(built.arrays["row_id"])
    valid = table[table["role"] == "validation"]
    for fold in built.folds:
        mine = np.sort(valid.loc[valid["fold"] == fold.index, "row_id"].to_numpy())
        assert np.array_equal(mine, np.sort(row_id[fold.stream_index])), fold.index
    assert set(table["role"]) <= {"train", "history", "validation"}
    never = ~np.isin(row_id, valid["row_id"].to_numpy())
    others = table[table["role"] != "validation"]
    if built.config.strategy == "virtual-time":  # a row may validate in several folds
        assert sorted(others["row_id"]) == sorted(row_id[never])
        assert (others["fold"] == -1).all() and (others["role"] == "train").all()
        return
    assert table["row_id"].tolist() == row_id.tolist()  # one line per row, in file order
    position = built.position()
    for fold in built.folds:
        lines = table["fold"].to_numpy() == fold.index
        student = np.repeat(np.arange(built.arrays.n_students), built.lengths)
        validating = np.isin(student, np.flatnonzero(fold.user_cut < built.lengths))
        assert np.array_equal(lines, validating)  # a fold-k student's rows are fold k's
        history = lines & (position < np.repeat(fold.user_cut, built.lengths))
        assert np.array_equal(table["role"].to_numpy()[history], ["history"] * history.sum())
    assert (table.loc[table["fold"] == -1, "role"] == "train").all()


def test_each_row_has_one_role_per_fold(built: Built) -> None:
    position = built.position()
    for fold in built.folds:
        assert fold.user_cut.shape == fold.virtual_offset.shape == (built.arrays.n_students,)
        assert ((fold.user_cut >= 0) & (fold.user_cut <= built.lengths)).all()
        stream = fold.stream_index
        assert len(np.unique(stream)) == len(stream), f"fold {fold.index}: repeated rows"
        expected = position >= np.repeat(fold.user_cut, built.lengths)
        assert np.array_equal(fold.valid_rows(built.arrays), expected), f"fold {fold.index}"
        assert len(stream) == expected.sum()
        stats = built.stats[fold.index]
        assert stats["valid_rows"] + stats["train_rows"] == built.arrays.n_rows
        assert stats["valid_rows"] == len(stream)


def test_validation_is_each_students_tail(built: Built) -> None:
    """No training row of a student comes after one of its validation rows."""
    same_student = np.repeat(np.arange(built.arrays.n_students), built.lengths)
    same_student = same_student[1:] == same_student[:-1]
    for fold in built.folds:
        valid = fold.valid_rows(built.arrays)
        back_to_train = valid[:-1] & ~valid[1:] & same_student
        assert not back_to_train.any(), f"fold {fold.index}: row {np.argmax(back_to_train) + 1}"


def test_cuts_fall_on_container_starts(built: Built) -> None:
    starts = container_starts(built.arrays)
    for fold in built.folds:
        inside = (fold.user_cut > 0) & (fold.user_cut < built.lengths)
        rows = built.arrays.offsets[:-1][inside] + fold.user_cut[inside]
        assert starts[rows].all(), f"fold {fold.index}: cut inside a container"


def test_stream_is_in_virtual_time(built: Built) -> None:
    timestamp = np.asarray(built.arrays["timestamp"])
    last_timestamp = timestamp[built.arrays.offsets[1:] - 1]
    student = built.arrays.user_of_row()
    for fold in built.folds:
        offset = fold.virtual_offset
        assert ((offset >= 0) & (offset <= last_timestamp.max() - last_timestamp)).all()
        virtual = offset[student] + timestamp
        assert (np.diff(virtual[fold.stream_index]) >= 0).all(), f"fold {fold.index}"


def valid_students(built: Built) -> np.ndarray:
    """(n_folds, n_students) bool: the students with validation rows in each fold."""
    return np.stack([fold.user_cut < built.lengths for fold in built.folds])


@pytest.mark.parametrize("strategy", DISJOINT)
def test_validation_students_are_disjoint(strategy: str, folds_of) -> None:
    per_student = valid_students(folds_of(strategy)).sum(axis=0)
    assert per_student.max() == 1
    if strategy != "last-n":  # last-n leaves out students with fewer than N rows
        assert (per_student == 1).all(), "every student validates in exactly one fold"


def folder_bytes(output_dir: Path) -> dict[str, bytes]:
    folds = Workspace(output_dir).folds.path
    return {p.name: p.read_bytes() for p in sorted(folds.iterdir())}


def test_seed_fixes_the_artifact(built: Built, demo_output: Path, tmp_path: Path) -> None:
    same = build(demo_output, tmp_path / "same", built.config)
    assert folder_bytes(same.output_dir) == folder_bytes(built.output_dir)
    other = build(demo_output, tmp_path / "other", replace(built.config, seed=1))
    first, second = folder_bytes(built.output_dir), folder_bytes(other.output_dir)
    names = [Workspace(built.output_dir).folds.fold(k).name for k in range(len(built.folds))]
    assert all(first[name] != second[name] for name in names)


# ---------------------------------------------------------------------------------------
# What each strategy promises


def test_user_mixes_new_and_continuing_students(folds_of) -> None:
    built = folds_of("user")
    starts = container_starts(built.arrays)
    n_containers = np.add.reduceat(starts, built.arrays.offsets[:-1])
    cut = np.stack([fold.user_cut for fold in built.folds])
    validating = valid_students(built)
    new = validating & (cut == 0)
    continuing = validating & (cut > 0)
    assert (cut[continuing] < np.broadcast_to(built.lengths, cut.shape)[continuing]).all()
    # students with one container can only be new; among the others about new_share are
    several = np.broadcast_to(n_containers > 1, cut.shape)
    share_new = new[several].sum() / validating[several].sum()
    assert abs(share_new - built.config.new_share) < 0.12, share_new
    assert new[~several].sum() == validating[~several].sum()
    for fold, stats in zip(built.folds, built.stats, strict=True):
        assert stats["new_students"] == new[fold.index].sum()
        assert stats["valid_students"] == validating[fold.index].sum()


def test_last_n_tails(folds_of) -> None:
    built = folds_of("last-n")
    n = built.config.last_n
    starts = np.flatnonzero(container_starts(built.arrays))
    longest_container = int(np.diff(np.append(starts, built.arrays.n_rows)).max())
    validating = valid_students(built)
    long_enough = built.lengths >= n
    assert not validating[:, ~long_enough].any(), "a student with fewer than N rows validates"
    assert (validating.sum(axis=0)[long_enough] == 1).all()
    for fold in built.folds:
        tail = (built.lengths - fold.user_cut)[validating[fold.index]]
        assert ((tail >= n) & (tail < n + longest_container)).all(), (tail.min(), tail.max())


def test_virtual_time_tail_share(folds_of) -> None:
    built = folds_of("virtual-time")
    n_valid = round(built.config.valid_share * built.arrays.n_rows)
    timestamp = np.asarray(built.arrays["timestamp"])
    student = built.arrays.user_of_row()
    for fold in built.folds:
        assert n_valid <= len(fold.stream_index) <= n_valid * 1.02 + 10
        # the validation rows are the latest rows of the whole virtual timeline
        virtual = fold.virtual_offset[student] + timestamp
        valid = fold.valid_rows(built.arrays)
        assert virtual[~valid].max() < virtual[valid].min(), f"fold {fold.index}"
    # each fold draws its own offsets, so the folds differ
    assert not np.array_equal(built.folds[0].virtual_offset, built.folds[1].virtual_offset)


def test_dataset_follows_user_folds(folds_of) -> None:
    built = folds_of("dataset")
    table = pd.read_csv(built.input_dir / "user_folds.csv")
    assert table["user_id"].tolist() == built.arrays.users.tolist()
    for fold in built.folds:
        assigned = table["fold"].to_numpy() == fold.index
        assert np.array_equal(fold.user_cut == 0, assigned)
        assert np.array_equal(fold.user_cut[~assigned], built.lengths[~assigned])


# ---------------------------------------------------------------------------------------


def test_script_prints_each_fold(demo_output: Path, tmp_path: Path, run_script) -> None:
    output_dir = tmp_path / "output"
    workspace = Workspace(output_dir)
    shutil.copytree(Workspace(demo_output).data.path, workspace.data.path)
    result = run_script("02_make_folds.py", "--output-dir", output_dir, "--n-folds", 3, "--seed", 5)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "strategy user, 3 folds, seed 5"
    assert lines[-1] == f"wrote {workspace.folds.path}"
    stats = load_fold_config(workspace)["folds"]
    pattern = re.compile(
        r"fold (\d): train rows ([\d,]+)  valid rows ([\d,]+)  valid students ([\d,]+) "
        r"\(new ([\d,]+)\)  questions ([\d.]+)  correct ([\d.]+)"
    )
    fold_lines = lines[1:-1]
    assert len(fold_lines) == len(stats) == 3
    for line, fold in zip(fold_lines, stats, strict=True):
        match = pattern.fullmatch(line)
        assert match, line
        numbers = [int(v.replace(",", "")) for v in match.groups()[:5]]
        keys = ("fold", "train_rows", "valid_rows", "valid_students", "new_students")
        assert numbers == [fold[key] for key in keys]
        assert float(match[6]) == round(fold["valid_question_share"], 3)
        assert float(match[7]) == round(fold["valid_share_correct"], 3)
