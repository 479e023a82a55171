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
    kaggle = layout.kaggle_dir(out)
    assert kaggle / layout.KAGGLE_DATASET_SUBDIR == Path("output/kaggle/dataset")
    assert kaggle / layout.KAGGLE_KERNEL_SUBDIR == Path("output/kaggle/kernel")
    state = layout.state_dir(kaggle / layout.KAGGLE_DATASET_SUBDIR)
    assert state / layout.SNAPSHOT_FILE == Path("output/kaggle/dataset/state/snapshot.npz")
    assert state / layout.PARTS_FILE == Path("output/kaggle/dataset/state/parts.npy")


def test_folds_holding_a_file_are_numbered_fold_folders_only(tmp_path):
    for folder in ("fold0", "fold10", "fold2x", "folds", "fold3"):
        (tmp_path / folder).mkdir()
    for folder in ("fold0", "fold10", "fold2x", "folds"):
        (tmp_path / folder / "best.pt").write_bytes(b"")
    assert layout.folds_holding(tmp_path, "best.pt") == [0, 10]  # fold3 has none
