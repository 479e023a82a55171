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
from common.workspace import ModelFolder, Run

COLUMNS = ("row_id", "fold", "prediction", "label")
PARTS = ("model_prediction", "trees_prediction")


def write_oof(run: Run) -> Path:
    """(Re)write the run's oof.parquet from every fold{k}/stream_predictions.parquet, under
    a lock on the run's folder (folds streamed side by side each add theirs). 04 is its
    only writer (common.stream.infer.stream_folds)."""
    with file_lock(run.path):
        return _write_oof(run)


def _write_oof(run: Run) -> Path:
    frames = []
    for k in run.folds_holding(ModelFolder.STREAM_PREDICTIONS):
        rows = pd.read_parquet(run.fold(k).stream_predictions)
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
    path = run.oof
    with atomic_file(path) as tmp:
        oof.sort_values(["fold", "row_id"], kind="stable").to_parquet(tmp, index=False)
    return path
