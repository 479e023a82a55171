"""Every per-question field of the models' sequences, declared once (QUESTION_FIELDS): its
name and dtype, when the competition's API reveals it and what it holds until then, how
it is computed from train.csv's rows (training, common.data.features.build_sequences)
and from what the API serves (the stream, common.stream.student_store), and, for a field
of the decoder's key stream, its embedding table. QuestionSequences, SEQUENCE_FIELDS,
the stream's FIELD_DTYPES, the student store's rings and the key stream (KEY_FIELDS) are
all built from it.

Adding an input field: a QuestionField here (its two computations below, from RowFacts
and from the API's StreamFacts), and the model input that reads it (common.model.inputs;
a key-stream field with `key_rank` is embedded by every model's key stream already).

When a field is revealed (`revealed`):
    ARRIVAL         with its container (question, part, lag, ...);
    OUTCOME         by the next group's prior_group_answers_correct / _responses;
    NEXT_CONTAINER  by the student's next question container (prior_question_*).
Until then the stream holds `blank`, as a snapshot's last container does.

This module ships in the Kaggle bundle: Python 3.7, numpy 1.19.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

ARRIVAL, OUTCOME, NEXT_CONTAINER = "arrival", "outcome", "next container"

ELAPSED_CAP_S = 300  # SAINT+ caps elapsed time at 300 s
N_ELAPSED = ELAPSED_CAP_S + 2  # 0 unknown, 1 + seconds in 0..300
N_LAG = 101  # 0 unknown, 1..100 quarter-octave buckets of seconds
N_EXPLANATION = 3
N_RESPONSE = 3  # 0 wrong, 1 right, RESPONSE_START
RESPONSE_START = 2  # the decoder's start token (and pad)
ANSWER_UNKNOWN = 4  # the answer-choice pad: a question row whose user_answer is blank
ANSWER_PAD = ANSWER_UNKNOWN  # user_answer unknown or before the first question
N_ANSWER = ANSWER_PAD + 1


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


def answer_code(answers: np.ndarray) -> np.ndarray:
    """user_answer (0-3; anything else unknown) -> 0..ANSWER_PAD."""
    answers = np.asarray(answers)
    return np.where((answers >= 0) & (answers < ANSWER_PAD), answers, ANSWER_PAD)


@dataclass
class RowFacts:
    """What build_sequences knows of train.csv's question rows (flat, student by
    student): each row's column values, and per task container (`of`: each row's
    container) what the student's next container reports (`next_*`: NaN / -1 where the
    student has none) and the time since their previous one (`lag_ms`: NaN for the first)."""

    content: np.ndarray  # (n,) content_id
    parts: np.ndarray  # part by question id
    correct: np.ndarray  # (n,) answered_correctly
    answers: np.ndarray  # (n,) user_answer
    timestamp: np.ndarray  # (n,) int64
    container_first: np.ndarray  # (n,) position of the row's container's first question
    of: np.ndarray  # (n,) the row's container
    next_elapsed_ms: np.ndarray  # (containers,) float64
    next_explanation: np.ndarray  # (containers,) -1 blank, 0, 1
    lag_ms: np.ndarray  # (containers,) float64


@dataclass
class StreamFacts:
    """What the stream knows when a field is revealed. ARRIVAL: a group's question rows
    (`content`, `container` of each, the containers' `start` position, `timestamp` and
    `lag_ms`, `parts` by question id); OUTCOME: the previous group's `correct` and
    `answers`, one per row; NEXT_CONTAINER: each student's new container's
    `prior_elapsed_ms` and `prior_explanation`."""

    content: np.ndarray | None = None
    container: np.ndarray | None = None
    start: np.ndarray | None = None
    timestamp: np.ndarray | None = None
    lag_ms: np.ndarray | None = None
    parts: np.ndarray | None = None
    correct: np.ndarray | None = None
    answers: np.ndarray | None = None
    prior_elapsed_ms: np.ndarray | None = None
    prior_explanation: np.ndarray | None = None


def _part(parts: np.ndarray, content: np.ndarray) -> np.ndarray:
    """The question's part; 0 for an id the parts table does not know."""
    known = (content >= 0) & (content < len(parts))
    return np.where(known, parts[np.clip(content, 0, len(parts) - 1)], 0)


@dataclass(frozen=True)
class QuestionField:
    """One per-question field. rows(RowFacts) -> (n,) its value on every training row;
    stream(StreamFacts) -> its value when revealed (ARRIVAL: per question row of the
    group; OUTCOME: per row of the previous group; NEXT_CONTAINER: per student of the new
    group). key_rank: its place in the decoder's key stream (KEY_FIELDS, common.data.
    features; the order the models register their embedding tables in), None: not in it;
    key_size: its table's rows; key_start: its value at a start token (a run of
    computation's first key); own: the key at question s holds question s's value (else
    question s - 1's, an outcome revealed after it)."""

    name: str
    dtype: type
    revealed: str
    rows: Callable[[RowFacts], np.ndarray]
    stream: Callable[[StreamFacts], np.ndarray]
    blank: int = 0
    key_rank: int | None = None
    key_size: int = 0
    key_start: int = 0
    own: bool = False


QUESTION_FIELDS = (
    QuestionField(
        "question", np.int16, ARRIVAL, lambda f: f.content, lambda s: s.content,
    ),
    QuestionField(
        "part", np.int8, ARRIVAL,
        lambda f: f.parts[f.content], lambda s: _part(s.parts, s.content),
    ),
    QuestionField(
        "response", np.int8, OUTCOME, lambda f: f.correct, lambda s: s.correct,
        key_rank=0, key_size=N_RESPONSE, key_start=RESPONSE_START,
    ),
    QuestionField(
        "answer", np.int8, OUTCOME, lambda f: f.answers, lambda s: answer_code(s.answers),
        blank=ANSWER_PAD, key_rank=4, key_size=N_ANSWER, key_start=ANSWER_PAD,
    ),
    QuestionField(  # seconds the student spent on it, capped: revealed by their next one
        "elapsed", np.int16, NEXT_CONTAINER,
        lambda f: elapsed_bucket(f.next_elapsed_ms)[f.of],
        lambda s: elapsed_bucket(s.prior_elapsed_ms), key_rank=1, key_size=N_ELAPSED,
    ),
    QuestionField(  # whether they read its explanation: 0 unknown, 1 no, 2 yes
        "explanation", np.int8, NEXT_CONTAINER,
        lambda f: explanation_code(f.next_explanation)[f.of],
        lambda s: explanation_code(s.prior_explanation), key_rank=3, key_size=N_EXPLANATION,
    ),
    QuestionField(  # time since the student's previous container, quarter octaves
        "lag", np.int8, ARRIVAL,
        lambda f: lag_bucket(f.lag_ms)[f.of], lambda s: lag_bucket(s.lag_ms)[s.container],
        key_rank=2, key_size=N_LAG, own=True,
    ),
    QuestionField(
        "container_first", np.int32, ARRIVAL,
        lambda f: f.container_first, lambda s: s.start[s.container],
    ),
    QuestionField(
        "timestamp", np.int64, ARRIVAL,
        lambda f: f.timestamp, lambda s: s.timestamp[s.container],
    ),
)  # fmt: skip
SEQUENCE_FIELDS = tuple(f.name for f in QUESTION_FIELDS)
FIELD_DTYPES = {f.name: f.dtype for f in QUESTION_FIELDS}
FIELDS = {f.name: f for f in QUESTION_FIELDS}
