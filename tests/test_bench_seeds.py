"""bench/bench_seeds.py's table: seeds' predictions matched row by row before averaging."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.bench_seeds import seed_rows
from common.metrics import auc_or_nan


def predictions(rows: list[int], prediction: list[float], label: list[int]) -> pd.DataFrame:
    index = pd.MultiIndex.from_arrays([[0] * len(rows), rows], names=["fold", "row_id"])
    return pd.DataFrame({"prediction": prediction, "label": label}, index=index)


def test_the_mean_is_taken_row_by_row_on_the_rows_every_seed_holds():
    # seed 1 holds the rows in another order and one row more (row 9: left out)
    a = predictions([1, 2, 3, 4], [0.9, 0.2, 0.6, 0.4], [1, 0, 0, 1])
    b = predictions([9, 4, 3, 2, 1], [0.5, 0.1, 0.3, 0.8, 0.7], [1, 1, 0, 0, 1])
    shared, rows = seed_rows({0: a, 1: b})
    assert shared == 4
    labels = np.array([1, 0, 0, 1])
    mean = np.array([0.8, 0.5, 0.45, 0.25])  # rows 1..4, each seed's own row averaged
    assert rows[0][1] == f"{auc_or_nan(labels, a['prediction'].to_numpy()):.4f}"
    assert rows[2][1] == f"{auc_or_nan(labels, mean):.4f}"
    aligned_b = np.array([0.7, 0.8, 0.3, 0.1])
    singles = [auc_or_nan(labels, a["prediction"].to_numpy()), auc_or_nan(labels, aligned_b)]
    assert rows[1][1] == f"{singles[1]:.4f}"
    assert rows[2][2] == f"{auc_or_nan(labels, mean) - np.mean(singles):+.4f}"


def test_seeds_whose_labels_disagree_are_refused():
    a = predictions([1, 2], [0.9, 0.2], [1, 0])
    b = predictions([1, 2], [0.5, 0.1], [0, 0])
    with pytest.raises(SystemExit, match="seed 1"):
        seed_rows({0: a, 1: b})
