"""bench/bench_vs_pykt.py's data for pyKT: the questions ours trains on, in pyKT's format
(the processes themselves are run by the benchmark, not here: pyKT is not a dependency)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest

from bench.bench_vs_pykt import parse_args, pykt_rows


def sequences(lengths: list[int]) -> SimpleNamespace:
    """Students with these numbers of questions; question i of the flat arrays has id
    1000 + i, part i % 7 + 1 and response i % 2, so every field says where it came from."""
    n = sum(lengths)
    flat = np.arange(n)
    return SimpleNamespace(
        offsets=np.concatenate([[0], np.cumsum(lengths)]),
        question=(1000 + flat).astype(np.int16),
        part=(flat % 7 + 1).astype(np.int8),
        response=(flat % 2).astype(np.int8),
    )


def ints(field: str) -> list[int]:
    return [int(v) for v in field.split(",")]


def test_each_students_range_is_cut_into_padded_windows():
    seq = sequences([250, 5, 40])
    # student 0: questions 0..249 in windows of 100, 100, 50; student 1: one question
    # (nothing to predict: left out); student 2: questions 10..39
    rows = pykt_rows(seq, [0, 1, 2], [0, 4, 10], [250, 5, 40], fold=1, window=100)
    assert [(r[0], r[1]) for r in rows] == [(1, 0), (1, 0), (1, 0), (1, 2)]
    first, second, last, other = (ints(r[2]) for r in rows)
    assert first == list(range(1000, 1100)) and second == list(range(1100, 1200))
    assert last == list(range(1200, 1250)) + [-1] * 50
    assert other == list(range(1000 + 255 + 10, 1000 + 255 + 40)) + [-1] * 70
    concepts, responses, masks = (ints(rows[2][i]) for i in (3, 4, 5))
    assert concepts[:3] == [200 % 7 + 1, 201 % 7 + 1, 202 % 7 + 1] and concepts[50:] == [-1] * 50
    assert responses[:2] == [0, 1] and responses[50:] == [-1] * 50
    assert masks == [1] * 50 + [-1] * 50


def test_every_trained_question_is_in_exactly_one_window():
    seq = sequences([7, 300, 1, 99, 150])  # the student of one question is left out
    end = np.array([7, 300, 1, 99, 150])
    rows = pykt_rows(seq, range(5), np.zeros(5, dtype=int), end, fold=1, window=100)
    written = [q for r in rows for q in ints(r[2]) if q >= 0]
    kept = [1000 + i for s in (0, 1, 3, 4) for i in range(seq.offsets[s], seq.offsets[s + 1])]
    assert sorted(written) == kept


def test_the_batch_sizes_are_pairs_of_runs():
    args = parse_args(["--pykt-python", sys.executable, "--batch-sizes", "512,64"])
    assert args.batch_sizes == [512, 64]


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--batch-sizes", "0,64"], "--batch-sizes"),
        (["--batch-sizes", "x"], "--batch-sizes"),
        (["--users", "1"], "--users"),
        (["--seed", "-1"], "--seed"),
        (["--pykt-python", "no/such/python"], "--pykt-python"),
    ],
)
def test_bad_flags_are_refused(flags, named, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(["--pykt-python", sys.executable, *flags])
    assert stop.value.code == 2 and named in capsys.readouterr().err
