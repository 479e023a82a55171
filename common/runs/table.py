"""The table of runs, output/runs.csv: one row per finished stage (train: a fold trained;
stream: a fold streamed; evaluate: a report) of every run, appended under a lock (on the
output folder) and written whole (temp file, then rename), so runs side by side never
lose a row and a kill never leaves half a file. `05_evaluate.py --runs` prints it
sorted (`sorted_runs`).
"""

from __future__ import annotations

import csv
import io
import math
import re
import time

import pandas as pd

from common.errors import UserError
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
# each number's range, (low, high) inclusive: a value outside it is not one 03, 04 or 05
# wrote (an AUC of 7.5 would sort first)
RANGES = {
    **dict.fromkeys(("selection_auc", "tf_auc", "stream_auc", "model_auc"), (0.0, 1.0)),
    **dict.fromkeys(("auc_fold_mean", "auc_fold_std"), (0.0, 1.0)),
    **dict.fromkeys(("d_model", "heads", "window", "batch_size"), (1.0, math.inf)),
    **dict.fromkeys(("lr", "interactions_per_s", "rows_per_s", "wall_s"), (0.0, math.inf)),
}


def config_columns(train_config: dict, arch: str | None = None) -> dict:
    """The key config fields of a TrainConfig dict (config.json, a checkpoint's
    train_config) as runs.csv columns, of its architecture `arch` (default: its first; a
    config from before --arch: SAINT). SAINT's model column is its preset (saint,
    saint+, custom); another architecture's is its name."""
    arch = arch or (train_config.get("arch") or ("saint",))[0]
    if arch != "saint":
        section = train_config.get(arch, {})
        return {
            "model": arch, "d_model": section.get("d_model"), "layers": section.get("layers"),
            "heads": section.get("n_heads"), "window": section.get("window"),
            "lr": train_config.get("lr"),
        }  # fmt: skip
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
        rows = read_rows(workspace)
        rows.append({k: _shown(row.get(k)) for k in COLUMNS})
        with atomic_file(path) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)


class RunsTableError(UserError):
    """runs.csv is not the table 03, 04 and 05 write (bytes appended, a line cut short)."""


FINISHED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d([+-]\d{4})?")  # time.strftime's


def read_rows(workspace: Workspace) -> list[dict[str, str]]:
    """runs.csv's rows as written (none without the file), checked (`table_problem`);
    RunsTableError naming the file, the line and what is wrong."""
    path = workspace.runs_table
    if not path.exists():
        return []
    try:
        reader = csv.reader(io.StringIO(path.read_text(encoding="utf-8"), newline=""))
        lines = [(reader.line_num, fields) for fields in reader if fields]
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RunsTableError(
            f"{path} cannot be read ({type(error).__name__}: {error}); {DAMAGED}"
        ) from None
    if not lines:
        return []
    header = lines[0][1]
    rows = [dict(zip(header, fields, strict=False)) for _, fields in lines[1:]]  # lengths: below
    problem = table_problem(header, lines[1:], rows)
    if problem:
        raise RunsTableError(f"{path}: line {problem[0]}: {problem[1]}; {DAMAGED}")
    return rows


DAMAGED = (
    "the file is damaged (03, 04 and 05 write it whole): remove the damaged lines, or the "
    "file (each run's folder keeps its results, and the next stage starts a new table)"
)


def table_problem(header: list[str], lines: list, rows: list[dict]) -> tuple[int, str] | None:
    """(line, what is wrong) of runs.csv's first bad line, or None: the header must be
    COLUMNS' (a file from before a column lacks it), each line as long, `finished` a
    clock time and the NUMBERS numbers."""
    if not set(header) <= set(COLUMNS) or not {"finished", "run", "stage"} <= set(header):
        return 1, f"header {','.join(header)[:60]!r} is not runs.csv's"
    for (number, fields), row in zip(lines, rows, strict=True):
        if len(fields) != len(header):
            return number, f"{len(fields)} fields, the header has {len(header)}"
        if not FINISHED.fullmatch(row["finished"]):
            return number, f"finished {row['finished'][:30]!r} is not a clock time"
        for column in NUMBERS:
            if not is_number(row.get(column, "")):
                return number, f"{column} {row[column][:30]!r} is not a number"
            low, high = RANGES[column]
            if row.get(column) and not low <= float(row[column]) <= high:
                return number, f"{column} {row[column][:30]} is outside [{low:g}, {high:g}]"
    return None


def is_number(text: str) -> bool:
    """Whether a NUMBERS cell holds a number, or nothing."""
    try:
        float(text or 0)
    except ValueError:
        return False
    return True


def read_runs(workspace: Workspace) -> pd.DataFrame:
    """runs.csv (read_rows) as a table of COLUMNS: text as written (a run may be named NA
    or null), the NUMBERS as numbers."""
    rows = read_rows(workspace)
    table = pd.DataFrame(rows, columns=list(COLUMNS), dtype=str).fillna("")
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
