"""A run's out-of-fold predictions, runs/NAME/oof.parquet: row_id, fold, prediction (what
04 streamed and a submission would hold: the blend where the run has trees) and label of
every question row of every fold streamed so far (04 rewrites it after each fold), and
with a blend its parts, model_prediction and trees_prediction: the material a blend with
other pipelines needs. With disjoint folds (every
strategy but virtual-time) each streamed question row appears exactly once."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from common.files import atomic_file, file_lock
from common.layout import OOF_FILE, STREAM_PREDICTIONS, fold_dir, folds_holding

COLUMNS = ("row_id", "fold", "prediction", "label")
PARTS = ("model_prediction", "trees_prediction")


def write_oof(run_dir: str | Path) -> Path:
    """(Re)write run_dir/oof.parquet from every fold{k}/stream_predictions.parquet, under a
    lock on the run's folder (folds streamed side by side each add theirs)."""
    with file_lock(run_dir):
        return _write_oof(Path(run_dir))


def _write_oof(run_dir: Path) -> Path:
    frames = []
    for k in folds_holding(run_dir, STREAM_PREDICTIONS):
        rows = pd.read_parquet(fold_dir(run_dir, k) / STREAM_PREDICTIONS)
        frame = pd.DataFrame(
            {
                "row_id": rows["row_id"].astype("int64"),
                "fold": pd.Series(k, index=rows.index, dtype="int16"),
                "prediction": rows["prediction"].astype("float32"),
                "label": rows["answered_correctly"].astype("int8"),
            }
        )
        for column in PARTS:  # a stream that submitted the blend keeps its two parts
            if column in rows:
                frame[column] = rows[column].astype("float32")
        frames.append(frame)
    oof = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    path = Path(run_dir) / OOF_FILE
    with atomic_file(path) as tmp:
        oof.sort_values(["fold", "row_id"], kind="stable").to_parquet(tmp, index=False)
    return path
