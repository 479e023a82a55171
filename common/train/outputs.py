"""What a training run writes and reads back (common.train.trainer.Trainer inherits it): each
epoch's checkpoint and what it records, best.pt, history.csv and config.json; resume
from the latest epoch checkpoint, with the checks that it fits this run.

The methods use the Trainer's state: config, model, model_config, optimizer, scheduler,
scaler, data, teacher, dist, fold_dir, epoch, step, best_auc, best_epoch, history and the
resolved automatic settings (batch_size, warmup, total_steps, span, context).
"""

from __future__ import annotations

import csv
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd

from common.files import atomic_file, remove_stale_temp_files, write_json
from common.layout import CONFIG_FILE, INNER_PREDICTIONS
from common.model.checkpoint import (
    CheckpointError,
    check_resumable,
    latest_epoch_checkpoint,
    read_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from common.runs.folders import commit
from common.runs.table import config_columns
from common.train.config import shaping_changes


class TrainOutputs:
    def checkpoint_payload(self) -> dict:
        return {
            "model_config": self.model_config.to_dict(),
            "model_state": self.model.state_dict(),
            "optimizer_state": self.optimizer.state_dict(),
            "scheduler_state": self.scheduler.state_dict(),
            "scaler_state": self.scaler.state_dict(),
            "train_config": asdict(self.config),
            "epoch": self.epoch,
            "step": self.step,
            "best_auc": self.best_auc,
            "best_epoch": self.best_epoch,
            "fold": None if self.config.full_data else self.config.fold,
            "fold_fingerprint": self.data.fingerprint,
            "selected_on": self.config.select_on,
            "resolved": self.resolved(),
            "history": self.history,
            "rng_state": rng_state(),
            "teacher": None
            if self.teacher is None
            else {
                "path": str(Path(self.config.teacher).resolve()),
                "model_config": self.teacher.config.to_dict(),
            },
        }

    def resume(self) -> bool:
        """Continue after the latest epoch checkpoint. Each is written whole (temp file,
        then rename), so after a kill the latest one is a complete epoch; the epoch that
        was running is redone. Returns False when there is none."""
        if self.dist.main:
            remove_stale_temp_files(self.fold_dir)
        path = latest_epoch_checkpoint(self.fold_dir)
        if path is None:
            return False
        checkpoint = read_checkpoint(path, self.device)
        check_resumable(path, checkpoint, self.model_config, self.data.fingerprint)
        changed = shaping_changes(checkpoint.get("train_config", {}), self.config)
        if changed and self.dist.main:
            print(f"note: resuming {path} with other settings (checkpoint vs now): {changed}")
        self.model.load_state_dict(checkpoint["model_state"])
        self.optimizer.load_state_dict(checkpoint["optimizer_state"])
        self.scheduler.load_state_dict(checkpoint["scheduler_state"])
        self.scaler.load_state_dict(checkpoint["scaler_state"])
        self.epoch = checkpoint["epoch"]
        self.step = checkpoint["step"]
        self.best_auc = checkpoint["best_auc"]
        self.best_epoch = checkpoint["best_epoch"]
        self.history = checkpoint["history"]
        set_rng_state(checkpoint["rng_state"])
        if self.dist.main:
            self._restore_epoch_outputs()
        return True

    def _restore_epoch_outputs(self) -> None:
        """Redo what a kill right after the epoch checkpoint may have cut short: best.pt
        (the best epoch's checkpoint holds the same payload), history.csv, config.json."""
        best = self.fold_dir / f"epoch_{self.best_epoch:02d}.pt"
        if self.best_epoch >= 1 and best.exists() and not self._best_is(self.best_epoch):
            with atomic_file(self.fold_dir / "best.pt") as tmp:
                shutil.copyfile(best, tmp)
        history = self.fold_dir / "history.csv"
        rows = len(history.read_text().splitlines()) - 1 if history.exists() else -1
        if rows != len(self.history):
            self._write_epoch(improved=False)

    def _best_is(self, epoch: int) -> bool:
        """Whether best.pt is whole and holds `epoch` (then a resume leaves it alone)."""
        try:
            return read_checkpoint(self.fold_dir / "best.pt", "cpu").get("epoch") == epoch
        except (OSError, CheckpointError):
            return False

    def resolved(self) -> dict:
        """What the automatic settings (0 in TrainConfig) resolved to for this run."""
        return {
            "batch_size": self.batch_size,
            "warmup": self.warmup,
            "total_steps": self.total_steps,
            "span": self.span,
            "context": self.context,
        }

    def _write_inner_predictions(self, probability) -> None:
        """best.pt's predictions of the inner split (INNER_PREDICTIONS), with its epoch."""
        rows = self.data.sequences.row[self.data.inner_tails.flat_index(self.data.sequences)]
        frame = pd.DataFrame({"global_row": rows, "prediction": probability, "epoch": self.epoch})
        with atomic_file(self.fold_dir / INNER_PREDICTIONS) as tmp:
            frame.to_parquet(tmp, index=False)

    def _write_epoch(self, improved: bool) -> None:
        payload = self.checkpoint_payload()
        save_checkpoint(self.fold_dir / f"epoch_{self.epoch:02d}.pt", payload)
        if improved:
            save_checkpoint(self.fold_dir / "best.pt", payload)
        with atomic_file(self.fold_dir / "history.csv") as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(self.history[0]))
            writer.writeheader()
            writer.writerows(self.history)
        # the TrainConfig's fields at the top (`--config` reads them back; resume off: fed
        # back, the file starts the configuration, it does not continue a run); what the
        # run resolved and where it ran under "recorded", which --config ignores
        write_json(
            self.fold_dir / CONFIG_FILE,
            asdict(replace(self.config, resume=False))
            | {
                "recorded": {
                    "run": self.run_dir.name,
                    "commit": commit(),
                    "model_config": self.model_config.to_dict(),
                    "resolved": self.resolved(),
                }
            },
        )

    def run_row(self, wall_seconds: float) -> dict:
        """This training's row of output/runs.csv (common.runs.table)."""
        full = self.config.full_data
        best = next((r for r in self.history if r["epoch"] == self.best_epoch), {})
        rates = [r["interactions_per_s"] for r in self.history[-self.epochs_run :]]
        return {
            "run": self.run_dir.name,
            "stage": "train",
            "folds": "full" if full else str(self.config.fold),
            "commit": commit(),
            **config_columns(asdict(self.config)),
            "epochs": self.epoch,
            "batch_size": self.batch_size,
            "best_epoch": self.best_epoch,
            "selected_on": "last epoch" if full else self.config.select_on,
            "selection_auc": None if full else self.best_auc,
            "tf_auc": best.get("fold_auc"),
            "interactions_per_s": sum(rates) / len(rates) if rates else None,
            "wall_s": wall_seconds,
        }
