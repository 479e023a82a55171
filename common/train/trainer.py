"""Training loop for 03_train.py: optimizer, validation and model selection, early
stopping, DistributedDataParallel, the full-data run. Its settings: common/train/config.py;
its spans, batches and schedule: common/train/plan.py; what it writes and resumes from:
common/train/outputs.py.

Model selection: with --select-on inner (the default) early stopping and best.pt are
chosen on an inner validation split carved from the fold's training students
(common.data.fold_data.inner_cut), so the fold's validation rows are scored by a model neither
trained nor selected on them; the fold's AUC is still logged every epoch.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from common import layout
from common.data.features import window_inputs
from common.data.fold_data import FoldData, Tails, load_fold_data, load_full_data
from common.device import Distributed, autocast_dtype, resolve_device
from common.files import write_run_record
from common.layout import model_dir
from common.metrics import auc_or_nan, binary_log_loss
from common.model.checkpoint import cv_epochs
from common.model.difficulty import install_difficulty, out_of_fold_buckets
from common.model.distill import check_distill_options, distillation_loss, load_teacher
from common.model.predict import predict_tails, to_tensors
from common.model.saint import SAINT
from common.model.tags import install_tags, tag_shape
from common.runs.folders import RunClashError, check_run_name, claim_fold_dir, run_name
from common.runs.oof import write_oof
from common.runs.table import append_run_row
from common.train.config import TrainConfig
from common.train.outputs import TrainOutputs
from common.train.plan import (
    batch_bounds,
    batch_windows,
    epoch_spans,
    lr_factor,
    micro_batch_groups,
    warmup_steps,
)


def masked_bce(logits: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    loss = F.binary_cross_entropy_with_logits(logits.float(), labels, reduction="none")
    return (loss * valid).sum() / valid.sum().clamp(min=1)


@dataclass
class EpochRecord:
    """One line of history.csv: the inner split's figures select the model (with
    --select-on inner); the fold's are logged for information (or select, with fold)."""

    epoch: int
    train_loss: float
    inner_loss: float
    inner_auc: float
    fold_loss: float
    fold_auc: float
    interactions_per_s: float
    train_seconds: float
    valid_seconds: float
    lr: float


@dataclass
class Trainer(TrainOutputs):
    config: TrainConfig
    run_dir: Path  # output/runs/NAME (layout.run_dir)
    data: FoldData
    device: torch.device
    dist: Distributed = field(default_factory=Distributed)

    def __post_init__(self) -> None:
        self.fold_dir = model_dir(self.run_dir, self.config.fold, self.config.full_data)
        self.fold_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(self.config.seed)
        np.random.seed(self.config.seed)
        random.seed(self.config.seed)
        shape = (0, 1)
        if self.config.tags:
            shape = tag_shape(self.data.questions)
        self.model_config = self.config.model_config(self.data.n_questions, shape)
        self.model = SAINT(self.model_config).to(self.device)
        self.teacher = None
        if self.config.teacher:
            check_distill_options(self.config.distill_alpha, self.config.distill_temperature)
            self.teacher = load_teacher(
                self.config.teacher, self.device, self.model_config, self.data.fingerprint
            )
        # context before each span: every model that predicts on the batch (a teacher
        # too) must have its whole receptive field behind each trained position
        self.context = max(
            m.config.receptive_field for m in (self.model, self.teacher) if m is not None
        )
        self.span = self.config.span or 4 * self.model_config.receptive_field
        self.batch_size = self.config.batch_size or batch_windows(
            self.data.fit_length, self.model_config.window, self.dist.world
        )
        self._check_selection()
        self.difficulty = None  # per flat question: its difficulty bucket as an input
        if self.config.model.difficulty_buckets:
            install_difficulty(self.model, self.data)
            self.difficulty = out_of_fold_buckets(
                self.data.sequences,
                self.data.fit_length,
                self.data.n_questions,
                self.config.model.difficulty_buckets,
            )
        if self.config.tags:
            install_tags(self.model, self.data.questions)
        self.train_model = self.model
        if self.config.compile:  # validation and checkpoints keep the plain module
            self.train_model = torch.compile(self.model, dynamic=True)
        if self.dist.world > 1:
            # buffers are not broadcast: the rotary table grows lazily to each rank's
            # largest position, and the difficulty buckets are computed alike on every rank
            self.train_model = torch.nn.parallel.DistributedDataParallel(
                self.train_model,
                device_ids=[self.device.index] if self.device.type == "cuda" else None,
                broadcast_buffers=False,
            )
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": self.config.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=self.config.lr,
            betas=(0.9, 0.98),  # Vaswani et al.'s Adam betas for warm-up schedules
        )
        total = len(self.epoch_batches(0)[1]) * self.config.epochs
        self.warmup = warmup_steps(self.config.warmup, total)
        self.total_steps = total
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda step: lr_factor(step + 1, self.config.schedule, self.warmup, total),
        )
        self.amp_dtype = autocast_dtype(self.config.amp, self.device)
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=self.amp_dtype == torch.float16
        )
        self.epoch = 0
        self.step = 0
        self.best_auc = -math.inf
        self.best_epoch = -1
        self.history: list[dict] = []

    def _check_selection(self) -> None:
        if self.config.full_data:
            return  # nothing is held out: every epoch's model is the last and the best
        if self.config.select_on not in ("inner", "fold"):
            raise ValueError(f"select_on must be inner or fold, got {self.config.select_on!r}")
        if self.config.select_on == "inner" and len(self.data.inner_tails.students) == 0:
            raise ValueError(
                "select_on inner needs an inner validation split, and this fold data has "
                "none (load it with inner_share > 0, or select on the fold)"
            )

    def epoch_batches(
        self, epoch: int
    ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], list[np.ndarray]]:
        """This epoch's training sequences (epoch_spans) and, per optimizer step, the
        indices of this rank's sequences: every rank takes the same number of steps, of
        batch_size windows' worth of trained questions each."""
        rng = np.random.default_rng([self.config.seed, epoch])
        spans = epoch_spans(self.data.fit_length, self.span, self.context, rng)
        _, _, begin, stop = spans
        windows = -(-(stop - begin) // self.model_config.window)
        world, rank = self.dist.world, self.dist.rank
        bounds = batch_bounds(windows, self.batch_size * world, least=world)
        # only a last, short batch can hold fewer sequences than ranks: none takes it
        whole = [b for b in bounds if b.stop - b.start >= world]
        steps = [np.arange(b.start, b.stop)[rank::world] for b in whole]
        return spans, steps

    # -- one epoch ---------------------------------------------------------------------
    def train_epoch(self) -> tuple[float, float, float]:
        config = self.config
        (student, start, begin, stop), steps = self.epoch_batches(self.epoch)
        self.train_model.train()
        total_loss, total_count = 0.0, 0
        clock = time.perf_counter()
        bar = tqdm(
            steps,
            desc=f"epoch {self.epoch + 1}",
            disable=not (config.progress and self.dist.main),
            leave=False,
        )
        for index in bar:
            batch = to_tensors(self.batch_inputs(student, start, begin, stop, index), self.device)
            loss, count = self.train_step(batch)
            total_loss += loss * count
            total_count += count
            seconds = time.perf_counter() - clock
            bar.set_postfix(
                loss=f"{total_loss / max(total_count, 1):.4f}",
                rate=f"{total_count * self.dist.world / seconds:,.0f}/s",
            )
        seconds = time.perf_counter() - clock
        return total_loss / max(total_count, 1), total_count * self.dist.world / seconds, seconds

    def batch_inputs(
        self,
        student: np.ndarray,
        start: np.ndarray,
        begin: np.ndarray,
        stop: np.ndarray,
        index: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Model inputs of training sequences `index`, with "trained": the positions in
        the loss (from each span's begin; the context before it is not)."""
        inputs = window_inputs(
            self.data.sequences,
            student[index],
            start[index],
            stop[index] - start[index],
            self.data.n_questions,
            self.difficulty,
        )
        inputs["trained"] = inputs["valid"] & (inputs["position"] >= begin[index][:, None])
        return inputs

    def micro_batches(self, batch: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """Split a batch for gradient accumulation, each part trimmed to its longest
        window. The gradient is that of the whole batch; only the working set shrinks
        (on a CPU, 64 windows of 100 stay in cache where 512 do not).

        On a CPU (no --micro-batch) the parts are sorted by length (micro_batch_groups)."""
        size = self.config.micro_batch or (len(batch["valid"]) if self.device.type == "cuda" else 0)
        groups = micro_batch_groups(batch["valid"].sum(1), size, 64 * self.model_config.window)
        parts = []
        for index in groups:  # slices, or (CPU path only) index tensors on the batch's device
            part = {name: value[index] for name, value in batch.items()}
            longest = int(part["valid"].sum(1).max())
            parts.append({name: value[:, :longest] for name, value in part.items()})
        return parts

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean loss over the batch's trained positions."""
        valid = batch["trained"].float()
        with torch.autocast(
            self.device.type,
            dtype=self.amp_dtype or torch.float32,
            enabled=self.amp_dtype is not None,
        ):
            logits = self.train_model(batch)
            if self.teacher is None:
                return masked_bce(logits, batch["label"], valid)

            with torch.no_grad():
                teacher_logits = self.teacher(batch)
            return distillation_loss(
                logits,
                teacher_logits,
                batch["label"],
                valid,
                self.config.distill_alpha,
                self.config.distill_temperature,
            )

    def train_step(self, batch: dict[str, torch.Tensor]) -> tuple[float, int]:
        total = int(batch["trained"].sum())
        self.optimizer.zero_grad(set_to_none=True)
        parts = self.micro_batches(batch)
        batch_loss = 0.0
        for i, part in enumerate(parts):
            weight = float(part["trained"].sum()) / max(total, 1)
            last = i == len(parts) - 1
            sync = contextlib.nullcontext()
            if self.dist.world > 1 and not last:
                sync = self.train_model.no_sync()  # one all-reduce per optimizer step
            with sync:
                loss = self.loss(part) * weight
                self.scaler.scale(loss).backward()
            batch_loss += float(loss.item())
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        self.step += 1
        return batch_loss, total

    def validate(self, tails: Tails) -> tuple[float, float, np.ndarray]:
        """Log loss, AUC (NaN where undefined) and the probabilities of the teacher-forced
        predictions of `tails`."""
        probability = predict_tails(
            self.model,
            self.data.sequences,
            tails.students,
            tails.history,
            tails.end,
            self.device,
            self.config.valid_batch_size,
        )
        labels = tails.labels(self.data.sequences)
        return binary_log_loss(labels, probability), auc_or_nan(labels, probability), probability

    def describe(self) -> str:
        """What this run trains on and how: printed at the start of fit."""
        data, config = self.data, self.config
        inner = data.inner_tails
        selection = (
            f"full data: {len(data.fit_length):,} students' {int(data.fit_length.sum()):,} "
            "questions all train; nothing is validated, best.pt is the last epoch"
            if config.full_data
            else f"selection on an inner split of {len(inner.students):,} training students "
            f"({int((inner.end - inner.history).sum()):,} questions, share "
            f"{config.inner_share:g}); the fold's {len(data.valid_students):,} validation "
            f"students are logged only"
            if config.select_on == "inner"
            else f"selection on the fold's {len(data.valid_students):,} validation students "
            f"(the rows 04 and 05 score: optimistic)"
        )
        warmup = "" if config.warmup else " (automatic: a tenth of the run, at most 4,000)"
        return (
            f"{self.model.n_parameters():,} parameters; device {self.device}; "
            f"{selection}\n"
            f"sequences: spans of {self.span} questions after {self.context} of context "
            f"(receptive field {self.model_config.receptive_field}); "
            f"batches of {self.batch_size} windows' worth of trained questions"
            f"{'' if config.batch_size else ' (automatic: see --batch-size)'}\n"
            f"schedule: {config.schedule}, lr {config.lr:g} after a warm-up of "
            f"{self.warmup:,}{warmup} of {self.total_steps:,} steps "
            f"({self.total_steps // max(config.epochs, 1):,} per epoch)"
        )

    # -- the loop ----------------------------------------------------------------------
    def finished(self) -> bool:
        """All epochs trained, or early stopping's patience ran out."""
        stopped = self.best_epoch >= 0 and self.epoch - self.best_epoch > self.config.patience
        return self.epoch >= self.config.epochs or stopped

    def fit(self) -> list[dict]:
        config = self.config
        self.epochs_run = 0
        if config.resume and self.resume():
            if self.finished():  # `--fold all --resume` keeps the folds already done
                if self.dist.main:
                    print(
                        f"{self.fold_dir.name} finished already (epoch {self.epoch}, best epoch "
                        f"{self.best_epoch}): kept"
                    )
                return self.history
            if self.dist.main:
                print(f"resumed after epoch {self.epoch} (best AUC {self.best_auc:.4f})")
        if self.dist.main:
            write_run_record(
                self.fold_dir,
                "train",
                asdict(config) | {"model_config": self.model_config.to_dict()},
            )
            print(self.describe())
        while not self.finished():
            train_loss, rate, train_seconds = self.train_epoch()
            self.epoch += 1
            self.epochs_run += 1
            inner_loss = inner_auc = fold_loss = fold_auc = math.nan
            inner_probability = None
            valid_seconds = 0.0
            if self.dist.main:
                clock = time.perf_counter()
                if len(self.data.inner_tails.students):
                    inner = self.validate(self.data.inner_tails)
                    inner_loss, inner_auc, inner_probability = inner
                if len(self.data.fold_tails.students):
                    fold_loss, fold_auc, _ = self.validate(self.data.fold_tails)
                valid_seconds = time.perf_counter() - clock
            selected = inner_auc if config.select_on == "inner" else fold_auc
            selected = self.dist.broadcast(selected)
            record = EpochRecord(
                self.epoch,
                train_loss,
                inner_loss,
                inner_auc,
                fold_loss,
                fold_auc,
                rate,
                train_seconds,
                valid_seconds,
                self.optimizer.param_groups[0]["lr"],
            )
            self.history.append(asdict(record))
            improved = config.full_data or (not math.isnan(selected) and selected > self.best_auc)
            if improved:
                self.best_auc, self.best_epoch = selected, self.epoch
            if self.dist.main:
                self._write_epoch(improved)
                if improved and config.select_on == "inner" and inner_probability is not None:
                    self._write_inner_predictions(inner_probability)
                print(
                    f"epoch {self.epoch}: train loss {train_loss:.4f}  inner loss "
                    f"{inner_loss:.4f} AUC {inner_auc:.4f}  fold loss {fold_loss:.4f} AUC "
                    f"{fold_auc:.4f}  (selects: {config.select_on})  "
                    f"{rate:,.0f} interactions/s  ({train_seconds:.0f}+{valid_seconds:.0f} s)"
                )
            self.dist.barrier()
        return self.history


def train(
    config: TrainConfig, output_dir: str | Path, run: str | None = None, overwrite: bool = False
) -> list[dict]:
    """Train fold `config.fold` from `<output_dir>/data` and `<output_dir>/folds`, or
    (full_data) every student from `<output_dir>/data`, into run `run`'s folder
    (output/runs/RUN/fold{k} or full/; default name: common.runs.folders.run_name). A fold folder
    holding files is refused unless it holds this config and config.resume is set, or
    `overwrite` (common.runs.folders.claim_fold_dir). When epochs were trained, one row is
    appended to output/runs.csv. Under torchrun the process group is joined once and
    kept for the next fold; the caller closes it (Distributed.close)."""
    begin = time.perf_counter()
    run = check_run_name(run) if run else run_name(config)
    run_dir = layout.run_dir(output_dir, run)
    dist_info = Distributed.from_env()
    device = resolve_device(config.device)
    if device.type == "cuda" and dist_info.world > 1:
        device = torch.device("cuda", dist_info.local_rank)
        torch.cuda.set_device(device)
    dist_info.init(device)
    refusal = None
    if dist_info.main:  # the other processes learn rank 0's verdict before going on
        folder = layout.model_dir(run_dir, config.fold, config.full_data)
        try:
            if claim_fold_dir(folder, config, overwrite=overwrite):
                print(f"--overwrite: removed {folder}")
                write_oof(run_dir)  # without the removed fold's predictions
            print(f"run {run}: {folder}")
        except RunClashError as error:
            refusal = error
    if dist_info.broadcast(0.0 if refusal else 1.0) == 0.0:
        raise refusal or RunClashError(f"run {run}: rank 0 refused the fold folder")
    if config.full_data:
        data = load_full_data(output_dir)
        if config.epochs == 0:
            config = replace(config, epochs=cv_epochs(run_dir, dist_info.main))
    else:
        inner_share = config.inner_share if config.select_on == "inner" else 0.0
        data = load_fold_data(output_dir, config.fold, inner_share, config.seed)
    trainer = Trainer(config, run_dir, data, device, dist_info)
    history = trainer.fit()
    if dist_info.main and trainer.epochs_run:
        append_run_row(output_dir, trainer.run_row(time.perf_counter() - begin))
    return history
