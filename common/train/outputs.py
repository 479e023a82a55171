"""What a training run writes and reads back: each epoch's checkpoint and what it records
(the run's setup and its Progress), best.pt, history.csv, config.json and the inner
split's predictions; a resume from the latest epoch checkpoint, with the checks that it
fits this run; the run's row of output/runs.csv.
"""

from __future__ import annotations

import csv
import math
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from common.data.fold_data import FoldData
from common.files import atomic_file, remove_stale_temp_files, write_json
from common.model.checkpoint import (
    CheckpointError,
    check_resumable,
    read_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from common.runs.folders import commit
from common.runs.table import config_columns
from common.train.build import TrainSetup
from common.train.config import TrainConfig, shaping_changes
from common.workspace import ModelFolder, Run


@dataclass
class Progress:
    """How far a run has gone: what each epoch checkpoint records and a resume restores."""

    epoch: int = 0  # epochs finished
    step: int = 0  # optimizer steps taken
    best_auc: float = -math.inf  # the selection AUC of the best epoch so far
    best_epoch: int = -1
    history: list[dict] = field(default_factory=list)  # history.csv's rows
    epochs_run: int = 0  # epochs trained by this process (not restored by a resume)


@dataclass
class RunFiles:
    """A training run's folder (fold{k}/ or full/ of output/runs/NAME/): what it writes
    after each epoch and reads back to resume."""

    config: TrainConfig
    run: Run
    folder: ModelFolder  # the run's fold{k}/ or full/
    setup: TrainSetup
    fingerprint: dict | None  # the fold's (common.data.fold_data.Fold.fingerprint)

    def checkpoint_payload(self, progress: Progress) -> dict:
        setup, config = self.setup, self.config
        return {
            "arch": setup.arch,
            "model_config": setup.model_config.to_dict(),
            "model_state": setup.model.state_dict(),
            "optimizer_state": setup.optimizer.state_dict(),
            "scheduler_state": setup.scheduler.state_dict(),
            "scaler_state": setup.scaler.state_dict(),
            "train_config": asdict(config),
            "epoch": progress.epoch,
            "step": progress.step,
            "best_auc": progress.best_auc,
            "best_epoch": progress.best_epoch,
            "fold": None if config.full_data else config.fold,
            "fold_fingerprint": self.fingerprint,
            "selected_on": config.select_on,
            "resolved": setup.plan.resolved(),
            "history": progress.history,
            "rng_state": rng_state(),
            "teacher": None
            if setup.teacher is None
            else {
                "path": str(Path(config.teacher).resolve()),
                "model_config": setup.teacher.config.to_dict(),
            },
        }

    def resume(self, progress: Progress, device: torch.device, main: bool) -> bool:
        """Continue after the latest epoch checkpoint: the model, optimizer, schedule,
        scaler and RNG states, and `progress`. Each checkpoint is written whole (temp file,
        then rename), so after a kill the latest one is a complete epoch; the epoch that
        was running is redone. Returns False when there is none. `main`: the process that
        writes (rank 0)."""
        if main:
            remove_stale_temp_files(self.folder.path)
        path = self.folder.latest_epoch_checkpoint()
        if path is None:
            return False
        checkpoint = read_checkpoint(path, device)
        setup = self.setup
        check_resumable(path, checkpoint, setup.arch, setup.model_config, self.fingerprint)
        changed = shaping_changes(checkpoint.get("train_config", {}), self.config)
        if changed and main:
            print(f"note: resuming {path} with other settings (checkpoint vs now): {changed}")
        if main and (note := self.schedule_change(checkpoint)):
            print(note)
        setup.model.load_state_dict(checkpoint["model_state"])
        setup.optimizer.load_state_dict(checkpoint["optimizer_state"])
        setup.scheduler.load_state_dict(checkpoint["scheduler_state"])
        setup.scaler.load_state_dict(checkpoint["scaler_state"])
        progress.epoch, progress.step = checkpoint["epoch"], checkpoint["step"]
        progress.best_auc, progress.best_epoch = checkpoint["best_auc"], checkpoint["best_epoch"]
        progress.history = checkpoint["history"]
        set_rng_state(checkpoint["rng_state"])
        if main:
            self.restore_epoch_outputs(progress)
        return True

    def schedule_change(self, checkpoint: dict) -> str:
        """What a resume with other epochs recomputed: the schedule's length and an
        automatic warm-up ("" when they are the checkpoint's)."""
        before = checkpoint.get("resolved", {})
        now = self.setup.plan.resolved()
        if (before.get("total_steps"), before.get("warmup")) == (now["total_steps"], now["warmup"]):
            return ""
        epochs = checkpoint.get("train_config", {}).get("epochs")
        return (
            f"note: --epochs {self.config.epochs} (the checkpoint's run: {epochs}): the "
            f"{self.config.schedule} schedule is recomputed over {now['total_steps']:,} steps "
            f"(was {before.get('total_steps')}), warm-up {now['warmup']:,} (was "
            f"{before.get('warmup')}); the learning rate after step {checkpoint.get('step')} "
            "follows the new schedule"
        )

    def restore_epoch_outputs(self, progress: Progress) -> None:
        """Redo what a kill right after the epoch checkpoint may have cut short (or a user
        removed): best.pt (the best epoch's checkpoint holds the same payload),
        history.csv, config.json."""
        best_epoch = progress.best_epoch
        best = self.folder.epoch_checkpoint(best_epoch)
        if best_epoch >= 1 and best.exists() and not self.best_is(best_epoch):
            with atomic_file(self.folder.checkpoint()) as tmp:
                shutil.copyfile(best, tmp)
        history = self.folder.history
        rows = len(history.read_text().splitlines()) - 1 if history.exists() else -1
        if rows != len(progress.history) or not self.folder.config.exists():
            self.write_epoch(progress, improved=False)

    def best_is(self, epoch: int) -> bool:
        """Whether best.pt is whole and holds `epoch` (then a resume leaves it alone)."""
        try:
            return read_checkpoint(self.folder.checkpoint(), "cpu").get("epoch") == epoch
        except (OSError, CheckpointError):
            return False

    def write_inner_predictions(self, data: FoldData, epoch: int, probability: np.ndarray) -> None:
        """best.pt's predictions of the inner split (inner_predictions.parquet), with its epoch."""
        rows = data.sequences.row[data.inner_tails.flat_index(data.sequences)]
        frame = pd.DataFrame({"global_row": rows, "prediction": probability, "epoch": epoch})
        with atomic_file(self.folder.inner_predictions) as tmp:
            frame.to_parquet(tmp, index=False)

    def write_epoch(self, progress: Progress, improved: bool) -> None:
        """The epoch's checkpoint (and best.pt when it improved), history.csv and
        config.json."""
        payload = self.checkpoint_payload(progress)
        save_checkpoint(self.folder.epoch_checkpoint(progress.epoch), payload)
        if improved:
            save_checkpoint(self.folder.checkpoint(), payload)
        with atomic_file(self.folder.history) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(progress.history[0]))
            writer.writeheader()
            writer.writerows(progress.history)
        # the TrainConfig's fields at the top (`--config` reads them back; resume off: fed
        # back, the file starts the configuration, it does not continue a run); what the
        # run resolved and where it ran under "recorded", which --config ignores
        write_json(
            self.folder.config,
            asdict(replace(self.config, resume=False))
            | {
                "recorded": {
                    "run": self.run.name,
                    "commit": commit(),
                    "model_config": self.setup.model_config.to_dict(),
                    "resolved": self.setup.plan.resolved(),
                }
            },
        )

    def run_row(self, progress: Progress, wall_seconds: float) -> dict:
        """This training's row of output/runs.csv (common.runs.table)."""
        full = self.config.full_data
        history = progress.history
        best = next((r for r in history if r["epoch"] == progress.best_epoch), {})
        rates = [r["interactions_per_s"] for r in history[-progress.epochs_run :]]
        return {
            "run": self.run.name,
            "stage": "train",
            "folds": "full" if full else str(self.config.fold),
            "commit": commit(),
            **config_columns(asdict(self.config), self.setup.arch),
            "epochs": progress.epoch,
            "batch_size": self.setup.plan.batch_size,
            "best_epoch": progress.best_epoch,
            "selected_on": "last epoch" if full else self.config.select_on,
            "selection_auc": None if full else progress.best_auc,
            "tf_auc": best.get("fold_auc"),
            "interactions_per_s": sum(rates) / len(rates) if rates else None,
            "wall_s": wall_seconds,
        }
