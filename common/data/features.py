"""Model features, defined once for training windows, validation and online inference.

The model sees each student's question rows in order; lectures are dropped from the
sequence (they are not predicted and SAINT/SAINT+ model exercises only), though the time
they take is part of the next question's lag.

Per question i (all questions of a task container share their container's values):
    question, part          the encoder's inputs
    response                answered_correctly, 0/1
    answer                  user_answer 0-3, ANSWER_PAD when unknown
    elapsed                 seconds the student spent on i: the prior_question_elapsed_time
                            carried by the student's NEXT question container (the API
                            reveals it only then), rounded and capped at ELAPSED_CAP_S;
                            bucket 0 = not known yet
    explanation             whether the student read the explanation of i: the next
                            container's prior_question_had_explanation; 0 unknown, 1 no,
                            2 yes
    lag                     time since the student's previous question container, known
                            when the container arrives: bucket 1 + min(floor(4 log2(1 + s)),
                            N_LAG - 2) on seconds s (quarter-octaves: 1 s, 2 s, ... up to
                            about a year); 0 for the first container
    container_first         position of the first question of i's container

No leakage within a container: the decoder input built from question i's outcome
(response, elapsed, explanation, answer) is visible only to questions of later
containers (see common/model/saint/model.py for the masks that enforce it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.data.arrays import ANSWER_UNKNOWN, TrainArrays, opens_container
from common.data.schema import QUESTION

ELAPSED_CAP_S = 300  # SAINT+ caps elapsed time at 300 s
N_ELAPSED = ELAPSED_CAP_S + 2  # 0 unknown, 1 + seconds in 0..300
N_LAG = 101  # 0 unknown, 1..100 quarter-octave buckets of seconds
N_EXPLANATION = 3
N_RESPONSE = 3  # 0 wrong, 1 right, RESPONSE_START
RESPONSE_START = 2  # the decoder's start token (and pad)
ANSWER_PAD = ANSWER_UNKNOWN  # user_answer unknown or before the first question
N_ANSWER = ANSWER_PAD + 1


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


# The key stream's fields. The model embeds each in a table of `size` rows
# (common/model/inputs.py): the response always, the others as decoder features
KEY_FIELDS = (
    KeyField("response", N_RESPONSE, start=RESPONSE_START),
    KeyField("elapsed", N_ELAPSED),
    KeyField("lag", N_LAG, own=True),
    KeyField("explanation", N_EXPLANATION),
    KeyField("answer", N_ANSWER, start=ANSWER_PAD),
)


def elapsed_bucket(milliseconds: np.ndarray) -> np.ndarray:
    """prior_question_elapsed_time (ms, NaN when unknown) -> bucket 0..N_ELAPSED-1."""
    ms = np.asarray(milliseconds, dtype=np.float64)
    seconds = np.clip(np.rint(np.nan_to_num(ms, nan=0.0) / 1000.0), 0, ELAPSED_CAP_S)
    return np.where(np.isnan(ms), 0, seconds + 1).astype(np.int16)


def lag_bucket(milliseconds: np.ndarray) -> np.ndarray:
    """Time since the previous question container (ms, NaN when none) -> 0..N_LAG-1."""
    ms = np.asarray(milliseconds, dtype=np.float64)
    seconds = np.maximum(np.nan_to_num(ms, nan=0.0), 0.0) / 1000.0
    bucket = 1 + np.minimum(np.floor(4.0 * np.log2(1.0 + seconds)), N_LAG - 2)
    return np.where(np.isnan(ms), 0, bucket).astype(np.int8)


def explanation_code(flag: np.ndarray) -> np.ndarray:
    """prior_question_had_explanation as -1 (blank) / 0 / 1 -> 0 unknown, 1 no, 2 yes."""
    return (np.asarray(flag, dtype=np.int8) + 1).astype(np.int8)


@dataclass
class QuestionSequences:
    """Every student's question rows in order, with model features (flat, CSR-indexed).

    Student s owns entries offsets[s]:offsets[s+1]; positions inside a student count
    questions from 0.
    """

    offsets: np.ndarray  # (n_students + 1,) int64
    row: np.ndarray  # (n,) int64 global row index in TrainArrays
    question: np.ndarray  # (n,) int16
    part: np.ndarray  # (n,) int8
    response: np.ndarray  # (n,) int8
    answer: np.ndarray  # (n,) int8
    elapsed: np.ndarray  # (n,) int16 bucket
    explanation: np.ndarray  # (n,) int8 code
    lag: np.ndarray  # (n,) int8 bucket
    container_first: np.ndarray  # (n,) int32 position of the container's first question
    timestamp: np.ndarray  # (n,) int64
    # (n, len(MODEL_FEATURES)) float32: each question's past-event features, for a model
    # that reads them (common.data.past_features.attach_model_features); None otherwise
    past: np.ndarray | None = None

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


SEQUENCE_FIELDS = (
    "question",
    "part",
    "response",
    "answer",
    "elapsed",
    "explanation",
    "lag",
    "container_first",
    "timestamp",
)


def build_sequences(arrays: TrainArrays, parts: np.ndarray) -> QuestionSequences:
    """Question sequences with features for every student, in one vectorized pass.

    `parts` maps question id -> part (common.data.arrays.question_parts).
    """
    rows = np.flatnonzero(np.asarray(arrays["content_type_id"]) == QUESTION)
    offsets = np.searchsorted(rows, arrays.offsets).astype(np.int64)
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
    container_of = np.cumsum(starts) - 1
    has_next = np.zeros(len(first_of), dtype=bool)
    has_next[:-1] = student[first_of[1:]] == student[first_of[:-1]]
    next_first = np.append(first_of[1:], 0)
    elapsed_ms = np.asarray(arrays["prior_question_elapsed_time"])[rows].astype(np.float64)
    explanation_flag = np.asarray(arrays["prior_question_had_explanation"])[rows]
    container_elapsed = np.where(has_next, elapsed_ms[next_first], np.nan)
    container_explanation = np.where(has_next, explanation_flag[next_first], -1)
    has_previous = np.zeros(len(first_of), dtype=bool)
    has_previous[1:] = has_next[:-1]
    previous_time = np.append(0, timestamp[first_of[:-1]])
    container_lag = np.where(has_previous, timestamp[first_of] - previous_time, np.nan)

    return QuestionSequences(
        offsets=offsets,
        row=rows.astype(np.int64),
        question=np.asarray(arrays["content_id"])[rows].astype(np.int16),
        part=parts[np.asarray(arrays["content_id"])[rows]].astype(np.int8),
        response=np.asarray(arrays["answered_correctly"])[rows].astype(np.int8),
        answer=np.asarray(arrays["user_answer"])[rows].astype(np.int8),
        elapsed=elapsed_bucket(container_elapsed)[container_of],
        explanation=explanation_code(container_explanation)[container_of],
        lag=lag_bucket(container_lag)[container_of],
        container_first=container_first,
        timestamp=timestamp,
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
