"""Stage 3's loop (03_train.py): epochs of optimizer steps, validation and model
selection, early stopping, the full-data run, and `train`, which claims a fold folder and
runs the loop in it. Its settings: common/train/config.py; what it trains with (model,
teacher, optimizer, scaler, DDP): common/train/build.py; its spans, batches and schedule:
common/train/plan.py; what it writes and resumes from: common/train/outputs.py.

Model selection: with --select-on inner (the default) early stopping and best.pt are
chosen on an inner validation split carved from the fold's training students
(common.data.fold_data.inner_cut), so the fold's validation rows are scored by a model neither
trained nor selected on them; the fold's AUC is still logged every epoch.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch
from tqdm import tqdm

from common.data.features import window_inputs
from common.data.fold_data import FoldData, Tails, load_fold_data, load_full_data
from common.device import Distributed, resolve_device, use_threads
from common.errors import UserError
from common.files import write_run_record
from common.metrics import auc_or_nan, binary_log_loss
from common.model.distill import distillation_loss
from common.model.interface import KTModel
from common.model.predict import predict_tails, to_tensors
from common.runs.artefacts import cv_epochs
from common.runs.folders import (
    RunClashError,
    check_run_name,
    claim_fold_dir,
    fold_lock,
    run_name,
)
from common.runs.table import append_run_row, read_rows
from common.train.build import build
from common.train.config import TrainConfig
from common.train.outputs import Progress, RunFiles
from common.train.plan import TrainPlan
from common.train.recurrent import masked_bce, recurrent_epoch
from common.workspace import Run, Workspace


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
class Trainer:
    """The training loop of one fold (or the full-data run): epochs of optimizer steps,
    validation, selection and early stopping. What it trains with is built once
    (common.train.build.TrainSetup); what it writes is common.train.outputs.RunFiles."""

    config: TrainConfig
    run: Run
    data: FoldData
    device: torch.device
    dist: Distributed = field(default_factory=Distributed)
    arch: str = ""  # the architecture trained (default: the config's primary)

    def __post_init__(self) -> None:
        self.arch = self.arch or self.config.primary
        self.folder = member_folder(self.run, self.config, self.arch)
        self.folder.path.mkdir(parents=True, exist_ok=True)
        self.setup = build(self.config, self.data, self.device, self.dist, self.arch)
        self.files = RunFiles(self.config, self.run, self.folder, self.setup, self.data.fingerprint)
        self.progress = Progress()

    @property
    def model(self) -> KTModel:
        return self.setup.model

    @property
    def plan(self) -> TrainPlan:
        return self.setup.plan

    def epoch_batches(
        self, epoch: int
    ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], list[np.ndarray]]:
        """This epoch's training sequences and this rank's sequences per optimizer step
        (TrainPlan.epoch_batches over the fold's training questions)."""
        return self.plan.epoch_batches(self.data.fit_length, epoch)

    def resume(self) -> bool:
        """Continue after the latest epoch checkpoint (RunFiles.resume); False: none."""
        return self.files.resume(self.progress, self.device, self.dist.main)

    # -- one epoch ---------------------------------------------------------------------
    def train_epoch(self) -> tuple[float, float, float]:
        """(mean loss, trained questions per second, seconds) of one epoch's steps."""
        if self.model.recurrent:  # its lanes (common.train.recurrent)
            return recurrent_epoch(self.setup, self, self.progress)
        (student, start, begin, stop), steps = self.epoch_batches(self.progress.epoch)
        self.setup.train_model.train()
        total_loss, total_count = 0.0, 0
        clock = time.perf_counter()
        bar = tqdm(
            steps,
            desc=f"epoch {self.progress.epoch + 1}",
            disable=not (self.config.progress and self.dist.main),
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
            self.setup.difficulty,
        )
        inputs["trained"] = inputs["valid"] & (inputs["position"] >= begin[index][:, None])
        return inputs

    def micro_batches(self, batch: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """Split a batch for gradient accumulation (the setup's PartPlan: sorted parts of
        similar length on every device, or --micro-batch slices), each part trimmed to its
        longest sequence. The gradient is that of the whole batch; only the positions
        computed and the working set shrink."""
        parts = []
        for index in self.setup.parts.groups(batch["valid"].sum(1)):
            part = {name: value[index] for name, value in batch.items()}
            longest = int(part["valid"].sum(1).max())
            parts.append({name: value[:, :longest] for name, value in part.items()})
        return parts

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean loss over the batch's trained positions. The model computes only what
        they can reach (SAINT.forward's trained_from: from the first position any row
        trains on, the context before it is needed by fewer layers the higher they are);
        its logits start at the column `start`."""
        trained = batch["trained"]
        trained_from = int(trained.int().argmax(1).min()) if trained.shape[1] else 0
        setup = self.setup
        with torch.autocast(
            self.device.type,
            dtype=setup.amp_dtype or torch.float32,
            enabled=setup.amp_dtype is not None,
        ):
            logits = setup.train_model(batch, trained_from=trained_from)
            start = trained.shape[1] - logits.shape[1]
            valid, label = trained[:, start:].float(), batch["label"][:, start:]
            if setup.teacher is None:
                return masked_bce(logits, label, valid)

            with torch.no_grad():
                teacher_logits = setup.teacher(batch)[:, start:]
            return distillation_loss(
                logits,
                teacher_logits,
                label,
                valid,
                self.config.distill_alpha,
                self.config.distill_temperature,
            )

    def train_step(self, batch: dict[str, torch.Tensor]) -> tuple[float, int]:
        """One optimizer step on `batch` (in micro-batches); (its loss, trained count)."""
        setup = self.setup
        total = int(batch["trained"].sum())
        setup.optimizer.zero_grad(set_to_none=True)
        parts = self.micro_batches(batch)
        batch_loss = 0.0
        for i, part in enumerate(parts):
            weight = float(part["trained"].sum()) / max(total, 1)
            last = i == len(parts) - 1
            sync = contextlib.nullcontext()
            if self.dist.world > 1 and not last:
                sync = setup.train_model.no_sync()  # one all-reduce per optimizer step
            with sync:
                loss = self.loss(part) * weight
                setup.scaler.scale(loss).backward()
            batch_loss += float(loss.item())
        setup.scaler.unscale_(setup.optimizer)
        torch.nn.utils.clip_grad_norm_(setup.model.parameters(), self.config.grad_clip)
        setup.scaler.step(setup.optimizer)
        setup.scaler.update()
        setup.scheduler.step()
        self.progress.step += 1
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

    # -- the loop ----------------------------------------------------------------------
    def finished(self) -> bool:
        """All epochs trained, or early stopping's patience ran out."""
        progress = self.progress
        stopped = (
            progress.best_epoch >= 0 and progress.epoch - progress.best_epoch > self.config.patience
        )
        return progress.epoch >= self.config.epochs or stopped

    def fit(self) -> list[dict]:
        """Train until finished (after a resume, when --resume); the history's rows."""
        if self.config.resume and self.resume() and self.report_resume():
            return self.progress.history
        if self.dist.main:
            record = asdict(self.config) | {"model_config": self.setup.model_config.to_dict()}
            write_run_record(self.folder.record("train"), record)
            print(describe_run(self))
        while not self.finished():
            self.run_epoch()
            self.dist.barrier()
        return self.progress.history

    def report_resume(self) -> bool:
        """Say where a resume continues; True when the fold had finished already (`--fold
        all --resume` keeps the folds already done)."""
        progress, done = self.progress, self.finished()
        if self.dist.main and done:
            print(
                f"{self.folder.name} finished already (epoch {progress.epoch}, best epoch "
                f"{progress.best_epoch}): kept"
            )
        elif self.dist.main:
            print(f"resumed after epoch {progress.epoch} (best AUC {progress.best_auc:.4f})")
        return done

    def run_epoch(self) -> None:
        """One epoch: train, validate (rank 0), select, write (rank 0), print."""
        train_loss, rate, train_seconds = self.train_epoch()
        self.progress.epoch += 1
        self.progress.epochs_run += 1
        clock = time.perf_counter()
        inner, fold = self.validate_epoch()
        record = EpochRecord(
            self.progress.epoch, train_loss, inner[0], inner[1], fold[0], fold[1], rate,
            train_seconds, time.perf_counter() - clock if self.dist.main else 0.0,
            self.setup.optimizer.param_groups[0]["lr"],
        )  # fmt: skip
        self.progress.history.append(asdict(record))
        selected = record.inner_auc if self.config.select_on == "inner" else record.fold_auc
        improved = self.select(self.dist.broadcast(selected))
        if self.dist.main:
            self.files.write_epoch(self.progress, improved)
            if improved and self.config.select_on == "inner" and inner[2] is not None:
                self.files.write_inner_predictions(self.data, self.progress.epoch, inner[2])
            print(epoch_line(record, self.config.select_on))

    def validate_epoch(self) -> tuple[tuple, tuple]:
        """(loss, AUC, probabilities) of the inner split and of the fold's validation
        tails, on rank 0 (NaN, NaN, None where there are none, or on another rank)."""
        inner = fold = (math.nan, math.nan, None)
        if self.dist.main and len(self.data.inner_tails.students):
            inner = self.validate(self.data.inner_tails)
        if self.dist.main and len(self.data.fold_tails.students):
            fold = self.validate(self.data.fold_tails)
        return inner, fold

    def select(self, selected: float) -> bool:
        """Whether this epoch is the best so far (every epoch is, for the full-data run);
        the progress records it."""
        progress = self.progress
        improved = self.config.full_data or (
            not math.isnan(selected) and selected > progress.best_auc
        )
        if improved:
            progress.best_auc, progress.best_epoch = selected, progress.epoch
        return improved


def member_folder(run: Run, config: TrainConfig, arch: str):
    """Where architecture `arch` of `config`'s run trains: the fold's folder for the
    primary (the first of --arch), a folder of its name inside it for another."""
    folder = run.model(config.fold, config.full_data)
    return folder if arch == config.primary else folder.member(arch)


def describe_run(trainer: Trainer) -> str:
    """What a run trains on and how: printed at the start of fit."""
    config, plan = trainer.config, trainer.plan
    warmup = "" if config.warmup else " (automatic: a tenth of the run, at most 4,000)"
    n = torch.get_num_threads()
    threads = f" ({n} thread{'s' * (n > 1)})" if trainer.device.type == "cpu" else ""
    return (
        f"{trainer.model.n_parameters():,} parameters; device {trainer.device}{threads}; "
        f"{describe_selection(config, trainer.data)}\n"
        f"{describe_sequences(trainer)}"
        f"{'' if config.batch_size else ' (automatic: see --batch-size)'}\n"
        f"schedule: {config.schedule}, lr {config.lr:g} after a warm-up of "
        f"{plan.warmup:,}{warmup} of {plan.total_steps:,} steps "
        f"({plan.total_steps // max(config.epochs, 1):,} per epoch)"
    )


def describe_sequences(trainer: Trainer) -> str:
    """What a step trains on: spans after a context (SAINT), or a recurrent model's lanes."""
    plan = trainer.plan
    if trainer.model.recurrent:
        return (
            f"{trainer.arch}: each student's history in chunks of at most {plan.span} "
            f"questions, its state carried from the first; {plan.batch_size} students side "
            "by side per step"
        )
    return (
        f"sequences: spans of {plan.span} questions after {plan.context} of context "
        f"(receptive field {trainer.setup.model_config.receptive_field}); "
        f"batches of {plan.batch_size} windows' worth of trained questions"
    )


def describe_selection(config: TrainConfig, data: FoldData) -> str:
    """What chooses best.pt, on how many students and questions."""
    if config.full_data:
        return (
            f"full data: {len(data.fit_length):,} students' {int(data.fit_length.sum()):,} "
            "questions all train; nothing is validated, best.pt is the last epoch"
        )
    if config.select_on == "inner":
        inner = data.inner_tails
        return (
            f"selection on an inner split of {len(inner.students):,} training students "
            f"({int((inner.end - inner.history).sum()):,} questions, share "
            f"{config.inner_share:g}); the fold's {len(data.valid_students):,} validation "
            f"students are logged only"
        )
    return (
        f"selection on the fold's {len(data.valid_students):,} validation students "
        f"(the rows 04 and 05 score: optimistic)"
    )


def epoch_line(record: EpochRecord, select_on: str) -> str:
    r = record
    return (
        f"epoch {r.epoch}: train loss {r.train_loss:.4f}  inner loss {r.inner_loss:.4f} AUC "
        f"{r.inner_auc:.4f}  fold loss {r.fold_loss:.4f} AUC {r.fold_auc:.4f}  (selects: "
        f"{select_on})  {r.interactions_per_s:,.0f} interactions/s  "
        f"({r.train_seconds:.0f}+{r.valid_seconds:.0f} s)"
    )


def training_data(config: TrainConfig, run: Run, main: bool) -> tuple[TrainConfig, FoldData]:
    """The data a run trains on: fold `config.fold` with its inner split, or every
    student (full_data; epochs 0 take the run's folds' median best epoch)."""
    if config.full_data:
        data = load_full_data(run.workspace)
        if config.epochs == 0:
            config = replace(config, epochs=cv_epochs(run, main))
        return config, data
    inner_share = config.inner_share if config.select_on == "inner" else 0.0
    return config, load_fold_data(run.workspace, config.fold, inner_share, config.seed)


def claim(
    run: Run,
    config: TrainConfig,
    overwrite: bool,
    dist_info: Distributed,
    held: contextlib.ExitStack,
) -> None:
    """Lock the fold folder for this process (common.runs.folders.fold_lock, kept until
    `held` closes) and claim it for this run (claim_fold_dir), on rank 0; every rank
    learns its verdict before going on. --overwrite leaves the run's oof.parquet to 04,
    which rewrites it from the folds it finds."""
    refusal = None
    if dist_info.main:
        folder = run.model(config.fold, config.full_data)
        try:
            held.enter_context(fold_lock(folder))
            if claim_fold_dir(folder, config, overwrite=overwrite):
                print(f"--overwrite: emptied {folder.path}")
            print(f"run {run.name}: {folder.path}")
        except UserError as error:  # another process's, another run's, not writable
            refusal = error
    if dist_info.broadcast(0.0 if refusal else 1.0) == 0.0:
        raise refusal or RunClashError(f"run {run.name}: rank 0 refused the fold folder")


def train(
    config: TrainConfig, workspace: Workspace, name: str | None = None, overwrite: bool = False
) -> dict[str, list[dict]]:
    """Train fold `config.fold` from the workspace's data/ and folds/, or (full_data)
    every student of its data/, into run `name`'s folder (runs/NAME/fold{k} or full/;
    default name: common.runs.folders.run_name): each architecture of config.arch in
    turn, the first in that folder, the others in folders of their names inside it. A
    fold folder holding files is refused unless it holds this config and config.resume
    is set, or `overwrite` (common.runs.folders.claim_fold_dir). When epochs were
    trained, one row per architecture is appended to runs.csv. Returns each
    architecture's history.csv rows, by name. Under torchrun the
    process group is joined once and kept for the next fold; the caller closes it
    (Distributed.close)."""
    begin = time.perf_counter()
    use_threads(config.threads)
    run = workspace.run(check_run_name(name) if name else run_name(config))
    dist_info = Distributed.from_env()
    device = resolve_device(config.device)
    if device.type == "cuda" and dist_info.world > 1:
        device = torch.device("cuda", dist_info.local_rank)
        torch.cuda.set_device(device)
    dist_info.init(device)
    # read (and checked) before the fold folder is touched: a refusal writes nothing
    config, data = training_data(config, run, dist_info.main)
    read_rows(workspace)  # a damaged runs.csv is refused before training, not after
    histories = {}
    with contextlib.ExitStack() as held:
        claim(run, config, overwrite, dist_info, held)
        for arch in config.arch:  # each architecture in turn, the primary first
            if len(config.arch) > 1 and dist_info.main:
                print(f"{arch}: {member_folder(run, config, arch).path}")
            trainer = Trainer(config, run, data, device, dist_info, arch)
            histories[arch] = trainer.fit()
            if dist_info.main and trainer.progress.epochs_run:
                row = trainer.files.run_row(trainer.progress, time.perf_counter() - begin)
                append_run_row(workspace, row)
            begin = time.perf_counter()
    return histories
