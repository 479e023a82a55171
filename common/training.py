"""Training loop for 03_train.py: training sequences, optimizer and schedule, validation
and model selection, what each checkpoint records (common/checkpoint.py writes it),
resume, early stopping, DistributedDataParallel.

Training sequences: a student's training questions are cut into consecutive spans
(`span` questions, 4 receptive fields by default), with the cut points shifted by a
random offset each epoch, so each question is trained on exactly once per epoch. Each
span is preceded by the model's receptive field of earlier questions as context, outside
the loss (epoch_spans): every trained prediction is made from the same state that
teacher-forced validation and streaming predict from, the student's last
`receptive_field` questions (or the whole history when shorter), whatever the history's
length (common/model.py: attention is banded to the window, so sequences longer than it
are exact and cost little more per question). Batches hold `batch_size` windows' worth
of trained questions (a span of L questions counts as ceil(L / window) windows), so a
step sees as many questions as SAINT's batch of 512 windows.

Model selection: with --select-on inner (the default) early stopping and best.pt are
chosen on an inner validation split carved from the fold's training students
(common.folds.inner_cut), so the fold's validation rows are scored by a model neither
trained nor selected on them; the fold's AUC is still logged every epoch.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm import tqdm

from common.checkpoint import (
    CheckpointError,
    dict_differences,
    latest_epoch_checkpoint,
    read_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from common.device import autocast_dtype, resolve_device
from common.difficulty import install_difficulty, out_of_fold_buckets
from common.distill import check_distill_options, distillation_loss, load_teacher
from common.features import window_inputs
from common.files import atomic_file, remove_stale_temp_files, write_json, write_run_record
from common.folds import FoldData, Tails, load_fold_data
from common.metrics import auc_or_nan, binary_log_loss
from common.model import MODEL_PRESETS, SAINT, ModelConfig
from common.predict import predict_tails, to_tensors
from common.tags import install_tags, tag_shape


@dataclass
class TrainConfig:
    fold: int = 0
    epochs: int = 20
    # windows' worth of trained questions per optimizer step; 0: SAINT's 512, or fewer
    # when an epoch would then take under 64 steps (a small data set: see batch_windows)
    batch_size: int = 0
    micro_batch: int = 0  # windows per forward pass; 0: 64 on CPU, the whole batch on CUDA
    # questions trained on per training sequence; 0: 4 x the model's receptive field (each
    # sequence also carries one receptive field of context outside the loss)
    span: int = 0
    lr: float = 1e-3
    # warm-up steps; 0: a tenth of the run's steps, at most SAINT's 4,000 (which assumes
    # Riiid's ~3,000 steps per epoch: on a small data set it would never end)
    warmup: int = 0
    schedule: str = "noam"  # "noam" (warm-up, then 1/sqrt(step)) or "cosine"
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    model: str = "saint+"  # a preset of decoder features: saint | saint+
    decoder_features: tuple[str, ...] | None = None  # overrides the preset when set
    d_model: int = 256
    d_ff: int = 0  # feed-forward width; 0: 4 * d_model (the Transformer's ratio)
    layers: int = 2  # per side: encoder and decoder
    heads: int = 8
    dropout: float = 0.1
    window: int = 100
    attention: str = "mha"
    kv_latent_dim: int = 64
    difficulty_buckets: int = 0
    tags: bool = False  # the mean embedding of each question's tags in the encoder
    question_embedding: str = "id"  # "id" or "rasch" (needs tags; common/model.py)
    rope_fraction: float = 1.0  # share of each head's channels rotary positions rotate
    seed: int = 0
    device: str = "auto"
    amp: str = "auto"  # auto: bf16 (or fp16) autocast on CUDA, off on CPU
    resume: bool = False
    patience: int = 3  # epochs without a better selection AUC before stopping
    select_on: str = "inner"  # "inner": an inner split of the training students; "fold"
    inner_share: float = 0.1  # share of training students in the inner validation split
    valid_batch_size: int = 256
    progress: bool = True
    teacher: str | None = None  # knowledge distillation (common/distill.py)
    distill_alpha: float = 0.5
    distill_temperature: float = 2.0

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown TrainConfig keys {sorted(unknown)}")
        return cls(**values)

    def model_config(self, n_questions: int, tag_shape: tuple[int, int] = (0, 1)) -> ModelConfig:
        """tag_shape: (n_tags, max_tags) of the questions (common.tags.tag_shape); used
        when `tags` is on."""
        if self.model not in MODEL_PRESETS:
            raise ValueError(f"--model must be one of {sorted(MODEL_PRESETS)}, got {self.model!r}")
        features = self.decoder_features
        if features is None:
            features = MODEL_PRESETS[self.model]
        return ModelConfig(
            n_questions=n_questions,
            d_model=self.d_model,
            d_ff=self.d_ff,
            n_heads=self.heads,
            encoder_layers=self.layers,
            decoder_layers=self.layers,
            dropout=self.dropout,
            window=self.window,
            decoder_features=tuple(features),
            attention=self.attention,
            kv_latent_dim=self.kv_latent_dim,
            difficulty_buckets=self.difficulty_buckets,
            n_tags=tag_shape[0] if self.tags else 0,
            max_tags=tag_shape[1] if self.tags else 1,
            question_embedding=self.question_embedding,
            rope_fraction=self.rope_fraction,
        )


# ---------------------------------------------------------------------------------------
# data


def epoch_spans(
    train_length: np.ndarray, span: int, context: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(student, start, begin, stop) of this epoch's training sequences, shuffled.

    Each student's questions [0, train_length) are cut into consecutive spans of `span`
    questions, the cut points shifted by a random offset each epoch (the first span is the
    shorter one), so each question is trained on exactly once per epoch. A sequence runs
    from `start` = max(0, begin - context) to `stop` and is trained on [begin, stop): the
    `context` questions before a span are its context only, so every trained position has
    the whole receptive field behind it (or the student's whole history), the state that
    validation and streaming predict from."""
    shift = rng.integers(0, span, size=len(train_length))
    shift = np.where(train_length > span, shift, 0)
    # span j of a student covers [max(0, j*L - shift), min(n, (j+1)*L - shift))
    count = np.where(train_length > 0, (train_length + shift + span - 1) // span, 0)
    student = np.repeat(np.arange(len(train_length)), count)
    j = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    begin = np.maximum(0, j * span - shift[student])
    stop = np.minimum(train_length[student], (j + 1) * span - shift[student])
    start = np.maximum(0, begin - context)
    order = rng.permutation(len(student))
    return student[order], start[order], begin[order], stop[order]


BATCH_MAX = 512  # SAINT's batch size, for Riiid's ~1.4M windows per epoch
STEPS_MIN = 64  # automatic batch size: fewer windows per step below this many steps


def batch_windows(train_length: np.ndarray, window: int, world: int = 1) -> int:
    """The automatic batch size: SAINT's 512 windows per step (per process), or fewer on
    a small data set so that an epoch still takes STEPS_MIN optimizer steps (at least
    16 windows): with Riiid's batch, 2,000 demo students give a dozen steps per epoch."""
    windows = int((-(-np.asarray(train_length) // window)).sum())
    return int(np.clip(windows // (STEPS_MIN * world), 16, BATCH_MAX))


def batch_bounds(weight: np.ndarray, budget: int, least: int = 1) -> list[slice]:
    """Consecutive batches of items with these weights, each closed once it holds
    `budget` weight and at least `least` items; the last one may be smaller."""
    bounds, lo, total = [], 0, 0
    for i, w in enumerate(weight.tolist()):
        total += w
        if total >= budget and i + 1 - lo >= least:
            bounds.append(slice(lo, i + 1))
            lo, total = i + 1, 0
    if lo < len(weight):
        bounds.append(slice(lo, len(weight)))
    return bounds


# ---------------------------------------------------------------------------------------
# devices, distributed, precision


@dataclass
class Distributed:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls) -> Distributed:
        if "WORLD_SIZE" not in os.environ or int(os.environ["WORLD_SIZE"]) == 1:
            return cls()
        return cls(
            int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
        )

    def init(self, device: torch.device) -> None:
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def broadcast(self, value: float) -> float:
        if self.world == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64)
        dist.broadcast(tensor, 0)
        return float(tensor.item())


# ---------------------------------------------------------------------------------------


WARMUP_SHARE = 0.1  # automatic warm-up: this share of the run's steps ...
WARMUP_MAX = 4000  # ... at most SAINT's warm-up


def warmup_steps(requested: int, total_steps: int) -> int:
    """The warm-up: `requested` steps, or (0) a tenth of the run, at most 4,000 steps."""
    if requested > 0:
        return requested
    return max(1, min(WARMUP_MAX, round(WARMUP_SHARE * total_steps)))


def lr_factor(step: int, schedule: str, warmup: int, total_steps: int) -> float:
    """The learning rate's multiplier at optimizer step `step` (1-based): a linear warm-up
    to 1 at step `warmup`, then 1 / sqrt(step) (noam) or a cosine to 0 at total_steps."""
    step = max(step, 1)
    warm = max(warmup, 1)
    if schedule == "noam":
        return min(step / warm, math.sqrt(warm / step))
    if schedule == "cosine":
        if step < warm:
            return step / warm
        progress = min((step - warm) / max(total_steps - warm, 1), 1.0)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"schedule must be noam or cosine, got {schedule!r}")


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
class Trainer:
    config: TrainConfig
    output_dir: Path
    data: FoldData
    device: torch.device
    dist: Distributed = field(default_factory=Distributed)

    def __post_init__(self) -> None:
        self.fold_dir = self.output_dir / f"fold{self.config.fold}"
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
        if self.config.difficulty_buckets:
            install_difficulty(self.model, self.data)
            self.difficulty = out_of_fold_buckets(
                self.data.sequences,
                self.data.fit_length,
                self.data.n_questions,
                self.config.difficulty_buckets,
            )
        if self.config.tags:
            install_tags(self.model, self.data.questions)
        self.train_model = self.model
        if self.dist.world > 1:
            # buffers are not broadcast: the rotary table grows lazily to each rank's
            # largest position, and the difficulty buckets are computed alike on every rank
            self.train_model = torch.nn.parallel.DistributedDataParallel(
                self.model,
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

    # -- checkpoints -------------------------------------------------------------------
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
            "fold": self.config.fold,
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
        # through ModelConfig, so that a field added since the checkpoint reads as its default
        recorded = ModelConfig.from_dict(checkpoint["model_config"]).to_dict()
        differences = dict_differences(recorded, self.model_config.to_dict())
        if differences:
            raise CheckpointError(
                f"{path} was trained with another model config (key: checkpoint vs this run) "
                f"{differences}; resume with the same flags or start in another --output-dir"
            )
        recorded_folds = checkpoint.get("fold_fingerprint")
        if self.data.fingerprint is not None and recorded_folds != self.data.fingerprint:
            raise CheckpointError(
                f"{path} was trained on other folds (fingerprint "
                f"{(recorded_folds or {}).get('sha256')}) than those on disk now "
                f"({self.data.fingerprint['sha256']}); start in another --output-dir"
            )
        self._note_train_config_changes(path, checkpoint.get("train_config", {}))
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

    def _note_train_config_changes(self, path: Path, recorded: dict) -> None:
        """Print which settings that shape the trajectory differ from the checkpoint's
        (a resumed run then differs from an uninterrupted one)."""
        shaping = (
            "batch_size", "micro_batch", "span", "lr", "warmup", "schedule", "weight_decay",
            "grad_clip", "seed", "amp", "teacher", "distill_alpha", "distill_temperature",
            "select_on", "inner_share",
        )  # fmt: skip
        current = asdict(self.config)
        changed = dict_differences(
            {k: recorded.get(k) for k in shaping}, {k: current[k] for k in shaping}
        )
        if changed and self.dist.main:
            print(f"note: resuming {path} with other settings (checkpoint vs now): {changed}")

    def _restore_epoch_outputs(self) -> None:
        """Redo what a kill right after the epoch checkpoint may have cut short: best.pt
        (the best epoch's checkpoint holds the same payload), history.csv, config.json."""
        best = self.fold_dir / f"epoch_{self.best_epoch:02d}.pt"
        if self.best_epoch >= 1 and best.exists():
            with atomic_file(self.fold_dir / "best.pt") as tmp:
                shutil.copyfile(best, tmp)
        history = self.fold_dir / "history.csv"
        rows = len(history.read_text().splitlines()) - 1 if history.exists() else -1
        if rows != len(self.history):
            self._write_epoch(improved=False)

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

        On a CPU (no --micro-batch) the windows are first sorted by length, longest first,
        and a new part starts where a window is under half the part's longest, or where
        the part would pass 64 full windows of positions. The batch, and so the gradient,
        stays the same; the padding does not: on students with short histories (most
        ASSISTments students have under 100 responses) a random batch of 64 windows is
        mostly padding to its one long window."""
        n = len(batch["valid"])
        if self.config.micro_batch or self.device.type == "cuda":
            size = self.config.micro_batch or n
            groups = [slice(lo, lo + size) for lo in range(0, n, size)]
        else:
            length = batch["valid"].sum(1)
            order = torch.argsort(length, descending=True, stable=True)
            groups, lo, budget = [], 0, 64 * self.config.window
            sorted_length = length[order].tolist()
            for i in range(1, n + 1):
                longest = sorted_length[lo]
                if i == n or 2 * sorted_length[i] < longest or (i + 1 - lo) * longest > budget:
                    groups.append(order[lo:i])
                    lo = i
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

    def resolved(self) -> dict:
        """What the automatic settings (0 in TrainConfig) resolved to for this run."""
        return {
            "batch_size": self.batch_size,
            "warmup": self.warmup,
            "total_steps": self.total_steps,
            "span": self.span,
            "context": self.context,
        }

    def describe(self) -> str:
        """What this run trains on and how: printed at the start of fit."""
        data, config = self.data, self.config
        inner = data.inner_tails
        selection = (
            f"selection on an inner split of {len(inner.students):,} training students "
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
    def fit(self) -> list[dict]:
        config = self.config
        if config.resume and self.resume() and self.dist.main:
            print(f"resumed after epoch {self.epoch} (best AUC {self.best_auc:.4f})")
        if self.dist.main:
            write_run_record(
                self.fold_dir,
                "train",
                asdict(config) | {"model_config": self.model_config.to_dict()},
            )
            print(self.describe())
        while self.epoch < config.epochs:
            if self.best_epoch >= 0 and self.epoch - self.best_epoch > config.patience:
                break
            train_loss, rate, train_seconds = self.train_epoch()
            self.epoch += 1
            inner_loss = inner_auc = fold_loss = fold_auc = math.nan
            valid_seconds = 0.0
            if self.dist.main:
                clock = time.perf_counter()
                if len(self.data.inner_tails.students):
                    inner_loss, inner_auc, _ = self.validate(self.data.inner_tails)
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
            improved = not math.isnan(selected) and selected > self.best_auc
            if improved:
                self.best_auc, self.best_epoch = selected, self.epoch
            if self.dist.main:
                self._write_epoch(improved)
                print(
                    f"epoch {self.epoch}: train loss {train_loss:.4f}  inner loss "
                    f"{inner_loss:.4f} AUC {inner_auc:.4f}  fold loss {fold_loss:.4f} AUC "
                    f"{fold_auc:.4f}  (selects: {config.select_on})  "
                    f"{rate:,.0f} interactions/s  ({train_seconds:.0f}+{valid_seconds:.0f} s)"
                )
            self.dist.barrier()
        return self.history

    def _write_epoch(self, improved: bool) -> None:
        payload = self.checkpoint_payload()
        save_checkpoint(self.fold_dir / f"epoch_{self.epoch:02d}.pt", payload)
        if improved:
            save_checkpoint(self.fold_dir / "best.pt", payload)
        with atomic_file(self.fold_dir / "history.csv") as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(self.history[0]))
            writer.writeheader()
            writer.writerows(self.history)
        write_json(
            self.fold_dir / "config.json",
            {
                "train_config": asdict(self.config),
                "model_config": self.model_config.to_dict(),
                "resolved": self.resolved(),
            },
        )


def train(config: TrainConfig, output_dir: str | Path) -> list[dict]:
    """Train fold `config.fold` from `<output_dir>/data` and `<output_dir>/folds`."""
    dist_info = Distributed.from_env()
    device = resolve_device(config.device)
    if device.type == "cuda" and dist_info.world > 1:
        device = torch.device("cuda", dist_info.local_rank)
        torch.cuda.set_device(device)
    dist_info.init(device)
    try:
        inner_share = config.inner_share if config.select_on == "inner" else 0.0
        data = load_fold_data(output_dir, config.fold, inner_share, config.seed)
        trainer = Trainer(config, Path(output_dir), data, device, dist_info)
        return trainer.fit()
    finally:
        if dist_info.world > 1 and dist.is_initialized():
            dist.destroy_process_group()
