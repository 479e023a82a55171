"""Model features, defined once for training windows, validation and online inference.

The model sees each student's question rows in order; lectures are dropped from the
sequence (they are not predicted and SAINT/SAINT+ model exercises only), though the time
they take is part of the next question's lag. The per-question fields (question, part,
response, answer, elapsed, explanation, lag, container_first, timestamp: what each
holds, when the API reveals it, how it is computed) are declared in
common/data/question_fields.py; this module builds the sequences from it
(QuestionSequences, build_sequences) and the model inputs of any span of them
(step_inputs: the queries and the decoder's key stream, KEY_FIELDS).

No leakage within a container: the decoder input built from question i's outcome
(response, elapsed, explanation, answer) is visible only to questions of later
containers (see common/model/saint/model.py for the masks that enforce it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass

import numpy as np

from common.data.arrays import TrainArrays, opens_container
from common.data.question_fields import (
    ANSWER_PAD,
    N_ANSWER,
    N_ELAPSED,
    N_EXPLANATION,
    N_LAG,
    N_RESPONSE,
    QUESTION_FIELDS,
    RESPONSE_START,
    SEQUENCE_FIELDS,
    RowFacts,
    elapsed_bucket,
    explanation_code,
    lag_bucket,
)
from common.data.schema import QUESTION

# what importers of this module have always found here (common.data.question_fields
# declares them)
__all__ = [
    "ANSWER_PAD", "KEY_FIELDS", "N_ANSWER", "N_ELAPSED", "N_EXPLANATION", "N_LAG",
    "N_RESPONSE", "RESPONSE_START", "SEQUENCE_FIELDS", "FlatSource", "KeyField",
    "QuestionSequences", "build_sequences", "elapsed_bucket", "explanation_code",
    "lag_bucket", "step_inputs", "window_inputs",
]  # fmt: skip


@dataclass(frozen=True)
class KeyField:
    """A per-question field the decoder's key stream carries (step_inputs' key_<name>):
    key s holds question s - 1's value (an outcome, revealed after it), or, `own`,
    question s's (known when s arrives); values 0..size-1; `start` where a run of
    computation begins (the start token's; an own field keeps its value there)."""

    name: str
    size: int
    start: int = 0
    own: bool = False


# The key stream's fields, in the order the models register their tables
# (common.data.question_fields' key_rank): the response always, the others as decoder
# features (common/model/inputs.py)
KEY_FIELDS = tuple(
    KeyField(f.name, f.key_size, f.key_start, f.own)
    for f in sorted(QUESTION_FIELDS, key=lambda f: f.key_rank if f.key_rank is not None else -1)
    if f.key_rank is not None
)


class _Sequences:
    """QuestionSequences' methods (its fields: common.data.question_fields)."""

    @property
    def n_students(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def take(self, index: np.ndarray) -> dict[str, np.ndarray]:
        """The per-question fields at flat indices `index` (any shape), and the past-event
        features where attached."""
        fields = {name: getattr(self, name)[index] for name in SEQUENCE_FIELDS}
        if self.past is not None:
            fields["past"] = self.past[index]
        return fields


# Every student's question rows in order, with model features (flat, CSR-indexed): student
# s owns entries offsets[s]:offsets[s+1]; positions inside a student count questions from
# 0. row: each entry's global row index in TrainArrays; then one array per field of
# common.data.question_fields.QUESTION_FIELDS; past: (n, len(MODEL_FEATURES)) float32, each
# question's past-event features, for a model that reads them (common.data.past_features.
# attach_model_features), else None.
QuestionSequences = make_dataclass(
    "QuestionSequences",
    [
        ("offsets", np.ndarray),
        ("row", np.ndarray),
        *((f.name, np.ndarray) for f in QUESTION_FIELDS),
        ("past", "np.ndarray | None", field(default=None)),
    ],
    bases=(_Sequences,),
    namespace={"__module__": __name__},
)


def build_sequences(arrays: TrainArrays, parts: np.ndarray) -> QuestionSequences:
    """Question sequences with features for every student, in one vectorized pass: the
    rows' facts (common.data.question_fields.RowFacts), each field computed from them.

    `parts` maps question id -> part (common.data.arrays.question_parts).
    """
    rows = np.flatnonzero(np.asarray(arrays["content_type_id"]) == QUESTION)
    offsets = np.searchsorted(rows, arrays.offsets).astype(np.int64)
    facts = row_facts(arrays, parts, rows, offsets)
    fields = {f.name: f.rows(facts).astype(f.dtype) for f in QUESTION_FIELDS}
    return QuestionSequences(offsets=offsets, row=rows.astype(np.int64), **fields)


def row_facts(
    arrays: TrainArrays, parts: np.ndarray, rows: np.ndarray, offsets: np.ndarray
) -> RowFacts:
    """What every field is computed from: the question rows' columns, their containers,
    and what each student's next container reports and the lag since their previous."""
    n = len(rows)
    student = np.repeat(np.arange(arrays.n_students), np.diff(offsets))
    timestamp = np.asarray(arrays["timestamp"])[rows].astype(np.int64)
    container_id = np.asarray(arrays["task_container_id"])[rows]
    new_student = np.zeros(n, dtype=bool)
    new_student[offsets[:-1][offsets[:-1] < n]] = True
    starts = opens_container(timestamp, container_id, new_student)

    first_flat = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    container_first = (first_flat - offsets[student]).astype(np.int32)

    # Per container: its first flat index; whether the next container is the same
    # student's; values revealed by that next container.
    first_of = np.flatnonzero(starts)
    has_next = np.zeros(len(first_of), dtype=bool)
    has_next[:-1] = student[first_of[1:]] == student[first_of[:-1]]
    next_first = np.append(first_of[1:], 0)
    elapsed_ms = np.asarray(arrays["prior_question_elapsed_time"])[rows].astype(np.float64)
    explanation_flag = np.asarray(arrays["prior_question_had_explanation"])[rows]
    has_previous = np.zeros(len(first_of), dtype=bool)
    has_previous[1:] = has_next[:-1]
    previous_time = np.append(0, timestamp[first_of[:-1]])
    content = np.asarray(arrays["content_id"])[rows]
    return RowFacts(
        content=content,
        parts=parts,
        correct=np.asarray(arrays["answered_correctly"])[rows],
        answers=np.asarray(arrays["user_answer"])[rows],
        timestamp=timestamp,
        container_first=container_first,
        of=np.cumsum(starts) - 1,
        next_elapsed_ms=np.where(has_next, elapsed_ms[next_first], np.nan),
        next_explanation=np.where(has_next, explanation_flag[next_first], -1),
        lag_ms=np.where(has_previous, timestamp[first_of] - previous_time, np.nan),
    )


# ---------------------------------------------------------------------------------------
# Model inputs. Training windows, teacher-forced validation and the online state all call
# `step_inputs`; they differ only in where per-question fields are read from (`source`).


class FlatSource:
    """Reads fields of QuestionSequences by (student, position)."""

    def __init__(self, sequences: QuestionSequences):
        self.sequences = sequences

    def take(self, owner: np.ndarray, positions: np.ndarray) -> dict[str, np.ndarray]:
        return self.sequences.take(self.sequences.offsets[owner][:, None] + positions)


def step_inputs(
    source,
    owner: np.ndarray,
    session_start: np.ndarray,
    query_from: np.ndarray,
    query_count: np.ndarray,
    key_from: np.ndarray,
    key_count: np.ndarray,
    n_questions: int,
) -> dict[str, np.ndarray]:
    """Model inputs for a batch of students (numpy, ready for torch.from_numpy).

    For row b: queries are positions query_from[b] + 0..query_count[b]-1 (the questions
    to encode and predict); the decoder's key stream is positions key_from[b] +
    0..key_count[b]-1, where key s carries the outcome of question s-1 and the lag of
    question s. session_start[b] is the position where this run of computation began
    (a training window's start, or where an online state was built): the key there is the
    start token. `source.take(owner, positions)` returns per-question fields.

    Shapes: (B, T) for query fields, (B, S) for key fields.
    """
    n_query, n_key = int(query_count.max(initial=1)), int(key_count.max(initial=1))
    query_pos = query_from[:, None] + np.arange(n_query)  # (B, T)
    valid = np.arange(n_query) < query_count[:, None]
    query = source.take(owner, np.where(valid, query_pos, query_from[:, None]))
    key_pos = key_from[:, None] + np.arange(n_key)  # (B, S)
    key_valid = np.arange(n_key) < key_count[:, None]
    key_safe = np.where(key_valid, key_pos, key_from[:, None])
    at_start = key_safe <= session_start[:, None]
    key = source.take(owner, key_safe)
    previous = source.take(owner, np.where(at_start, key_safe, key_safe - 1))

    limit = np.maximum(query["container_first"], session_start[:, None])
    question = query["question"].astype(np.int64)
    return {
        "question": np.where((question >= 0) & (question < n_questions), question, n_questions),
        "part": query["part"].astype(np.int64),
        "position": query_pos.astype(np.int64),
        "valid": valid,
        "query_limit": np.where(valid, limit, query_pos).astype(np.int64),
        "query_key_index": np.clip(limit - key_from[:, None], 0, n_key - 1).astype(np.int64),
        "key_position": key_pos.astype(np.int64),
        "key_valid": key_valid,
        **_outcome_fields(previous, at_start, n_questions),
        **{f"key_{f.name}": key[f.name].astype(np.int64) for f in KEY_FIELDS if f.own},
        "label": query["response"].astype(np.float32),
        **({"past": query["past"].astype(np.float32)} if "past" in query else {}),
    }


def _outcome_fields(previous: dict, at_start: np.ndarray, n_questions: int) -> dict:
    """The key stream's fields of the previous question (its outcome and what was known
    with it); the start token's where a run of computation begins."""
    question = previous["question"]
    known = (question >= 0) & (question < n_questions)
    fields = {
        f"key_{f.name}": np.where(at_start, f.start, previous[f.name]).astype(np.int64)
        for f in KEY_FIELDS
        if not f.own
    }
    # the answered question (known with its outcome); n_questions + 1 at the start token
    fields["key_question"] = np.where(
        at_start, n_questions + 1, np.where(known, question, n_questions)
    ).astype(np.int64)
    return fields


def window_inputs(
    sequences: QuestionSequences,
    student: np.ndarray,
    start: np.ndarray,
    length: np.ndarray,
    n_questions: int,
    difficulty: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """A training (or block) window per row: positions start..start+length-1 of a student,
    queries and key stream over the same positions. `difficulty` (one bucket per flat
    question, common.model.difficulty.out_of_fold_buckets) adds each query's difficulty
    bucket as an input, in place of the model's per-question buckets."""
    inputs = step_inputs(
        FlatSource(sequences), student, start, start, length, start, length, n_questions
    )
    if difficulty is not None:
        last = np.maximum(start + length - 1, start)[:, None]  # padding reads a real entry
        position = np.minimum(inputs["position"], last)
        flat = sequences.offsets[student][:, None] + position
        inputs["difficulty"] = difficulty[flat].astype(np.int64)
    return inputs
