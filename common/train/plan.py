"""What one training run steps through: each epoch's training sequences (spans of a
student's questions after one receptive field of context), the windows per optimizer step
and how a batch is cut into micro-batches, and the learning-rate schedule (warm-up, then
noam or cosine).

Training sequences: a student's training questions are cut into consecutive spans
(`span` questions, 4 receptive fields by default), with the cut points shifted by a
random offset each epoch, so each question is trained on exactly once per epoch. Each
span is preceded by the model's receptive field of earlier questions as context, outside
the loss (epoch_spans): every trained prediction is made from the same state that
teacher-forced validation and streaming predict from, the student's last
`receptive_field` questions (or the whole history when shorter), whatever the history's
length (common/model/saint.py: attention is banded to the window, so sequences longer than it
are exact and cost little more per question). Batches hold `batch_size` windows' worth
of trained questions (a span of L questions counts as ceil(L / window) windows), so a
step sees as many questions as SAINT's batch of 512 windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from common.model.saint import ModelConfig
    from common.train.config import TrainConfig


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


def micro_batch_groups(length: torch.Tensor, size: int, budget: int) -> list:
    """How a batch of windows (their lengths) is cut for gradient accumulation: slices of
    `size` windows; or, with size 0 (a CPU), the windows sorted by length, longest first,
    a new part starting where a window is under half the part's longest or where the part
    would pass `budget` positions. The batch, and so the gradient, stays the same; the
    padding does not: on students with short histories (most ASSISTments students have
    under 100 responses) a random batch of 64 windows is mostly padding to its one long
    window. Returns slices, or index tensors on the lengths' device."""
    n = len(length)
    if size:
        return [slice(lo, lo + size) for lo in range(0, n, size)]
    order = torch.argsort(length, descending=True, stable=True)
    groups, lo = [], 0
    sorted_length = length[order].tolist()
    for i in range(1, n + 1):
        longest = sorted_length[lo]
        if i == n or 2 * sorted_length[i] < longest or (i + 1 - lo) * longest > budget:
            groups.append(order[lo:i])
            lo = i
    return groups


@dataclass(frozen=True)
class TrainPlan:
    """What one run's automatic settings resolved to (0 in TrainConfig: the span, batch
    size and warm-up), and the batches each epoch steps through."""

    span: int  # questions trained on per sequence
    context: int  # questions before each span, outside the loss
    window: int
    batch_size: int  # windows' worth of trained questions per optimizer step (per process)
    warmup: int
    total_steps: int
    seed: int
    world: int = 1  # processes of a distributed run, and this one's rank
    rank: int = 0

    @classmethod
    def resolve(
        cls,
        config: TrainConfig,
        model_config: ModelConfig,
        context: int,
        fit_length: np.ndarray,
        world: int = 1,
        rank: int = 0,
    ) -> TrainPlan:
        """The plan of `config`'s run, training `fit_length` questions per student, each
        span after `context` questions (the largest receptive field of the models that
        predict on a batch: a teacher's too)."""
        span = config.span or 4 * model_config.receptive_field
        window = model_config.window
        batch = config.batch_size or batch_windows(fit_length, window, world)
        plan = cls(span, context, window, batch, 0, 0, config.seed, world, rank)
        total = len(plan.epoch_batches(fit_length, 0)[1]) * config.epochs
        warmup = warmup_steps(config.warmup, total)
        return cls(span, context, window, batch, warmup, total, config.seed, world, rank)

    def epoch_batches(
        self, fit_length: np.ndarray, epoch: int
    ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], list[np.ndarray]]:
        """This epoch's training sequences (epoch_spans) and, per optimizer step, the
        indices of this rank's sequences: every rank takes the same number of steps, of
        batch_size windows' worth of trained questions each."""
        rng = np.random.default_rng([self.seed, epoch])
        spans = epoch_spans(fit_length, self.span, self.context, rng)
        _, _, begin, stop = spans
        windows = -(-(stop - begin) // self.window)
        bounds = batch_bounds(windows, self.batch_size * self.world, least=self.world)
        # only a last, short batch can hold fewer sequences than ranks: none takes it
        whole = [b for b in bounds if b.stop - b.start >= self.world]
        steps = [np.arange(b.start, b.stop)[self.rank :: self.world] for b in whole]
        return spans, steps

    def resolved(self) -> dict:
        """What checkpoints and config.json record of the plan."""
        return {
            "batch_size": self.batch_size,
            "warmup": self.warmup,
            "total_steps": self.total_steps,
            "span": self.span,
            "context": self.context,
        }
