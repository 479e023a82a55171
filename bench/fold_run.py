"""One fold of a benchmark's run: 03_train.py trains it, 04_infer.py streams it, and what
they wrote is read back from their files (history.csv, stream_summary.json, best.pt), not
from their logs.

train_and_stream is the one way the benchmarks train and stream a variant: the demo
variants of bench_defaults, bench_ablation and bench_options, each fold of the KT
benchmark (bench/kt/run.py) and each code version of bench_context.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.benchlib import BENCH_RUN, REPO, run, script
from common.files import write_json
from common.model.checkpoint import read_checkpoint
from common.workspace import ModelFolder, Workspace

RESUMED_FILE = "bench_resumed.json"  # in the fold's folder, beside what 03 wrote


@dataclass(frozen=True)
class FoldRun:
    """Fold `fold` of run `run` in `workspace` (its data/ and folds/ there or linked).
    `run` None is the layout of the code before runs existed (fold{k}/ in the output dir
    itself, no --run flag), which bench_context's checkout of the older code writes."""

    workspace: Workspace
    run: str | None = BENCH_RUN
    fold: int = 0

    @property
    def folder(self) -> ModelFolder:
        """Where 03 and 04 write this fold's files."""
        if self.run is None:
            return ModelFolder(self.workspace.path / ModelFolder.name_of(self.fold))
        return self.workspace.run(self.run).fold(self.fold)

    def where(self) -> list[str]:
        """The flags that point 03 and 04 at this fold."""
        run_flag = [] if self.run is None else ["--run", self.run]
        return ["--output-dir", str(self.workspace.path), *run_flag, "--fold", str(self.fold)]

    def train_command(self, flags: Sequence[object] = (), code: Path = REPO) -> list[str]:
        """03_train.py of the checkout `code` on this fold with `flags`."""
        # --resume: an interrupted benchmark continues after its last whole epoch (with
        # the learning-rate schedule of the whole run, so the same as one uninterrupted run)
        tail = ("--resume", "--no-progress")
        return script("03_train.py", *self.where(), *flags, *tail, code=code)

    def stream_command(self, flags: Sequence[object] = (), code: Path = REPO) -> list[str]:
        """04_infer.py of the checkout `code` streaming this fold's validation rows."""
        tail = ("--no-export", "--no-progress")  # the Kaggle bundle is not what is measured
        return script("04_infer.py", *self.where(), *flags, *tail, code=code)

    # -- what 03 and 04 wrote ----------------------------------------------------------
    def streamed(self) -> bool:
        return self.folder.stream_summary.exists()

    def stream_summary(self) -> dict:
        return json.loads(self.folder.stream_summary.read_text())

    def history(self) -> pd.DataFrame:
        """history.csv: one row per trained epoch (resumed runs included)."""
        return pd.read_csv(self.folder.history)

    def trained_epochs(self) -> int:
        history = self.folder.history
        return len(pd.read_csv(history)) if history.exists() else 0

    def best_checkpoint(self) -> dict:
        """best.pt's payload: the model streamed by default, and how it was trained
        (train_config, resolved, epoch, best_epoch; common/train/outputs.py)."""
        return read_checkpoint(self.folder.checkpoint(), "cpu")

    def resumed_after(self) -> list[int]:
        """The epochs after which an earlier, interrupted 03 left this fold (03 says so
        only in its log, so train_and_stream notes them here)."""
        path = self.folder.path / RESUMED_FILE
        return json.loads(path.read_text())["resumed_after"] if path.exists() else []

    def note_resumed_after(self, epoch: int) -> None:
        path = self.folder.path / RESUMED_FILE
        write_json(path, {"resumed_after": [*self.resumed_after(), epoch]})


def train_and_stream(
    fold: FoldRun,
    train_flags: Sequence[object] = (),
    stream_flags: Sequence[object] = (),
    *,
    logs: Path | None = None,
    label: str | None = None,
    code: Path = REPO,
    say=print,
) -> dict[str, float]:
    """03_train.py on `fold` with `train_flags` (resumed where an earlier run stopped),
    then 04_infer.py streaming its validation rows with `stream_flags`, both of the
    checkout `code` and run from it. Their output goes to logs/fold{k}_train.log and
    _infer.log (appended: a resumed run keeps the interrupted one's), or is printed; each
    command is printed through `say` (as `  train <label>: ...` with a label). Returns
    each step's wall seconds, {"train": s, "infer": s}."""

    def step(name: str, command: list[str]) -> float:
        log = logs / f"fold{fold.fold}_{name}.log" if logs else None
        shown_as = f"{name} {label}" if label else None
        return run(command, log, label=shown_as, cwd=code, append=True, say=say)

    epochs_before = fold.trained_epochs()
    wall = {"train": step("train", fold.train_command(train_flags, code))}
    if 0 < epochs_before < fold.trained_epochs():
        fold.note_resumed_after(epochs_before)
    wall["infer"] = step("infer", fold.stream_command(stream_flags, code))
    return wall
