"""What a training run builds before its first step (TrainSetup): the model with its
optional inputs, a frozen teacher, the module that trains (compiled, wrapped for
DistributedDataParallel), the optimizer, the learning-rate schedule, the autocast dtype
and gradient scaler, and the run's plan (common.train.plan.TrainPlan).

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
from common.model.saint import SAINT, ModelConfig
from common.model.tags import install_tags, tag_shape
from common.train.config import TrainConfig
from common.train.plan import PartPlan, TrainPlan, lr_factor


@dataclass
class TrainSetup:
    model_config: ModelConfig
    model: SAINT  # what validation predicts with and checkpoints save
    teacher: SAINT | None  # frozen, distilled from (--teacher)
    train_model: torch.nn.Module  # the model, compiled and/or wrapped for DDP
    difficulty: np.ndarray | None  # per flat question: its difficulty bucket as an input
    plan: TrainPlan
    parts: PartPlan  # how a batch is cut into parts on this device
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    amp_dtype: torch.dtype | None
    scaler: torch.amp.GradScaler


def build(
    config: TrainConfig, data: FoldData, device: torch.device, dist: Distributed
) -> TrainSetup:
    """Everything `config`'s run on `data` needs before its first step, seeded."""
    torch.manual_seed(config.seed)
    np.random.seed(config.seed)
    random.seed(config.seed)
    if config.model.past_features != "none":  # then every batch carries them
        attach_model_features(data.sequences, question_skills(data.questions, data.n_questions))
    shape = tag_shape(data.questions) if config.tags else (0, 1)
    model_config = config.model_config(data.n_questions, shape)
    model = SAINT(model_config).to(device)
    teacher = build_teacher(config, device, model_config, data)
    # context before each span: every model that predicts on the batch (a teacher too)
    # must have its whole receptive field behind each trained position
    context = max(m.config.receptive_field for m in (model, teacher) if m is not None)
    plan = TrainPlan.resolve(config, model_config, context, data.fit_length, dist.world, dist.rank)
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
    parts = PartPlan.for_device(model_config, device, config.micro_batch)
    return TrainSetup(
        model_config, model, teacher, train_model, difficulty, plan, parts, optimizer,
        scheduler, amp_dtype, scaler,
    )  # fmt: skip


def build_teacher(
    config: TrainConfig, device: torch.device, model_config: ModelConfig, data: FoldData
) -> SAINT | None:
    if not config.teacher:
        return None
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


def install_inputs(model: SAINT, config: TrainConfig, data: FoldData) -> np.ndarray | None:
    """The optional inputs whose tables come from the data: question difficulty (its
    buckets, out of fold, are returned: the batches read them) and tags."""
    difficulty = None
    if config.model.difficulty_buckets:
        install_difficulty(model, data)
        difficulty = out_of_fold_buckets(
            data.sequences, data.fit_length, data.n_questions, config.model.difficulty_buckets
        )
    if config.tags:
        install_tags(model, data.questions)
    return difficulty


def training_module(
    model: SAINT, config: TrainConfig, device: torch.device, dist: Distributed
) -> torch.nn.Module:
    """The module the steps run: `model`, compiled (--compile) and wrapped for DDP under
    torchrun. Validation and checkpoints keep the plain module."""
    train_model = torch.compile(model, dynamic=True) if config.compile else model
    if dist.world > 1:
        # buffers are not broadcast: the rotary table grows lazily to each rank's largest
        # position, and the difficulty buckets are computed alike on every rank
        train_model = torch.nn.parallel.DistributedDataParallel(
            train_model,
            device_ids=[device.index] if device.type == "cuda" else None,
            broadcast_buffers=False,
        )
    return train_model


def build_optimizer(model: SAINT, config: TrainConfig) -> torch.optim.AdamW:
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
