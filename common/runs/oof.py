"""A run's out-of-fold predictions, runs/NAME/oof.parquet: row_id, fold, prediction and
label of every question row of every fold streamed so far (04 rewrites it after each
fold), the material a blend with other pipelines needs. With disjoint folds (every
strategy but virtual-time) each streamed question row appears exactly once."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.files import atomic_file, file_lock
from common.layout import OOF_FILE, STREAM_PREDICTIONS, fold_dir, folds_holding

COLUMNS = ("row_id", "fold", "prediction", "label")


def write_oof(run_dir: str | Path) -> Path:
    """(Re)write run_dir/oof.parquet from every fold{k}/stream_predictions.parquet, under a
    lock on the run's folder (folds streamed side by side each add theirs)."""
    with file_lock(run_dir):
        return _write_oof(Path(run_dir))


def _write_oof(run_dir: Path) -> Path:
    frames = []
    for k in folds_holding(run_dir, STREAM_PREDICTIONS):
        rows = pd.read_parquet(
            fold_dir(run_dir, k) / STREAM_PREDICTIONS,
            columns=["row_id", "prediction", "answered_correctly"],
        )
        frames.append(
            pd.DataFrame(
                {
                    "row_id": rows["row_id"].astype("int64"),
                    "fold": pd.Series(k, index=rows.index, dtype="int16"),
                    "prediction": rows["prediction"].astype("float32"),
                    "label": rows["answered_correctly"].astype("int8"),
                }
            )
        )
    oof = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    path = Path(run_dir) / OOF_FILE
    with atomic_file(path) as tmp:
        oof.sort_values(["fold", "row_id"], kind="stable").to_parquet(tmp, index=False)
    return path
