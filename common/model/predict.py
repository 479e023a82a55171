"""Teacher-forced, batched prediction of validation tails with the full history as context.

Each student's prediction runs exactly as the online state does (common/stream/online.py), only
batched over students and over many containers at once: the state starts at the
student's last `receptive_field` history questions (common/model/saint/model.py: all a prediction
can depend on; a recurrent model's state, common.model.interface, starts at the
history's first question) and moves through them, then through the validation questions, in chunks
of whole containers, each attending to the cached keys of the `window` questions before
it. Predictions therefore equal streaming predictions for the same rows (tested), and
equal what a forward pass over the student's whole history gives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from common.data.features import FlatSource, QuestionSequences, step_inputs
from common.model.interface import KTModel
from common.model.saint.cache import ModelCache


def to_tensors(batch: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    return {
        name: torch.from_numpy(np.ascontiguousarray(value)).to(device, non_blocking=True)
        for name, value in batch.items()
    }


@dataclass
class Plan:
    """One student's steps: chunks through the history's last receptive field, then
    through the questions to predict."""

    session_start: int
    steps: list[tuple[int, int, int, int]]  # (query_from, query_count, key_from, key_count)


def plan_student(
    container_first: np.ndarray, history: int, end: int, context: int | None, chunk: int
) -> Plan:
    """container_first: the student's (n,) container-start positions. Questions
    [history, end) are to be predicted after the history [0, history). The state starts
    `context` questions before them (or at 0; None: at 0, a recurrent model's whole
    history) and moves through the history, then through
    the questions to predict, in chunks of whole containers (at most `chunk` questions,
    unless one container is longer; a chunk never straddles `history`); a step's keys
    run up to the first question of its last container."""
    start = 0 if context is None else max(0, history - context)
    steps = []
    key_from = position = start
    while position < end:
        limit = history if position < history else end
        stop = min(position + chunk, limit)
        # a chunk holds whole containers: move the stop back to a container start
        while stop < limit and container_first[stop] != stop and stop > position + 1:
            stop -= 1
        while stop < limit and container_first[stop] != stop:
            stop += 1  # a single container longer than the chunk
        last_first = max(int(container_first[stop - 1]), start)
        steps.append((position, stop - position, key_from, last_first - key_from + 1))
        key_from, position = last_first + 1, stop
    return Plan(start, steps)


def with_key_context(plan: Plan, key_context: int) -> Plan:
    """`plan` whose steps read `key_context` keys back from their first question's
    container too (a recurrent model's attention window, config.key_context), never
    before the state's start; the same plan for 0."""
    if not key_context:
        return plan
    steps = []
    for query_from, query_count, key_from, key_count in plan.steps:
        first = max(plan.session_start, min(key_from, query_from - key_context + 1))
        steps.append((query_from, query_count, first, key_from + key_count - first))
    return Plan(plan.session_start, steps)


@torch.no_grad()
def predict_tails(
    model: KTModel,
    sequences: QuestionSequences,
    students: np.ndarray,
    history: np.ndarray,
    end: np.ndarray,
    device: torch.device,
    batch_size: int = 256,
    chunk: int | None = None,
) -> np.ndarray:
    """Probabilities for questions [history[i], end[i]) of each students[i], as a flat
    array aligned with np.concatenate of those ranges (student order as given).

    Continuous batching: `batch_size` rows each work through one student's steps; a row
    whose student is done takes the next student (its cache entries are invalidated), so
    short and long students share batches without padding whole runs.
    """
    out = np.zeros(int((end - history).sum()), dtype=np.float32)
    out_start = np.concatenate(([0], np.cumsum(end - history)[:-1])).astype(np.int64)

    def keep(i: int, q_from: int, probability: np.ndarray) -> None:
        if len(probability) and q_from >= history[i]:  # the history block is context only
            at = out_start[i] + q_from - history[i]
            out[at : at + len(probability)] = probability

    run_plans(model, sequences, students, history, end, device, batch_size, chunk, keep)
    return out


@torch.no_grad()
def final_states(
    model: KTModel,
    sequences: QuestionSequences,
    students: np.ndarray,
    length: np.ndarray,
    device: torch.device,
    batch_size: int = 256,
) -> np.ndarray:
    """A recurrent model's state (common.model.recurrent.RecurrentState.to_arrays) of each
    students[i] after their first length[i] questions, as the streaming state holds it
    when their next container arrives: every key up to their last container's first
    absorbed (the outcomes of that container come with the next one). (n, ...) float32,
    in the order given; a student with no question has the empty state."""
    states = np.zeros((len(students), *model.empty_cache(1).to_arrays().shape[1:]), np.float32)

    def done(i: int, cache, row: int) -> None:
        states[i] = cache.select(torch.tensor([row], device=device)).to_arrays()[0]

    run_plans(model, sequences, students, length, length, device, batch_size, None, None, done)
    return states


def run_plans(
    model: KTModel,
    sequences: QuestionSequences,
    students: np.ndarray,
    history: np.ndarray,
    end: np.ndarray,
    device: torch.device,
    batch_size: int,
    chunk: int | None,
    keep=None,
    done=None,
) -> None:
    """Every students[i]'s steps (plan_student: through its history, then through
    [history[i], end[i])), `batch_size` students at a time side by side (continuous
    batching). After each step, keep(i, query_from, probabilities) where given; when a
    student's last step is done, done(i, cache, row) (its state in the cache's row)."""
    window = model.config.window
    chunk = chunk or window
    model.eval()
    config = model.config
    plans = _plan_students(sequences, students, history, end, config.receptive_field, chunk)
    plans = [with_key_context(plan, config.key_context) for plan in plans]
    queue = list(np.argsort([-len(p.steps) for p in plans], kind="stable"))[::-1]
    rows = min(batch_size, len(plans))
    member = np.full(rows, -1, dtype=np.int64)  # index into plans, -1 idle
    step_of = np.zeros(rows, dtype=np.int64)
    source = FlatSource(sequences)
    cache = model.empty_cache(rows, window + chunk)
    while True:
        _take_students(queue, member, step_of, cache)
        if done is not None:  # students without a step (no question) are done at once
            for row in np.flatnonzero(member >= 0):
                if not plans[member[row]].steps:
                    done(member[row], cache, row)
                    member[row] = -1
            if queue and (member < 0).any():
                continue
        active = member >= 0
        if not active.any():
            break
        if not queue and not active.all():  # the tail: drop idle rows from the batch
            keep_rows = np.flatnonzero(active)
            cache = cache.select(torch.as_tensor(keep_rows, device=device))
            member, step_of = member[keep_rows], step_of[keep_rows]
            active = member >= 0
        spec = _next_steps(plans, students, member, step_of)
        inputs = step_inputs(source, *spec, model.config.n_questions)
        logits = model(to_tensors(inputs, device), cache)
        probability = torch.sigmoid(logits.float()).cpu().numpy()
        query_from, query_count = spec[2], spec[3]
        for row in np.flatnonzero(active):
            i = member[row]
            if keep is not None:
                keep(i, int(query_from[row]), probability[row, : int(query_count[row])])
            step_of[row] += 1
            if step_of[row] == len(plans[i].steps):
                if done is not None:
                    done(i, cache, row)
                member[row] = -1


def _plan_students(
    sequences: QuestionSequences,
    students: np.ndarray,
    history: np.ndarray,
    end: np.ndarray,
    context: int,
    chunk: int,
) -> list[Plan]:
    """plan_student for each students[i], predicting [history[i], end[i])."""
    plans = []
    for s, h, e in zip(students, history, end):  # noqa: B905 (Python 3.7: the Kaggle bundle)
        cf = sequences.container_first[sequences.offsets[s] : sequences.offsets[s + 1]]
        plans.append(plan_student(cf, int(h), int(e), context, chunk))
    return plans


def _take_students(queue: list, member: np.ndarray, step_of: np.ndarray, cache: ModelCache) -> None:
    """Give idle batch rows (member -1) the next students of `queue`, from its end, in
    place; a row's cache entries are cleared for its new student."""
    for row in np.flatnonzero(member < 0):
        if not queue:
            break
        member[row], step_of[row] = queue.pop(), 0
        cache.reset(torch.tensor([row]))  # a new student: forget the previous keys


def _next_steps(
    plans: list[Plan], students: np.ndarray, member: np.ndarray, step_of: np.ndarray
) -> tuple[np.ndarray, ...]:
    """step_inputs' (owner, session_start, query_from, query_count, key_from, key_count)
    of every batch row: its student's next step, all zeros for an idle row."""
    rows = len(member)
    spec = np.zeros((rows, 4), dtype=np.int64)
    session = np.zeros(rows, dtype=np.int64)
    owner = np.zeros(rows, dtype=np.int64)
    for row in np.flatnonzero(member >= 0):
        plan = plans[member[row]]
        spec[row] = plan.steps[step_of[row]]
        session[row] = plan.session_start
        owner[row] = students[member[row]]
    query_from, query_count, key_from, key_count = spec.T
    return owner, session, query_from, query_count, key_from, key_count
