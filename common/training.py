"""Training loop for 03_train.py: windows, optimizer and schedule, validation,
self-describing checkpoints, resume, early stopping, DistributedDataParallel.

Windows: a student's training questions are cut into consecutive windows of `window`
questions, with the cut points shifted by a random offset each epoch (the first window
is the shorter one), so each question is trained on exactly once per epoch and sits at a
different place in its window from epoch to epoch. Students shorter than a window give
one padded window; padding is masked out of attention and loss.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score
from tqdm import tqdm

from common.data import DATA_SUBDIR, TrainArrays, load_questions, question_parts
from common.features import QuestionSequences, build_sequences, window_inputs
from common.files import atomic_file, write_json, write_run_record
from common.folds import Fold
from common.model import MODEL_PRESETS, SAINT, ModelConfig
from common.predict import predict_tails, to_tensors


@dataclass
class TrainConfig:
    fold: int = 0
    epochs: int = 20
    batch_size: int = 512  # SAINT's batch size
    micro_batch: int = 0  # windows per forward pass; 0: 64 on CPU, the whole batch on CUDA
    lr: float = 1e-3
    warmup: int = 4000  # steps; SAINT's Noam warm-up
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
    seed: int = 0
    device: str = "auto"
    amp: str = "auto"  # auto: bf16 (or fp16) autocast on CUDA, off on CPU
    resume: bool = False
    patience: int = 3  # epochs without a better validation AUC before stopping
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
        )


# ---------------------------------------------------------------------------------------
# data


@dataclass
class FoldData:
    """A fold's question sequences and where each student's validation tail starts."""

    sequences: QuestionSequences
    train_length: np.ndarray  # (n_students,) questions before the cut
    valid_students: np.ndarray  # students with validation questions
    n_questions: int
    questions: pd.DataFrame | None = None  # questions.parquet (tags for --tags)

    @property
    def valid_history(self) -> np.ndarray:
        return self.train_length[self.valid_students]

    @property
    def valid_end(self) -> np.ndarray:
        return self.sequences.lengths()[self.valid_students]

    def valid_labels(self) -> np.ndarray:
        seq = self.sequences
        index = np.concatenate(
            [
                np.arange(seq.offsets[s] + h, seq.offsets[s + 1])
                for s, h in zip(self.valid_students, self.valid_history, strict=True)
            ]
            or [np.zeros(0, dtype=np.int64)]
        )
        return seq.response[index].astype(np.float32)


def load_fold_data(output_dir: str | Path, fold_index: int) -> FoldData:
    data_dir = Path(output_dir) / DATA_SUBDIR
    arrays = TrainArrays.load(data_dir)
    questions = load_questions(data_dir)
    sequences = build_sequences(arrays, question_parts(questions))
    fold = Fold.load(output_dir, fold_index)
    cut_row = arrays.offsets[:-1] + fold.user_cut
    train_length = np.searchsorted(sequences.row, cut_row) - sequences.offsets[:-1]
    has_valid = train_length < sequences.lengths()
    return FoldData(
        sequences=sequences,
        train_length=train_length.astype(np.int64),
        valid_students=np.flatnonzero(has_valid),
        n_questions=int(questions["question_id"].max()) + 1,
        questions=questions,
    )


def epoch_windows(
    train_length: np.ndarray, window: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(student, start, length) of this epoch's windows, shuffled."""
    shift = rng.integers(0, window, size=len(train_length))
    shift = np.where(train_length > window, shift, 0)
    # window j of a student spans [max(0, j*W - shift), min(n, (j+1)*W - shift))
    count = np.where(train_length > 0, (train_length + shift + window - 1) // window, 0)
    student = np.repeat(np.arange(len(train_length)), count)
    j = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    begin = np.maximum(0, j * window - shift[student])
    stop = np.minimum(train_length[student], (j + 1) * window - shift[student])
    order = rng.permutation(len(student))
    return student[order], begin[order], (stop - begin)[order]


# ---------------------------------------------------------------------------------------
# devices, distributed, precision


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    return torch.device(name)


def autocast_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    if amp == "off" or (amp == "auto" and device.type != "cuda"):
        return None
    if amp == "fp16":
        return torch.float16
    if amp in ("auto", "bf16"):
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            return torch.float16
        return torch.bfloat16
    raise ValueError(f"--amp must be auto, bf16, fp16 or off, got {amp!r}")


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
# checkpoints


def rng_state() -> dict:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: Path, payload: dict) -> None:
    """Write a checkpoint atomically, with a digest of its weights that load_model checks
    (damage inside tensor data would otherwise load silently)."""
    payload = payload | {"model_digest": state_digest(payload["model_state"])}
    with atomic_file(path) as tmp:
        torch.save(payload, tmp)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, unreadable (truncated or corrupted), or
    holding weights of another model config than the one it records. The message names
    the file."""


def read_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> dict:
    """torch.load, with a CheckpointError naming the file when it is missing or is not a
    readable checkpoint of this project."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found (03_train.py writes it)")
    try:
        checkpoint = torch.load(path, map_location=device, weights_only=False)
    # Unpickling a damaged file can raise nearly any exception type (RuntimeError from the
    # zip reader, EOFError, UnpicklingError, UnicodeDecodeError, ...); the cause is chained.
    except Exception as error:
        first_sentence = (str(error).splitlines() or [""])[0].split(". ")[0][:160]
        raise CheckpointError(
            f"{path}: not a readable checkpoint ({path.stat().st_size:,} bytes; truncated or "
            f"corrupted?): {type(error).__name__}: {first_sentence}"
        ) from error
    for key in ("model_config", "model_state"):
        if not isinstance(checkpoint, dict) or key not in checkpoint:
            raise CheckpointError(f"{path}: not a checkpoint of this project (no {key!r})")
    return checkpoint


def state_digest(state: dict[str, torch.Tensor]) -> str:
    """sha256 over a state dict's names, shapes, dtypes and bytes: a checkpoint that
    records it is checked on load, which catches damage inside tensor data that the zip
    reader does not notice."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def dict_differences(found: dict, expected: dict, limit: int = 6) -> str:
    """'key: <found> vs <expected>' for each key whose values differ ('<none>' where a
    dict lacks the key), at most `limit` of them; '' when the dicts agree."""

    def shown(values: dict, key) -> str:
        return repr(values[key]) if key in values else "<none>"

    keys = sorted(set(found) | set(expected), key=str)
    parts = [
        f"{k}: {shown(found, k)} vs {shown(expected, k)}"
        for k in keys
        if k not in found or k not in expected or found[k] != expected[k]
    ]
    more = f" (+{len(parts) - limit} more)" if len(parts) > limit else ""
    return "; ".join(parts[:limit]) + more


def state_mismatch(state: dict[str, torch.Tensor], model: torch.nn.Module) -> str:
    """Which weights of `state` do not fit `model` (missing, unexpected, other shape)."""
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in state.items()}
    return dict_differences(found, shapes)


def load_model(path: str | Path, device: torch.device | str = "cpu") -> tuple[SAINT, dict]:
    """Rebuild a model from a checkpoint alone; returns (model in eval mode, checkpoint).

    Raises CheckpointError naming the file when it is missing or damaged, or when its
    weights do not fit the model config it records."""
    checkpoint = read_checkpoint(path, device)
    try:
        config = ModelConfig.from_dict(checkpoint["model_config"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(
            f"{path}: its model_config does not fit this code: {error}"
        ) from error
    model = SAINT(config).to(device)
    state = checkpoint["model_state"]
    mismatch = state_mismatch(state, model)
    if mismatch:
        raise CheckpointError(
            f"{path}: its weights are of another model config than the one it records "
            f"(weight: checkpoint shape vs its config's shape) {mismatch}"
        )
    recorded = checkpoint.get("model_digest")
    if recorded is not None and recorded != state_digest(state):
        raise CheckpointError(f"{path}: its weights do not match their recorded digest (corrupted)")
    model.load_state_dict(state)
    return model.eval(), checkpoint


def latest_epoch_checkpoint(fold_dir: Path) -> Path | None:
    found = sorted(fold_dir.glob("epoch_*.pt"))
    return found[-1] if found else None


def remove_stale_temp_files(folder: Path) -> list[Path]:
    """Remove temp files (common.files' `.name.tmp-PID`) whose process is gone: what a
    run killed while writing leaves beside its outputs. Returns what was removed."""
    removed = []
    for path in folder.glob(".*.tmp-*"):
        pid = path.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _process_alive(int(pid)) and path.is_file():
            path.unlink()
            removed.append(path)
    return removed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


# ---------------------------------------------------------------------------------------


def lr_factor(step: int, config: TrainConfig, total_steps: int) -> float:
    step = max(step, 1)
    warm = max(config.warmup, 1)
    if config.schedule == "noam":
        return min(step / warm, math.sqrt(warm / step))
    if config.schedule == "cosine":
        if step < warm:
            return step / warm
        progress = min((step - warm) / max(total_steps - warm, 1), 1.0)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"schedule must be noam or cosine, got {config.schedule!r}")


def masked_bce(logits: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    loss = F.binary_cross_entropy_with_logits(logits.float(), labels, reduction="none")
    return (loss * valid).sum() / valid.sum().clamp(min=1)


@dataclass
class EpochRecord:
    epoch: int
    train_loss: float
    valid_loss: float
    valid_auc: float
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
            from common.tags import tag_shape

            shape = tag_shape(self.data.questions)
        self.model_config = self.config.model_config(self.data.n_questions, shape)
        self.model = SAINT(self.model_config).to(self.device)
        self.teacher = None
        if self.config.teacher:
            from common.distill import check_distill_options, load_teacher

            check_distill_options(self.config.distill_alpha, self.config.distill_temperature)
            self.teacher = load_teacher(
                self.config.teacher, self.device, self.model_config, self.config.fold
            )
        if self.config.difficulty_buckets:
            from common.difficulty import install_difficulty

            install_difficulty(self.model, self.data)
        if self.config.tags:
            from common.tags import install_tags

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
        steps_per_epoch = self._steps_per_epoch()
        total = steps_per_epoch * self.config.epochs
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: lr_factor(step + 1, self.config, total)
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

    def _steps_per_epoch(self) -> int:
        lengths = self.data.train_length
        windows = int(((lengths + self.config.window - 1) // self.config.window).sum())
        return max(1, math.ceil(windows / self.dist.world / self.config.batch_size))

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
            "batch_size", "micro_batch", "lr", "warmup", "schedule", "weight_decay",
            "grad_clip", "seed", "amp", "teacher", "distill_alpha", "distill_temperature",
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
        rng = np.random.default_rng([config.seed, self.epoch])
        student, start, length = epoch_windows(self.data.train_length, config.window, rng)
        # every rank takes the same number of batches (DDP steps in lockstep)
        per_rank = len(student) // self.dist.world
        if self.dist.world > 1:
            pick = slice(self.dist.rank, per_rank * self.dist.world, self.dist.world)
            student, start, length = student[pick], start[pick], length[pick]
        self.train_model.train()
        total_loss, total_count = 0.0, 0
        begin = time.perf_counter()
        batches = range(0, len(student), config.batch_size)
        bar = tqdm(
            batches,
            desc=f"epoch {self.epoch + 1}",
            disable=not (config.progress and self.dist.main),
            leave=False,
        )
        for lo in bar:
            part = slice(lo, lo + config.batch_size)
            inputs = window_inputs(
                self.data.sequences,
                student[part],
                start[part],
                length[part],
                self.data.n_questions,
            )
            batch = to_tensors(inputs, self.device)
            loss, count = self.train_step(batch)
            total_loss += loss * count
            total_count += count
            seconds = time.perf_counter() - begin
            bar.set_postfix(
                loss=f"{total_loss / max(total_count, 1):.4f}",
                rate=f"{total_count * self.dist.world / seconds:,.0f}/s",
            )
        seconds = time.perf_counter() - begin
        return total_loss / max(total_count, 1), total_count * self.dist.world / seconds, seconds

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
        """Mean loss over the batch's valid positions."""
        valid = batch["valid"].float()
        with torch.autocast(
            self.device.type,
            dtype=self.amp_dtype or torch.float32,
            enabled=self.amp_dtype is not None,
        ):
            logits = self.train_model(batch)
            if self.teacher is None:
                return masked_bce(logits, batch["label"], valid)
            from common.distill import distillation_loss

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
        total = int(batch["valid"].sum())
        self.optimizer.zero_grad(set_to_none=True)
        parts = self.micro_batches(batch)
        batch_loss = 0.0
        for i, part in enumerate(parts):
            weight = float(part["valid"].sum()) / max(total, 1)
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

    def validate(self) -> tuple[float, float, np.ndarray]:
        data = self.data
        probability = predict_tails(
            self.model,
            data.sequences,
            data.valid_students,
            data.valid_history,
            data.valid_end,
            self.device,
            self.config.valid_batch_size,
        )
        labels = data.valid_labels()
        if len(labels) == 0:
            return math.nan, math.nan, probability
        clipped = np.clip(probability, 1e-7, 1 - 1e-7)
        loss = float(-(labels * np.log(clipped) + (1 - labels) * np.log(1 - clipped)).mean())
        auc = roc_auc_score(labels, probability) if 0 < labels.mean() < 1 else math.nan
        return loss, float(auc), probability

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
            print(
                f"{self.model.n_parameters():,} parameters; {len(self.data.valid_students):,} "
                f"validation students; device {self.device}"
            )
        while self.epoch < config.epochs:
            if self.best_epoch >= 0 and self.epoch - self.best_epoch > config.patience:
                break
            train_loss, rate, train_seconds = self.train_epoch()
            self.epoch += 1
            valid_loss = valid_auc = math.nan
            valid_seconds = 0.0
            if self.dist.main:
                begin = time.perf_counter()
                valid_loss, valid_auc, _ = self.validate()
                valid_seconds = time.perf_counter() - begin
            valid_auc = self.dist.broadcast(valid_auc)
            record = EpochRecord(
                self.epoch,
                train_loss,
                valid_loss,
                valid_auc,
                rate,
                train_seconds,
                valid_seconds,
                self.optimizer.param_groups[0]["lr"],
            )
            self.history.append(asdict(record))
            improved = not math.isnan(valid_auc) and valid_auc > self.best_auc
            if improved:
                self.best_auc, self.best_epoch = valid_auc, self.epoch
            if self.dist.main:
                self._write_epoch(improved)
                print(
                    f"epoch {self.epoch}: train loss {train_loss:.4f}  "
                    f"valid loss {valid_loss:.4f}  valid AUC {valid_auc:.4f}  "
                    f"{rate:,.0f} interactions/s  "
                    f"({train_seconds:.0f}+{valid_seconds:.0f} s)"
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
            {"train_config": asdict(self.config), "model_config": self.model_config.to_dict()},
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
        data = load_fold_data(output_dir, config.fold)
        trainer = Trainer(config, Path(output_dir), data, device, dist_info)
        return trainer.fit()
    finally:
        if dist_info.world > 1 and dist.is_initialized():
            dist.destroy_process_group()
