"""Training a recurrent model (common.model.interface: `recurrent`), whose state carries a
student's whole history: truncated backpropagation through each history in order.

An epoch walks every training student's questions [0, fit_length) in chunks of whole
containers of at most `window` questions (common.model.predict.plan_student: the same
chunks validation and priming step through). `lanes` rows run side by side: each takes
the next student of the epoch's shuffled order as soon as it has finished the last, its
state reset to the empty state (no history), and carries that student's state from one
chunk to the next (RecurrentState: detached between steps, so a step backpropagates
through its own chunk only). Every chunk's questions are trained on. So the state a
prediction is made from in training is the state validation and streaming make it from:
the model's pass over the student's whole history.

Every rank computes the same schedule and takes its share of the lanes; a rank whose
lanes are idle at a step still runs the step (a zero-weight loss), so that DDP's
all-reduce sees every rank at every step.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from common.data.features import FlatSource, QuestionSequences, step_inputs
from common.model.predict import plan_student, to_tensors, with_key_context

IDLE = -1


@dataclass(frozen=True)
class RecurrentPlan:
    """A recurrent run's batches: `lanes` rows per optimizer step (per process), chunks
    of at most `window` questions; the schedule's warm-up and length."""

    lanes: int
    window: int
    warmup: int
    total_steps: int
    seed: int
    world: int = 1
    rank: int = 0

    # what describe_run and the checkpoints read of any plan
    @property
    def batch_size(self) -> int:
        return self.lanes

    @property
    def span(self) -> int:
        return self.window

    @property
    def context(self) -> str:
        return "the carried state"

    def resolved(self) -> dict:
        return {
            "batch_size": self.lanes,
            "warmup": self.warmup,
            "total_steps": self.total_steps,
            "span": self.window,
            "context": "carried state",
        }


@dataclass
class Chunks:
    """Every training student's chunks (plan_student's steps over [0, fit_length)): student
    s's are rows first[s]:first[s] + count[s] of `spec` (query_from, query_count, key_from,
    key_count)."""

    spec: np.ndarray  # (n_chunks, 4) int64
    first: np.ndarray  # (n_students,) int64
    count: np.ndarray  # (n_students,) int64

    @classmethod
    def of(
        cls, sequences: QuestionSequences, fit_length: np.ndarray, window: int, key_context: int
    ) -> Chunks:
        specs, count = [], np.zeros(len(fit_length), dtype=np.int64)
        for s, end in enumerate(fit_length.tolist()):
            if end <= 0:
                continue
            begin = sequences.offsets[s]
            cf = sequences.container_first[begin : begin + end]
            plan = plan_student(cf, 0, int(end), None, window)
            steps = with_key_context(plan, key_context).steps
            specs += steps
            count[s] = len(steps)
        spec = np.asarray(specs, dtype=np.int64).reshape(-1, 4)
        first = np.concatenate(([0], np.cumsum(count)[:-1])).astype(np.int64)
        return cls(spec, first, count)


def lane_schedule(count: np.ndarray, lanes: int, rng: np.random.Generator) -> np.ndarray:
    """(steps, lanes) of the student each lane works on at each step (IDLE: none), and
    (steps, lanes) of the chunk index within that student: the students with chunks in
    a random order, each taken by the lane that is free first (the lowest lane among
    those free at once)."""
    order = rng.permutation(np.flatnonzero(count > 0))
    free = [(0, lane) for lane in range(lanes)]
    starts = []
    for student in order.tolist():
        at, lane = heapq.heappop(free)
        starts.append((student, lane, at))
        heapq.heappush(free, (at + int(count[student]), lane))
    total = max((at + int(count[s]) for s, _, at in starts), default=0)
    student = np.full((total, lanes), IDLE, dtype=np.int64)
    chunk = np.zeros((total, lanes), dtype=np.int64)
    for s, lane, at in starts:
        n = int(count[s])
        student[at : at + n, lane] = s
        chunk[at : at + n, lane] = np.arange(n)
    return np.stack((student, chunk))


def epoch_schedule(plan: RecurrentPlan, chunks: Chunks, epoch: int) -> np.ndarray:
    """(2, steps, lanes x world): epoch `epoch`'s lane_schedule over every rank's lanes
    (the same on every rank: seeded by the run's seed and the epoch)."""
    rng = np.random.default_rng([plan.seed, epoch])
    return lane_schedule(chunks.count, plan.lanes * plan.world, rng)


def steps_per_epoch(plan: RecurrentPlan, chunks: Chunks, epochs: int) -> int:
    """The optimizer steps of `epochs` epochs (each epoch's schedule has its own length)."""
    return sum(epoch_schedule(plan, chunks, e).shape[1] for e in range(epochs))


def rank_lanes(schedule: np.ndarray, plan: RecurrentPlan) -> np.ndarray:
    """This rank's columns of an epoch schedule."""
    return schedule[:, :, plan.rank :: plan.world]


def step_batch(
    sequences: QuestionSequences,
    chunks: Chunks,
    student: np.ndarray,
    chunk: np.ndarray,
    n_questions: int,
    difficulty: np.ndarray | None,
) -> dict[str, np.ndarray]:
    """The model inputs of one step's active lanes (`student` >= 0): each lane's chunk,
    from the state the lane carries (session_start 0: the start token only at a
    history's first key)."""
    spec = chunks.spec[chunks.first[student] + chunk]  # (active, 4)
    query_from, query_count, key_from, key_count = spec.T
    inputs = step_inputs(
        FlatSource(sequences), student, np.zeros_like(student), query_from, query_count,
        key_from, key_count, n_questions,
    )  # fmt: skip
    if difficulty is not None:
        last = (query_from + np.maximum(query_count, 1) - 1)[:, None]
        position = np.minimum(inputs["position"], last)
        inputs["difficulty"] = difficulty[sequences.offsets[student][:, None] + position]
    return inputs


def lane_resets(schedule: np.ndarray, step: int) -> np.ndarray:
    """The lanes that start a student at `step` (their state must be emptied first)."""
    student, chunk = schedule[0, step], schedule[1, step]
    return np.flatnonzero((student != IDLE) & (chunk == 0))


def masked_bce(logits: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy of the logits over the `valid` positions (every model's
    training loss)."""
    loss = F.binary_cross_entropy_with_logits(logits.float(), labels, reduction="none")
    return (loss * valid).sum() / valid.sum().clamp(min=1)


def recurrent_epoch(setup, run, progress) -> tuple[float, float, float]:
    """One epoch of a recurrent model (setup: common.train.build.TrainSetup; run: the
    trainer, for its data, config, device and process group; progress counts the steps):
    lanes walk the training students' chunks in order, each carrying its student's
    state. Returns (mean loss, trained questions per second, seconds)."""
    data, device, epoch = run.data, run.device, progress.epoch
    grad_clip, show = run.config.grad_clip, run.config.progress and run.dist.main
    schedule = rank_lanes(epoch_schedule(setup.plan, setup.chunks, epoch), setup.plan)
    state = setup.model.empty_cache(schedule.shape[2])
    setup.train_model.train()
    total_loss, total_count, clock = 0.0, 0, time.perf_counter()
    bar = tqdm(range(schedule.shape[1]), desc=f"epoch {epoch + 1}", disable=not show, leave=False)
    for step in bar:
        state.reset(torch.as_tensor(lane_resets(schedule, step), device=device))
        lanes = np.flatnonzero(schedule[0, step] != IDLE)
        # a rank without work this step still steps (zero weight): DDP's all-reduce needs
        # every rank; it runs the first chunk of the epoch's first student again
        idle = not len(lanes)
        active = lanes if not idle else np.zeros(1, dtype=np.int64)
        student = schedule[0, step, active] if not idle else schedule[0, :1, 0].clip(0)
        chunk = schedule[1, step, active] if not idle else np.zeros(1, dtype=np.int64)
        inputs = step_batch(
            data.sequences, setup.chunks, student, chunk, data.n_questions, setup.difficulty
        )
        batch = to_tensors(inputs, device)
        view = state.view(torch.as_tensor(active, device=device)) if not idle else None
        view = view if view is not None else setup.model.empty_cache(1)
        loss = optimizer_step(setup, batch, view, 0.0 if idle else 1.0, grad_clip, device)
        count = 0 if idle else int(batch["valid"].sum())
        total_loss += loss * count
        total_count += count
        bar.set_postfix(loss=f"{total_loss / max(total_count, 1):.4f}")
    seconds = time.perf_counter() - clock
    progress.step += schedule.shape[1]
    return total_loss / max(total_count, 1), total_count * run.dist.world / seconds, seconds


def optimizer_step(setup, batch: dict, state, weight: float, grad_clip: float, device) -> float:
    """One optimizer step of a recurrent model on one step's lanes, from their carried
    `state` (which the pass updates, detached); its loss."""
    setup.optimizer.zero_grad(set_to_none=True)
    with torch.autocast(
        device.type, dtype=setup.amp_dtype or torch.float32, enabled=setup.amp_dtype is not None
    ):
        logits = setup.train_model(batch, state)
        loss = masked_bce(logits, batch["label"], batch["valid"].float()) * weight
    setup.scaler.scale(loss).backward()
    setup.scaler.unscale_(setup.optimizer)
    torch.nn.utils.clip_grad_norm_(setup.model.parameters(), grad_clip)
    setup.scaler.step(setup.optimizer)
    setup.scaler.update()
    setup.scheduler.step()
    return float(loss.item())
