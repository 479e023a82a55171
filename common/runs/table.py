"""The table of runs, output/runs.csv: one row per finished stage (train: a fold trained;
stream: a fold streamed; evaluate: a report) of every run, appended under a lock (on the
output folder) and written whole (temp file, then rename), so runs side by side never
lose a row and a kill never leaves half a file. `05_evaluate.py --runs` prints it
sorted (`sorted_runs`).
"""

from __future__ import annotations

import csv
import math
import time

import pandas as pd

from common.files import atomic_file, file_lock
from common.model.saint import preset_name
from common.workspace import Workspace

COLUMNS = (
    "finished", "run", "stage", "folds", "commit",
    "model", "d_model", "layers", "heads", "window", "epochs", "lr", "batch_size",
    "best_epoch", "selected_on", "selection_auc", "tf_auc", "stream_auc", "model_auc",
    "auc_fold_mean", "auc_fold_std", "interactions_per_s", "rows_per_s", "wall_s",
)  # fmt: skip
NUMBERS = (
    "d_model", "heads", "window", "lr", "batch_size", "selection_auc", "tf_auc", "stream_auc",
    "model_auc", "auc_fold_mean", "auc_fold_std", "interactions_per_s", "rows_per_s", "wall_s",
)  # fmt: skip
# what `05 --runs` shows: the columns above but the clock time
SHOWN = COLUMNS[1:]


def config_columns(train_config: dict) -> dict:
    """The key config fields of a TrainConfig dict (config.json, a checkpoint's
    train_config) as runs.csv columns."""
    model = train_config.get("model", {})
    return {
        "model": preset_name(model.get("decoder_features", ())),
        "d_model": model.get("d_model"),
        "layers": f"{model.get('encoder_layers')}+{model.get('decoder_layers')}",
        "heads": model.get("n_heads"),
        "window": model.get("window"),
        "lr": train_config.get("lr"),
    }


def _shown(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def append_run_row(workspace: Workspace, row: dict) -> None:
    """Append `row` (keys from COLUMNS; the clock time is added) to output/runs.csv."""
    unknown = set(row) - set(COLUMNS)
    if unknown:
        raise ValueError(f"not runs.csv columns: {sorted(unknown)}")
    row = {"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")} | row
    path = workspace.runs_table
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.parent):  # the output folder: a lock file would sit beside it
        rows = []
        if path.exists():
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
        rows.append({k: _shown(row.get(k)) for k in COLUMNS})
        with atomic_file(path) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)


def read_runs(workspace: Workspace) -> pd.DataFrame:
    path = workspace.runs_table
    if not path.exists():
        return pd.DataFrame(columns=list(COLUMNS))
    # text as written (a run may be named NA or null); the figures as numbers
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    table = table.reindex(columns=list(COLUMNS), fill_value="")  # a file from before a column
    for column in NUMBERS:
        table[column] = pd.to_numeric(table[column].replace("", None), errors="coerce")
    return table


def latest_run(workspace: Workspace, stage: str = "train") -> str | None:
    """The run of the table's last `stage` row (None without one)."""
    table = read_runs(workspace)
    table = table[table["stage"] == stage]
    return None if table.empty else str(table["run"].iloc[-1])


def sorted_runs(workspace: Workspace) -> pd.DataFrame:
    """The table, best first: by streamed AUC (a report's pooled AUC, a fold's stream),
    then teacher-forced AUC, rows without either last."""
    table = read_runs(workspace)
    order = table.sort_values(
        ["stream_auc", "tf_auc", "run", "stage"],
        ascending=[False, False, True, True],
        na_position="last",
        kind="stable",
    )
    return order.reset_index(drop=True)


def _cell(column: str, value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        if column.endswith(("auc", "auc_fold_mean", "auc_fold_std")):
            return f"{value:.4f}"
        if column.endswith(("_per_s", "wall_s")):
            return f"{value:,.0f}"
        return f"{value:g}"
    return str(value)


def runs_text(workspace: Workspace) -> str:
    table = sorted_runs(workspace)
    if table.empty:
        return f"no runs yet: {workspace.runs_table} is written by 03, 04 and 05"
    shown = pd.DataFrame({c: [_cell(c, v) for v in table[c]] for c in SHOWN})
    return shown.to_string(index=False)
