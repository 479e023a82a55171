"""The output folder, opened once: every folder and file name the stages write is spelled
here, and nowhere else (tests/test_workspace.py greps common/ and bench/ for them).

<output>/data/               stage 1: arrays/, questions.parquet, lectures.parquet, ...
<output>/folds/              stage 2: fold{k}.npz, folds.json, row_folds.csv
<output>/runs.csv            one row per finished stage of every run (common/runs/table.py)
<output>/runs/NAME/          one experiment (03 --run NAME; see common/runs/folders.py):
    fold{k}/                 stages 3 and 4: checkpoints, history.csv, config.json,
                             validation_predictions.csv, stream predictions, the trees
    full/                    03 --full-data: the submission's model, every student trained
    oof.parquet              04: out-of-fold predictions of every fold streamed so far
    report.md, report/       stage 5: the report and its figures
    kaggle/dataset/          the Kaggle dataset 04 exports: code/, the model, state/
    kaggle/kernel/           the Kaggle notebook that runs it (see common/stream/kaggle_export.py)

A numbered script makes one `Workspace(output_dir)` and hands it (or one of its `Run`s)
down. The folder objects (`DataFolder`, `FoldsFolder`, `ModelFolder`, `ReportFolder`,
`Bundle`) name the files of one folder; they wrap any path, so a stage that writes its
folder whole (a temp folder, renamed at the end) names the files of the temp folder the
same way. What is loaded from the workspace (the data set, the folds, a fold's data) is
loaded once per process: `Workspace.once` keeps it (the loaders live in common/data/).

This module ships in the Kaggle bundle (the notebook's state/ names): Python 3.7 syntax.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from common.files import check_folders


class DataFolder:
    """data/: what stage 1 wrote."""

    NAME = "data"
    # what stage 1 writes here (fnmatch patterns): it replaces these, and keeps the rest
    WRITES = (
        "arrays", "train.parquet", "questions.parquet", "lectures.parquet",
        "fingerprint.json", "preprocess_summary.json", "*_run.json",
    )  # fmt: skip

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def arrays(self) -> Path:
        return self.path / "arrays"

    def array(self, name: str) -> Path:
        """One row array (or users, offsets) of arrays/, raw bytes."""
        return self.arrays / f"{name}.bin"

    @property
    def arrays_manifest(self) -> Path:
        return self.arrays / "manifest.json"

    @property
    def train_parquet(self) -> Path:
        return self.path / "train.parquet"

    @property
    def questions(self) -> Path:
        return self.path / "questions.parquet"

    @property
    def lectures(self) -> Path:
        return self.path / "lectures.parquet"

    @property
    def fingerprint(self) -> Path:
        """A digest of stage 1's output (02 records it)."""
        return self.path / "fingerprint.json"

    @property
    def summary(self) -> Path:
        return self.path / "preprocess_summary.json"

    def record(self, stage: str) -> Path:
        return record_file(self.path, stage)


class FoldsFolder:
    """folds/: what stage 2 wrote."""

    NAME = "folds"
    WRITES = ("fold[0-9]*.npz", "folds.json", "row_folds.csv")  # as DataFolder.WRITES

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def fold(self, index: int) -> Path:
        """Fold `index`'s definition (which rows validate, which students are new)."""
        return self.path / f"fold{index}.npz"

    @property
    def manifest(self) -> Path:
        """The fold config, statistics and the data they were made from."""
        return self.path / "folds.json"

    @property
    def row_folds(self) -> Path:
        """row_id, fold, role of every row."""
        return self.path / "row_folds.csv"


class ModelFolder:
    """A run's fold{k}/ (or full/): 03's checkpoints and records, 04's predictions and,
    beside the checkpoint it streams (and shipped with it in the Kaggle bundle's
    <model>/), the boosted trees over past-event features, the inputs their features read
    and the blend's weight."""

    FULL = "full"
    PREFIX = "fold"
    BEST = "best.pt"
    TREES = "trees.npz"
    TREE_INPUTS = "tree_inputs.npz"
    BLEND = "blend.json"
    BLEND_FILES = (TREES, TREE_INPUTS, BLEND)  # what the export copies beside the model
    STREAM_PREDICTIONS = "stream_predictions.parquet"
    LOCK = ".lock"  # the process writing the folder (common.runs.folders.fold_lock)

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def name(self) -> str:
        return self.path.name

    @classmethod
    def name_of(cls, fold: int, full: bool = False) -> str:
        """The folder's name in a run and in the Kaggle bundle: fold{k}, or full."""
        return cls.FULL if full else f"{cls.PREFIX}{fold}"

    def checkpoint(self, name: str = BEST) -> Path:
        return self.path / name

    def member(self, arch: str) -> ModelFolder:
        """The folder of architecture `arch` of a run that trains several (03 --arch):
        <fold{k}>/<arch>/, with its own checkpoints, history and config; the first
        architecture trains in the fold's folder itself."""
        return ModelFolder(self.path / arch)

    def file(self, name: str) -> Path:
        """A file of the folder by its name here (one of BLEND_FILES, STREAM_PREDICTIONS)."""
        return self.path / name

    def epoch_checkpoint(self, epoch: int) -> Path:
        return self.path / f"epoch_{epoch:02d}.pt"

    def latest_epoch_checkpoint(self) -> Path | None:
        """The last epoch's checkpoint written, or None."""
        found = sorted(self.path.glob("epoch_*.pt"))
        return found[-1] if found else None

    def record(self, stage: str) -> Path:
        """{stage}_run.json: argv, resolved config, versions, start time."""
        return record_file(self.path, stage)

    @property
    def lock(self) -> Path:
        """Names the process that writes the folder while it does (pid, command)."""
        return self.path / self.LOCK

    @property
    def history(self) -> Path:
        return self.path / "history.csv"

    @property
    def config(self) -> Path:
        """The run's config (03 --config reads it back)."""
        return self.path / "config.json"

    @property
    def inner_predictions(self) -> Path:
        """03's best checkpoint's predictions of the inner split (the blend's weight)."""
        return self.path / "inner_predictions.parquet"

    @property
    def stream_predictions(self) -> Path:
        return self.path / self.STREAM_PREDICTIONS

    @property
    def stream_summary(self) -> Path:
        """The checkpoint streamed, what chose it, the fold."""
        return self.path / "stream_summary.json"

    @property
    def stream_metrics_csv(self) -> Path:
        return self.path / "stream_metrics.csv"

    @property
    def stream_metrics_md(self) -> Path:
        return self.path / "stream_metrics.md"

    @property
    def validation_predictions(self) -> Path:
        """The fold's streamed predictions in the competition's columns."""
        return self.path / "validation_predictions.csv"

    @property
    def trees(self) -> Path:
        return self.path / self.TREES

    @property
    def tree_inputs(self) -> Path:
        return self.path / self.TREE_INPUTS

    @property
    def blend(self) -> Path:
        return self.path / self.BLEND

    @property
    def tree_importance(self) -> Path:
        return self.path / "tree_importance.csv"


class ReportFolder:
    """report/ of a run: 05's tables and figures."""

    NAME = "report"
    FIGURES: ClassVar[dict[str, str]] = {
        "roc": "roc.png",
        "reliability": "reliability.png",
        "training_curves": "training_curves.png",
        "tree_importance": "tree_importance.png",
    }
    WRITES = (*FIGURES.values(), "metrics.*", "slices.*", "summary.json", "*_run.json")

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def table(self, name: str, suffix: str) -> Path:
        """metrics.csv, slices.md, ...: a table of the report."""
        return self.path / f"{name}.{suffix}"

    def figure(self, key: str) -> Path:
        return self.path / self.FIGURES[key]

    @classmethod
    def link(cls, key: str) -> str:
        """A figure as report.md (beside report/) links it."""
        return f"{cls.NAME}/{cls.FIGURES[key]}"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    def record(self, stage: str) -> Path:
        return record_file(self.path, stage)


class Bundle:
    """The Kaggle dataset 04 exports (kaggle/dataset/): code/, <model>/ (fold{k} or full,
    its best.pt and blend files) and state/ (every student at the test's start)."""

    CODE = "code"
    STATE = "state"
    METADATA = "dataset-metadata.json"
    WRITES = (CODE, STATE, METADATA, "fold[0-9]*", "full")  # as DataFolder.WRITES

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def model(self, name: str) -> ModelFolder:
        return ModelFolder(self.path / name)

    @property
    def code(self) -> Path:
        return self.path / self.CODE

    @property
    def state(self) -> Path:
        return self.path / self.STATE

    @property
    def snapshot(self) -> Path:
        """Every student's last receptive_field questions."""
        return self.state / "snapshot.npz"

    def member_snapshot(self, arch: str) -> Path:
        """Another architecture's start state (a run of several, 03 --arch: its model's
        <model>/<arch>/best.pt)."""
        return self.state / f"snapshot-{arch}.npz"

    @property
    def parts(self) -> Path:
        """Part (1-7) by question id."""
        return self.state / "parts.npy"

    @property
    def skills(self) -> Path:
        """Skill (first tag, -1: none) by question id."""
        return self.state / "skills.npy"

    @property
    def features(self) -> Path:
        """Every student's question history, for the trees' features."""
        return self.state / "features.npz"

    @property
    def metadata(self) -> Path:
        return self.path / self.METADATA


class KaggleFolder:
    """04's export: dataset/ (a `Bundle`) and kernel/ (the notebook)."""

    NOTEBOOK = "submission.ipynb"
    KERNEL_METADATA = "kernel-metadata.json"
    KERNEL_WRITES = (NOTEBOOK, KERNEL_METADATA)  # what 04 writes in kernel/

    def __init__(self, path: str | Path):
        self.path = Path(path)
        check_folders(self.path, self.dataset, self.kernel, self.trial)

    @property
    def dataset(self) -> Path:
        return self.path / "dataset"

    @property
    def kernel(self) -> Path:
        return self.path / "kernel"

    @property
    def trial(self) -> Path:
        """Where 04 --test-csv tries the notebook."""
        return self.path / "trial"


class Run:
    """One experiment, <output>/runs/NAME/."""

    KAGGLE = "kaggle"

    def __init__(self, workspace: Workspace, name: str):
        self.workspace = workspace
        self.name = name
        self.path = workspace.runs / name
        check_folders(self.path)
        if self.path.is_dir():  # its model folders, report/ and kaggle/
            check_folders(*(p for p in self.path.iterdir() if self._is_folder_name(p.name)))

    @staticmethod
    def _is_folder_name(name: str) -> bool:
        """A name the run keeps a folder under: fold{k}, full, report, kaggle."""
        return name in (ModelFolder.FULL, ReportFolder.NAME, Run.KAGGLE) or (
            name.startswith(ModelFolder.PREFIX) and name[len(ModelFolder.PREFIX) :].isdigit()
        )

    def fold(self, index: int) -> ModelFolder:
        """Where stages 3 and 4 write for fold `index`."""
        return ModelFolder(self.path / ModelFolder.name_of(index))

    @property
    def full(self) -> ModelFolder:
        """Where 03 --full-data writes the model trained on every student."""
        return ModelFolder(self.path / ModelFolder.name_of(0, full=True))

    def model(self, fold: int, full: bool = False) -> ModelFolder:
        """full/ for the full-data model, else fold{k}/."""
        return self.full if full else self.fold(fold)

    def folds_holding(self, name: str) -> list[int]:
        """The folds k, ascending, whose fold{k}/ holds a file `name` (what stages 3 and 4
        have written: best.pt, stream_predictions.parquet)."""
        found = []
        for path in self.path.glob(f"{ModelFolder.PREFIX}*/{name}"):
            k = path.parent.name[len(ModelFolder.PREFIX) :]
            if k.isdigit() and path.parent == self.fold(int(k)).path:
                found.append(int(k))
        return sorted(found)

    @property
    def oof(self) -> Path:
        """04: out-of-fold predictions of every fold streamed so far."""
        return self.path / "oof.parquet"

    @property
    def report_file(self) -> Path:
        return self.path / "report.md"

    @property
    def report(self) -> ReportFolder:
        return ReportFolder(self.path / ReportFolder.NAME)

    @property
    def kaggle(self) -> KaggleFolder:
        """04's default export folder."""
        return KaggleFolder(self.path / Run.KAGGLE)

    def exists(self) -> bool:
        return self.path.is_dir()


class Workspace:
    """The output folder: its data, folds and runs; what is loaded from it, once."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._loaded: dict[Any, Any] = {}
        check_folders(self.path, self.data.path, self.folds.path, self.runs)

    def __repr__(self) -> str:
        return f"Workspace({str(self.path)!r})"

    @property
    def data(self) -> DataFolder:
        return DataFolder(self.path / DataFolder.NAME)

    @property
    def folds(self) -> FoldsFolder:
        return FoldsFolder(self.path / FoldsFolder.NAME)

    @property
    def runs(self) -> Path:
        return self.path / "runs"

    @property
    def runs_table(self) -> Path:
        """One row per finished stage of every run, beside runs/."""
        return self.path / "runs.csv"

    def run(self, name: str) -> Run:
        return Run(self, name)

    def run_names(self) -> list[str]:
        """The runs with a folder, sorted."""
        if not self.runs.exists():
            return []
        return sorted(p.name for p in self.runs.iterdir() if p.is_dir())

    def record(self, stage: str) -> Path:
        return record_file(self.path, stage)

    def once(self, key: Any, load: Callable[[], Any]) -> Any:
        """What `load()` returns, loaded the first time `key` is asked for in this
        workspace and kept (the data set, the folds' manifest, a fold)."""
        if key not in self._loaded:
            self._loaded[key] = load()
        return self._loaded[key]

    def forget(self, key: Any | None = None) -> None:
        """Drop what `once` kept (everything, or `key`): what a stage rewrote, or what a
        stream no longer needs."""
        if key is None:
            self._loaded.clear()
        else:
            self._loaded.pop(key, None)


def record_file(folder: str | Path, stage: str) -> Path:
    """`{stage}_run.json` in `folder`: what every stage writes about itself."""
    return Path(folder) / f"{stage}_run.json"
