"""What a training run builds before its first step (TrainSetup): the model of one
architecture (common.model.registry) with its optional inputs, a frozen teacher, the
module that trains (compiled, wrapped for DistributedDataParallel), the optimizer, the
learning-rate schedule, the autocast dtype and gradient scaler, and the run's plan
(common.train.plan.TrainPlan, or a recurrent model's common.train.recurrent.RecurrentPlan).

The order of the steps is the order in which they draw random numbers: the same seed
builds the same initial weights.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from common.data.fold_data import FoldData
from common.data.past_features import attach_model_features, question_skills
from common.device import Distributed, autocast_dtype
from common.model.difficulty import install_difficulty, out_of_fold_buckets
from common.model.distill import check_distill_options, load_teacher
from common.model.interface import KTModel
from common.model.registry import build_model
from common.model.tags import install_tags, tag_shape
from common.train.config import TrainConfig
from common.train.plan import PartPlan, TrainPlan, batch_windows, lr_factor, warmup_steps
from common.train.recurrent import Chunks, RecurrentPlan, steps_per_epoch


@dataclass
class TrainSetup:
    arch: str  # the architecture trained (common.model.registry)
    model_config: object  # its config, the data's sizes filled in
    model: KTModel  # what validation predicts with and checkpoints save
    teacher: KTModel | None  # frozen, distilled from (--teacher)
    train_model: torch.nn.Module  # the model, compiled and/or wrapped for DDP
    difficulty: np.ndarray | None  # per flat question: its difficulty bucket as an input
    plan: TrainPlan | RecurrentPlan
    parts: PartPlan | None  # how a batch is cut into parts on this device (not recurrent)
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    amp_dtype: torch.dtype | None
    scaler: torch.amp.GradScaler
    chunks: Chunks | None  # a recurrent model's chunks of every training student


def build(
    config: TrainConfig,
    data: FoldData,
    device: torch.device,
    dist: Distributed,
    arch: str | None = None,
) -> TrainSetup:
    """Everything `config`'s run of architecture `arch` (default: its primary) on `data`
    needs before its first step, seeded."""
    torch.manual_seed(config.seed)
    np.random.seed(config.seed)
    random.seed(config.seed)
    arch = arch or config.primary
    shape = tag_shape(data.questions) if config.tags else (0, 1)
    model_config = config.model_config(data.n_questions, shape, arch)
    if model_config.past_features != "none":  # then every batch carries them
        attach_model_features(data.sequences, question_skills(data.questions, data.n_questions))
    model = build_model(arch, model_config).to(device)
    teacher = build_teacher(config, device, model_config, data, model)
    chunks = None
    if model.recurrent:
        chunks = Chunks.of(
            data.sequences, data.fit_length, model_config.window, model_config.key_context
        )
        plan = recurrent_plan(config, model_config, chunks, data.fit_length, dist)
    else:
        # context before each span: every model that predicts on the batch (a teacher
        # too) must have its whole receptive field behind each trained position
        context = max(m.config.receptive_field for m in (model, teacher) if m is not None)
        plan = TrainPlan.resolve(
            config, model_config, context, data.fit_length, dist.world, dist.rank
        )
    check_selection(config, data)
    difficulty = install_inputs(model, config, data)
    optimizer = build_optimizer(model, config)
    schedule = (config.schedule, plan.warmup, plan.total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step + 1, *schedule)
    )
    amp_dtype = autocast_dtype(config.amp, device)
    scaler = torch.amp.GradScaler(device.type, enabled=amp_dtype == torch.float16)
    train_model = training_module(model, config, device, dist)
    # a recurrent step is one pass over its lanes (their states are rows of one tensor)
    parts = (
        None if model.recurrent else PartPlan.for_device(model_config, device, config.micro_batch)
    )
    return TrainSetup(
        arch, model_config, model, teacher, train_model, difficulty, plan, parts, optimizer,
        scheduler, amp_dtype, scaler, chunks,
    )  # fmt: skip


def recurrent_plan(
    config: TrainConfig, model_config, chunks: Chunks, fit_length: np.ndarray, dist: Distributed
) -> RecurrentPlan:
    """A recurrent run's plan: as many lanes as SAINT's batch has windows (--batch-size,
    or its automatic size), the schedule over every epoch's steps."""
    window = model_config.window
    lanes = config.batch_size or batch_windows(fit_length, window, dist.world)
    plan = RecurrentPlan(lanes, window, 0, 0, config.seed, dist.world, dist.rank)
    total = steps_per_epoch(plan, chunks, config.epochs)
    return RecurrentPlan(
        lanes, window, warmup_steps(config.warmup, total), total, config.seed, dist.world,
        dist.rank,
    )  # fmt: skip


def build_teacher(
    config: TrainConfig, device: torch.device, model_config, data: FoldData, model: KTModel
) -> KTModel | None:
    if not config.teacher:
        return None
    if model.recurrent:
        raise ValueError(f"--teacher distils into SAINT; {model.arch} does not take one")
    check_distill_options(config.distill_alpha, config.distill_temperature)
    return load_teacher(config.teacher, device, model_config, data.fingerprint)


def check_selection(config: TrainConfig, data: FoldData) -> None:
    if config.full_data:
        return  # nothing is held out: every epoch's model is the last and the best
    if config.select_on not in ("inner", "fold"):
        raise ValueError(f"select_on must be inner or fold, got {config.select_on!r}")
    if config.select_on == "inner" and len(data.inner_tails.students) == 0:
        raise ValueError(
            "select_on inner needs an inner validation split, and this fold data has "
            "none (load it with inner_share > 0, or select on the fold)"
        )


def install_inputs(model: KTModel, config: TrainConfig, data: FoldData) -> np.ndarray | None:
    """The optional inputs whose tables come from the data: question difficulty (its
    buckets, out of fold, are returned: the batches read them) and tags."""
    difficulty = None
    buckets = model.config.difficulty_buckets
    if buckets:
        install_difficulty(model, data)
        difficulty = out_of_fold_buckets(data.sequences, data.fit_length, data.n_questions, buckets)
    if config.tags:
        install_tags(model, data.questions)
    return difficulty


def training_module(
    model: KTModel, config: TrainConfig, device: torch.device, dist: Distributed
) -> torch.nn.Module:
    """The module the steps run: `model`, compiled (--compile; not a recurrent model, whose
    passes write its carried state) and wrapped for DDP under torchrun. Validation and
    checkpoints keep the plain module."""
    compiled = config.compile and not model.recurrent
    train_model = torch.compile(model, dynamic=True) if compiled else model
    if dist.world > 1:
        # buffers are not broadcast: the rotary table grows lazily to each rank's largest
        # position, and the difficulty buckets are computed alike on every rank
        train_model = torch.nn.parallel.DistributedDataParallel(
            train_model,
            device_ids=[device.index] if device.type == "cuda" else None,
            broadcast_buffers=False,
        )
    return train_model


def build_optimizer(model: KTModel, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW, no weight decay on biases, norms and other vectors."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": config.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=config.lr,
        betas=(0.9, 0.98),  # Vaswani et al.'s Adam betas for warm-up schedules
    )
