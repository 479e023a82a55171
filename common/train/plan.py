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
length (common/model/saint/model.py: attention is banded to the window, so sequences longer than it
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


PART_PADDING = 1.1  # a batch's parts compute at most 10% more positions than its sequences


def _cheapest_cut(length: np.ndarray, budget: int, part_cost: float) -> list[int]:
    """Where to cut lengths sorted longest first into consecutive parts, each padded to
    its first (longest) length, so that the positions computed plus part_cost per part
    are fewest, no part of two or more passing `budget` positions (dynamic programming
    over the cut points). Returns the parts' ends."""
    n = len(length)
    best = np.zeros(n + 1)
    cut = np.zeros(n + 1, dtype=np.int64)
    first = np.arange(n)
    for end in range(1, n + 1):
        rows = end - first[:end]
        positions = rows * length[:end]
        cost = best[:end] + positions + part_cost
        cost[(positions > budget) & (rows > 1)] = np.inf
        cut[end] = int(np.argmin(cost))
        best[end] = cost[cut[end]]
    ends, end = [], n
    while end:
        ends.append(end)
        end = int(cut[end])
    return ends[::-1]


def micro_batch_groups(
    length: torch.Tensor, size: int, budget: int, part_cost: float, padding: float = PART_PADDING
) -> list:
    """How a batch of sequences (their lengths) is cut for gradient accumulation: slices
    of `size` sequences (--micro-batch); or, with size 0 (the default on every device),
    parts of sequences sorted longest first, each padded to its longest: the cut that
    computes the fewest positions plus `part_cost` positions per part (what a part's
    fixed cost of kernel launches is worth), each part within `budget` positions (what
    fits the device's cache or memory), the part cost halved until the parts' padding
    is at most `padding` times the sequences' positions. The batch, and so the gradient,
    stays the same; the padding does not: most students' histories are short, and a batch
    padded to its one long sequence is mostly padding. Returns slices, or index tensors
    on the lengths' device."""
    n = len(length)
    if size:
        return [slice(lo, lo + size) for lo in range(0, n, size)]
    order = torch.argsort(length, descending=True, stable=True)
    ordered = length[order].cpu().numpy().astype(np.int64)
    total = max(int(ordered.sum()), 1)
    while True:
        ends = _cheapest_cut(ordered, budget, part_cost)
        starts = [0, *ends[:-1]]
        computed = sum((e - s) * int(ordered[s]) for s, e in zip(starts, ends, strict=True))
        if computed <= padding * total or part_cost < 1:
            return [order[s:e] for s, e in zip(starts, ends, strict=True)]
        part_cost /= 2


CPU_PART_WINDOWS = 64  # a CPU part: at most 64 windows of positions (stays in cache)
GPU_MEMORY_SHARE = 0.25  # a CUDA part: activations of at most a quarter of free memory
GPU_PART_COST_WINDOWS = 32  # a CUDA part's launches cost as much as 32 windows' positions


def activation_bytes(model: ModelConfig, key_span: int | None = None) -> int:
    """An upper estimate of the bytes one position keeps for backward in fp32 (what a
    part's memory grows with): per attention, its input, queries, keys, values, output
    and layer norm (6 x d_model) and the scores of a block's queries over their keys,
    softmax and mask (3 x heads x key_span, key_span two windows by default); per
    feed-forward 2 x d_ff + 2 x d_model; the decoder's layers hold two attentions, the
    read-out one more. tests/test_training.py checks it against the tensors an actual
    forward pass saves."""
    span = key_span or 2 * model.window
    attention = 6 * model.d_model + 3 * model.n_heads * span
    feed_forward = 2 * model.d_ff + 2 * model.d_model
    attentions = model.encoder_layers + 2 * model.decoder_layers + (model.readout != "none")
    layers = model.encoder_layers + model.decoder_layers
    return 4 * (attentions * attention + layers * feed_forward)


@dataclass(frozen=True)
class PartPlan:
    """How this device cuts a batch into parts (micro_batch_groups): at most `budget`
    positions per part, a part's fixed cost worth `cost` positions; `size` > 0: plain
    slices of that many sequences (--micro-batch)."""

    budget: int
    cost: float
    size: int = 0

    @classmethod
    def for_device(
        cls, model: ModelConfig, device: torch.device, size: int = 0, free_bytes: int | None = None
    ) -> PartPlan:
        """On a CPU, parts of at most 64 windows of positions, a part worth a window; on
        CUDA, as many positions as a quarter of the free memory (`free_bytes`, or
        measured) holds activations for, a part worth 32 windows (its kernel launches)."""
        window = model.window
        if device.type != "cuda":
            return cls(CPU_PART_WINDOWS * window, float(window), size)
        if free_bytes is None:
            free_bytes = torch.cuda.mem_get_info(device)[0]
        budget = int(GPU_MEMORY_SHARE * free_bytes) // activation_bytes(model)
        return cls(max(budget, window), float(GPU_PART_COST_WINDOWS * window), size)

    def groups(self, length: torch.Tensor) -> list:
        """micro_batch_groups of sequences of these lengths."""
        return micro_batch_groups(length, self.size, self.budget, self.cost)

    @staticmethod
    def positions(length: torch.Tensor, groups: list) -> int:
        """Positions computed for `groups` (index tensors into `length`): each part is
        padded to its longest sequence."""
        return sum(len(g) * int(length[g].max()) for g in groups)


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
