"""The output layout (common/layout.py) is an interface: README, the Kaggle notebook cell
and users' scripts name these paths, so a rename must fail here first."""

from __future__ import annotations

from pathlib import Path

from common import layout


def test_the_documented_paths():
    out = Path("output")
    assert layout.data_dir(out) == Path("output/data")
    assert layout.folds_dir(out) == Path("output/folds")
    assert layout.fold_file(out, 3) == Path("output/folds/fold3.npz")
    assert layout.fold_dir(out, 3) == Path("output/fold3")
    assert layout.report_dir(out) == Path("output/report")
    assert layout.state_dir("bundle") == Path("bundle/state")
    assert layout.fold_dir(out, 0) / layout.STREAM_PREDICTIONS == Path(
        "output/fold0/stream_predictions.parquet"
    )
    assert layout.STREAM_SUMMARY == "stream_summary.json"
