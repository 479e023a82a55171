"""bench/bench_learning_curve.py's flags and table (its pipeline is 01..05's, tested
elsewhere)."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.bench_learning_curve import parse_args, report_table


def test_epochs_are_one_for_every_size_or_one_per_size():
    args = parse_args(["--sizes", "8000,2000", "--epochs", "3"])
    assert args.sizes == [2000, 8000] and args.epochs == {2000: 3, 8000: 3}
    args = parse_args(["--sizes", "2000,8000,32000", "--epochs", "5,5,3"])
    assert args.epochs == {2000: 5, 8000: 5, 32000: 3}


@pytest.mark.parametrize("epochs", ["5,3", "0", "5,x,3"])
def test_bad_epochs_are_refused(epochs, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(["--sizes", "2000,8000,32000", "--epochs", epochs])
    assert stop.value.code == 2 and "--epochs" in capsys.readouterr().err


def test_the_table_gives_each_size_its_epochs_and_best_epoch():
    """Each row: its epochs (best.pt's), every scorer, and the blend against the best
    single scorer, the other families' members included where the run has them."""
    nan = float("nan")
    table = pd.DataFrame(
        [
            {"students": 2000, "variant": "model", "epochs": 5, "best_epoch": 4,
             "model": 0.78, "trees": 0.79, "blend": 0.795, "oracle": 0.80,
             "lstm": nan, "lqrnn": nan},
            {"students": 32000, "variant": "model", "epochs": 3, "best_epoch": 3,
             "model": 0.80, "trees": 0.79, "blend": 0.805, "oracle": 0.80,
             "lstm": nan, "lqrnn": nan},
            {"students": 8000, "variant": "every family", "epochs": 5, "best_epoch": 5,
             "model": 0.80, "trees": 0.79, "blend": 0.815, "oracle": 0.82,
             "lstm": 0.81, "lqrnn": 0.79},
        ]
    )  # fmt: skip
    lines = []
    report_table(lines.append, table)
    rows = {line.split("|")[1].strip(): line for line in lines[0].splitlines()[2:]}
    assert "| 5 (4) | 0.7800 | — | — | 0.7900 | 0.7950 | -0.0100 | +0.0050 |" in rows["2,000"]
    assert "| 3 (3) | 0.8000 | — | — | 0.7900 | 0.8050 | +0.0100 | +0.0050 |" in rows["32,000"]
    families = "| 5 (5) | 0.8000 | 0.8100 | 0.7900 | 0.7900 | 0.8150 | +0.0100 | +0.0050 |"
    assert families in rows["8,000"]  # against the LSTM, the best single scorer
