"""Question difficulty (common/model/difficulty.py): training rows only, smoothing, buckets,
out-of-fold buckets for the training rows, the buffer in the checkpoint, and
03_train.py with --difficulty-buckets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from common.data.features import SEQUENCE_FIELDS, QuestionSequences
from common.data.fold_data import FoldData, load_fold_data
from common.model.checkpoint import load_model, save_checkpoint
from common.model.difficulty import (
    DIFFICULTY_SMOOTHING,
    OUT_OF_FOLD_GROUPS,
    install_difficulty,
    out_of_fold_buckets,
    question_difficulty_buckets,
    smoothed_correct_rate,
)
from common.model.saint import SAINT, ModelConfig
from common.workspace import Workspace
from tests.helpers import RUN, fold0_folder, make_tiny_demo


def sequences_of(students: list[list[tuple[int, int]]]) -> QuestionSequences:
    """QuestionSequences from per-student (question, response) lists; other fields 0."""
    lengths = [len(s) for s in students]
    flat = [pair for student in students for pair in student]
    n = len(flat)
    values = {name: np.zeros(n, dtype=np.int64) for name in SEQUENCE_FIELDS}
    values["question"] = np.array([q for q, _ in flat], dtype=np.int16)
    values["response"] = np.array([r for _, r in flat], dtype=np.int8)
    return QuestionSequences(
        offsets=np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        row=np.arange(n, dtype=np.int64),
        **values,
    )


def test_training_rows_only_and_smoothing() -> None:
    # student 0: question 0 right x3, question 1 wrong, then (validation) question 2 right;
    # student 1: question 0 wrong, then (validation) question 1 right x2
    sequences = sequences_of([[(0, 1), (0, 1), (0, 1), (1, 0), (2, 1)], [(0, 0), (1, 1), (1, 1)]])
    train_length = np.array([4, 1])
    rate, count = smoothed_correct_rate(sequences, train_length, n_questions=4, smoothing=2.0)
    assert count.tolist() == [4, 1, 0, 0]  # validation rows not counted
    global_rate = 3 / 5
    assert rate[0] == pytest.approx((3 + 2 * global_rate) / (4 + 2))
    assert rate[1] == pytest.approx((0 + 2 * global_rate) / (1 + 2))
    assert rate[2] == rate[3] == pytest.approx(global_rate)  # unseen: the prior


def test_a_question_seen_once_stays_near_the_global_mean() -> None:
    # question 0 answered 1000 times, 30% right; question 1 once, right
    answers = [(0, int(i % 10 < 3)) for i in range(1000)] + [(1, 1)]
    sequences = sequences_of([answers])
    train_length = np.array([len(answers)])
    rate, _ = smoothed_correct_rate(sequences, train_length, 2, DIFFICULTY_SMOOTHING)
    global_rate = 301 / 1001
    assert abs(rate[1] - global_rate) <= 1 / (1 + DIFFICULTY_SMOOTHING)
    assert rate[0] == pytest.approx(0.3, abs=0.01)  # enough answers: its own rate
    raw, _ = smoothed_correct_rate(sequences, train_length, 2, smoothing=0.0)
    assert raw[1] == 1.0


def test_buckets_order_questions_and_reserve_zero() -> None:
    # questions 0..9 with correct rates 0.0, 0.1, ..., 0.9 over 100 answers each;
    # question 10 is never answered; id 12 is past the metadata (unknown)
    answers = [(q, int(i < 10 * q)) for q in range(10) for i in range(100)] + [(12, 1)]
    sequences = sequences_of([answers])
    buckets = question_difficulty_buckets(
        sequences, np.array([len(answers)]), n_questions=11, buckets=5, smoothing=0.0
    )
    assert buckets.shape == (12,) and buckets.dtype == np.int64
    assert buckets[:10].tolist() == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]  # quantile buckets
    assert buckets[10] == 0  # unseen in training
    assert buckets[11] == 0  # the unknown-question index n_questions


def test_no_training_rows_gives_bucket_zero_everywhere() -> None:
    sequences = sequences_of([[(0, 1), (1, 0)]])
    buckets = question_difficulty_buckets(sequences, np.array([0]), 3, buckets=4)
    assert buckets.tolist() == [0, 0, 0, 0]


def test_rejects_bad_arguments() -> None:
    sequences = sequences_of([[(0, 1)]])
    with pytest.raises(ValueError, match="buckets must be >= 1"):
        question_difficulty_buckets(sequences, np.array([1]), 2, buckets=0)
    with pytest.raises(ValueError, match="smoothing must be >= 0"):
        question_difficulty_buckets(sequences, np.array([1]), 2, buckets=3, smoothing=-1)
    with pytest.raises(ValueError, match="train_length has 2 students"):
        question_difficulty_buckets(sequences, np.array([1, 1]), 2, buckets=3)


# ---------------------------------------------------------------------------------------
# on a fold of the demo


def test_out_of_fold_buckets_by_hand() -> None:
    # three students, one per out-of-fold group; training rows then a validation row
    sequences = sequences_of([[(0, 1), (1, 1), (0, 0)], [(0, 0), (1, 1), (2, 0)], [(0, 1), (2, 1)]])
    train_length = np.array([2, 3, 2])
    loo = out_of_fold_buckets(sequences, train_length, 3, 3, smoothing=0.0)
    # student 0's rows from students 1 and 2: q0 answered 0, 1 (0.5); q1 1 (1.0); q2 0, 1
    # (0.5); edges: quantiles 1/3, 2/3 of (0.5, 1.0, 0.5) = 0.5, 2/3
    # -> q0 bucket 2, q1 bucket 3
    # student 1's from students 0 and 2: q0 1, 1 (1.0); q1 1 (1.0); q2 1 (1.0): one rate,
    # edges 1, 1 -> every seen question bucket 3
    # student 2's from students 0 and 1: q0 1, 0 (0.5); q1 1, 1 (1.0); q2 0 (0.0); edges
    # 1/3, 2/3 -> q0 bucket 2, q2 bucket 1
    # the validation row (student 0, q0): q0's bucket over every training row: rates q0
    # 2/3, q1 1, q2 1/2 -> edges 11/18, 7/9 -> bucket 2
    assert loo.tolist() == [2, 3, 2, 3, 3, 3, 2, 1]
    every = question_difficulty_buckets(sequences, train_length, 3, 3, smoothing=0.0)
    assert every[:3].tolist() == [2, 3, 1]
    assert loo[0] == every[0] and loo[3] != every[0]  # student 1's q0 differs in-sample


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_demo(tmp_path_factory.mktemp("difficulty"), users=30)


@pytest.fixture(scope="module")
def fold(demo: Path) -> FoldData:
    data = load_fold_data(Workspace(demo), 0)
    assert len(data.valid_students) > 0
    return data


def split_masks(data: FoldData) -> tuple[np.ndarray, np.ndarray]:
    """(training, validation) masks over the flat entries of the fold."""
    lengths = data.sequences.lengths()
    student = np.repeat(np.arange(len(lengths)), lengths)
    position = np.arange(len(student)) - data.sequences.offsets[student]
    train = position < data.train_length[student]
    return train, ~train


def buckets_with_responses(data: FoldData, response: np.ndarray) -> np.ndarray:
    sequences = replace(data.sequences, response=response)
    return question_difficulty_buckets(sequences, data.train_length, data.n_questions, 10)


def test_validation_labels_never_change_a_bucket(fold: FoldData) -> None:
    train, valid = split_masks(fold)
    assert valid.sum() > 0
    base = buckets_with_responses(fold, fold.sequences.response)
    flipped = fold.sequences.response.copy()
    flipped[valid] = 1 - flipped[valid]
    assert np.array_equal(buckets_with_responses(fold, flipped), base)
    flipped = fold.sequences.response.copy()
    flipped[train] = 1 - flipped[train]
    assert not np.array_equal(buckets_with_responses(fold, flipped), base)


def test_a_students_answers_never_move_their_own_training_buckets(fold: FoldData) -> None:
    """Flip one training row's answer at a time: no training row of that student's
    out-of-fold group changes its bucket, its own row included, though the row's
    question's bucket over all training rows (its in-sample value) moves for many."""
    train, _ = split_masks(fold)
    args = (fold.train_length, fold.n_questions, 10)
    base = out_of_fold_buckets(fold.sequences, *args)
    per_question = buckets_with_responses(fold, fold.sequences.response)
    lengths = fold.sequences.lengths()
    group = np.repeat(np.arange(len(lengths)) % OUT_OF_FOLD_GROUPS, lengths)
    rows = np.flatnonzero(train)[::20]
    in_sample_moved = 0
    for row in rows:
        flipped = fold.sequences.response.copy()
        flipped[row] = 1 - flipped[row]
        buckets = out_of_fold_buckets(replace(fold.sequences, response=flipped), *args)
        same_group = train & (group == group[row])
        assert np.array_equal(buckets[same_group], base[same_group]), row
        question = fold.sequences.question[row]
        in_sample_moved += buckets_with_responses(fold, flipped)[question] != per_question[question]
    assert len(rows) > 100 and in_sample_moved > 10


def test_questions_seen_only_in_validation_get_bucket_zero(fold: FoldData) -> None:
    train, valid = split_masks(fold)
    only_valid = np.setdiff1d(fold.sequences.question[valid], fold.sequences.question[train])
    buckets = buckets_with_responses(fold, fold.sequences.response)
    assert (buckets[only_valid] == 0).all()
    seen = np.unique(fold.sequences.question[train])
    assert ((buckets[seen] >= 1) & (buckets[seen] <= 10)).all()


def test_install_and_checkpoint_round_trip(fold: FoldData, tmp_path: Path) -> None:
    config = ModelConfig(
        n_questions=fold.n_questions, d_model=16, n_heads=2, difficulty_buckets=10, window=30
    )
    model = SAINT(config)
    buckets = install_difficulty(model, fold)
    assert np.array_equal(model.question_difficulty.numpy(), buckets)
    assert buckets.max() > 1
    path = tmp_path / "model.pt"
    save_checkpoint(path, {"model_config": config.to_dict(), "model_state": model.state_dict()})
    loaded, _ = load_model(path)
    assert torch.equal(loaded.question_difficulty, model.question_difficulty)


def test_install_rejects_a_model_without_the_input(fold: FoldData) -> None:
    model = SAINT(ModelConfig(n_questions=fold.n_questions, d_model=16, n_heads=2))
    with pytest.raises(ValueError, match="no difficulty input"):
        install_difficulty(model, fold)


@pytest.mark.slow
def test_train_script_with_difficulty_buckets(demo: Path, fold: FoldData, run_script) -> None:
    flags = ("--epochs", 1, "--batch-size", 64, "--warmup", 20, "--d-model", 32, "--heads", 4)
    flags = (*flags, "--layers", 1, "--window", 30, "--no-progress")
    done = run_script(
        "03_train.py", *flags, "--run", RUN, "--difficulty-buckets", 10, "--output-dir", demo
    )
    assert done.returncode == 0, done.stderr
    model, checkpoint = load_model(fold0_folder(demo).checkpoint())
    assert checkpoint["model_config"]["difficulty_buckets"] == 10
    # from the rows it trained on: the fold's training rows but the inner split's
    fit_length = load_fold_data(Workspace(demo), 0, inner_share=0.1, seed=0).fit_length
    assert (fit_length <= fold.train_length).all() and (fit_length < fold.train_length).any()
    expected = question_difficulty_buckets(fold.sequences, fit_length, fold.n_questions, 10)
    assert np.array_equal(model.question_difficulty.numpy(), expected)
