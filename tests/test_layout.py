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
    assert layout.row_folds_file(out) == Path("output/folds/row_folds.csv")
    assert layout.runs_table(out) == Path("output/runs.csv")
    run = layout.run_dir(out, "base")
    assert run == Path("output/runs/base")
    assert layout.fold_dir(run, 3) == Path("output/runs/base/fold3")
    assert layout.full_dir(run) == Path("output/runs/base/full")
    assert layout.report_dir(run) == Path("output/runs/base/report")
    assert run / layout.REPORT_FILE == Path("output/runs/base/report.md")
    assert run / layout.OOF_FILE == Path("output/runs/base/oof.parquet")
    assert layout.state_dir("bundle") == Path("bundle/state")
    assert layout.fold_dir(run, 0) / layout.STREAM_PREDICTIONS == Path(
        "output/runs/base/fold0/stream_predictions.parquet"
    )
    assert layout.fold_dir(run, 0) / layout.VALIDATION_PREDICTIONS == Path(
        "output/runs/base/fold0/validation_predictions.csv"
    )
    assert layout.fold_dir(run, 0) / layout.CONFIG_FILE == Path(
        "output/runs/base/fold0/config.json"
    )
    assert layout.STREAM_SUMMARY == "stream_summary.json"
    kaggle = layout.kaggle_dir(run)
    assert kaggle / layout.KAGGLE_DATASET_SUBDIR == Path("output/runs/base/kaggle/dataset")
    assert kaggle / layout.KAGGLE_KERNEL_SUBDIR == Path("output/runs/base/kaggle/kernel")
    state = layout.state_dir(Path("bundle"))
    assert state / layout.SNAPSHOT_FILE == Path("bundle/state/snapshot.npz")
    assert state / layout.PARTS_FILE == Path("bundle/state/parts.npy")


def test_folds_holding_a_file_are_numbered_fold_folders_only(tmp_path):
    for folder in ("fold0", "fold10", "fold2x", "folds", "fold3"):
        (tmp_path / folder).mkdir()
    for folder in ("fold0", "fold10", "fold2x", "folds"):
        (tmp_path / folder / "best.pt").write_bytes(b"")
    assert layout.folds_holding(tmp_path, "best.pt") == [0, 10]  # fold3 has none
