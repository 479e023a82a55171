"""The output folder's layout, the one place its names are spelled:

<output>/data/               stage 1: arrays/, questions.parquet, lectures.parquet, ...
<output>/folds/              stage 2: fold{k}.npz, the fold manifest, row_folds.csv
<output>/runs.csv            one row per finished stage of every run (common/runs/table.py)
<output>/runs/NAME/          one experiment (03 --run NAME; see common/runs/folders.py):
    fold{k}/                 stages 3 and 4: checkpoints, history.csv, config.json,
                             validation_predictions.csv, stream predictions
    full/                    03 --full-data: the submission's model, every student trained
    oof.parquet              04: out-of-fold predictions of every fold streamed so far
    report.md, report/       stage 5: the report and its figures
    kaggle/dataset/          the Kaggle dataset 04 exports: code/, the model, state/
    kaggle/kernel/           the Kaggle notebook that runs it (see common/stream/kaggle_export.py)

Functions that name a run's files take the run's folder (`run_dir(output, name)`); data/
and folds/ are always read from the output folder itself.
"""

from __future__ import annotations

from pathlib import Path

DATA_SUBDIR = "data"
ARRAYS_SUBDIR = "arrays"  # inside data/
FOLDS_SUBDIR = "folds"
REPORT_SUBDIR = "report"
FOLD_PREFIX = "fold"  # fold{k}/
RUNS_SUBDIR = "runs"
RUNS_TABLE = "runs.csv"  # in the output folder, beside runs/
OOF_FILE = "oof.parquet"  # in a run's folder: row_id, fold, prediction, label
ROW_FOLDS = "row_folds.csv"  # in folds/: row_id, fold, role
REPORT_FILE = "report.md"
FULL_SUBDIR = "full"
KAGGLE_SUBDIR = "kaggle"  # 04's export: dataset/ and kernel/ (or --kaggle-dir)
KAGGLE_DATASET_SUBDIR = "dataset"
KAGGLE_KERNEL_SUBDIR = "kernel"
STATE_SUBDIR = "state"  # in the dataset: the online state at the test's start
SNAPSHOT_FILE = "snapshot.npz"  # every student's last receptive_field questions
PARTS_FILE = "parts.npy"  # part (1-7) by question id
SKILLS_FILE = "skills.npy"  # skill (first tag, -1: none) by question id
CODE_SUBDIR = "code"  # in the dataset: the inference modules of the package
# in fold{k}/, written by 04 and read by 05
STREAM_PREDICTIONS = "stream_predictions.parquet"
STREAM_SUMMARY = "stream_summary.json"  # the checkpoint, what chose it, the fold
# in fold{k}/, written by 03 with best.pt (--select-on inner) and read by 05: that
# checkpoint's teacher-forced predictions of the inner validation split, on which 05
# chooses the blend's weight
INNER_PREDICTIONS = "inner_predictions.parquet"
# in fold{k}/, written by 04: the fold's streamed predictions in the competition's columns
# (row_id, answered_correctly); only the Kaggle notebook writes a submission.csv
VALIDATION_PREDICTIONS = "validation_predictions.csv"
DATA_FINGERPRINT = "fingerprint.json"  # in data/: a digest of stage 1's output (02 records it)
CONFIG_FILE = "config.json"  # in fold{k}/ and full/: the run's config, --config reads it back
# in fold{k}/ and full/, written by 04 beside the checkpoint it streams (and shipped with it
# in the Kaggle bundle's <model>/): the boosted trees over past-event features, the inputs
# their features read (the question-rate table, each question's skill), the blend's weight
# and how it was chosen; and the trees' permutation importance on the inner split
TREES_FILE = "trees.npz"
TREE_INPUTS_FILE = "tree_inputs.npz"
BLEND_FILE = "blend.json"
TREE_IMPORTANCE = "tree_importance.csv"
FEATURE_SNAPSHOT_FILE = "features.npz"  # in the dataset's state/: every student's history


def data_dir(output_dir: str | Path) -> Path:
    return Path(output_dir) / DATA_SUBDIR


def folds_dir(output_dir: str | Path) -> Path:
    return Path(output_dir) / FOLDS_SUBDIR


def fold_file(output_dir: str | Path, fold: int) -> Path:
    """Stage 2's definition of fold `fold` (which rows validate, which students are new)."""
    return folds_dir(output_dir) / f"fold{fold}.npz"


def runs_dir(output_dir: str | Path) -> Path:
    return Path(output_dir) / RUNS_SUBDIR


def run_dir(output_dir: str | Path, run: str) -> Path:
    """The folder of run `run` (checked by common.runs.folders.check_run_name)."""
    return runs_dir(output_dir) / run


def runs_table(output_dir: str | Path) -> Path:
    return Path(output_dir) / RUNS_TABLE


def row_folds_file(output_dir: str | Path) -> Path:
    return folds_dir(output_dir) / ROW_FOLDS


def fold_dir(run_dir: str | Path, fold: int) -> Path:
    """Where stages 3 and 4 write for fold `fold` of the run in `run_dir`."""
    return Path(run_dir) / f"{FOLD_PREFIX}{fold}"


def folds_holding(run_dir: str | Path, name: str) -> list[int]:
    """The folds k, ascending, whose fold{k}/ in `run_dir` holds a file `name` (what
    stages 3 and 4 have written: best.pt, stream_predictions.parquet)."""
    found = []
    for path in Path(run_dir).glob(f"{FOLD_PREFIX}*/{name}"):
        k = path.parent.name[len(FOLD_PREFIX) :]
        if k.isdigit() and path.parent == fold_dir(run_dir, int(k)):
            found.append(int(k))
    return sorted(found)


def full_dir(run_dir: str | Path) -> Path:
    """Where 03 --full-data writes the model trained on every student."""
    return Path(run_dir) / FULL_SUBDIR


def model_dir(run_dir: str | Path, fold: int, full: bool = False) -> Path:
    """The folder of a run's checkpoints: full/ for the full-data model, else fold{k}/."""
    return full_dir(run_dir) if full else fold_dir(run_dir, fold)


def report_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / REPORT_SUBDIR


def kaggle_dir(run_dir: str | Path) -> Path:
    """04's default export folder (dataset/ and kernel/ inside)."""
    return Path(run_dir) / KAGGLE_SUBDIR


def state_dir(bundle: str | Path) -> Path:
    return Path(bundle) / STATE_SUBDIR
