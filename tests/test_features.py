"""Model features worked out by hand (common/data/features.py): every field build_sequences
gives a few students' rows, and the buckets of elapsed time, lag and the explanation
flag. Training, validation and streaming share this code, so their parity tests cannot
see a change to it; these can."""

from __future__ import annotations

import numpy as np

from common.data.arrays import TrainArrays, opens_container
from common.data.features import build_sequences, elapsed_bucket, explanation_code, lag_bucket

NAN = np.nan
HOUR_MS = 3_600_000

# Two students, a row per entry: (timestamp ms, content_id, content_type_id,
# task_container_id, user_answer, answered_correctly, prior_question_elapsed_time,
# prior_question_had_explanation (-1: blank)).
ROWS = [
    # user 7: a question; a lecture; a bundle of two questions 121 s after the first
    # container; a question an hour later
    (0, 5, 0, 0, 2, 0, NAN, -1),
    (61_000, 3, 1, 1, -1, -1, NAN, -1),
    (121_000, 6, 0, 2, 1, 1, 15_000, 1),
    (121_000, 7, 0, 2, 3, 0, 15_000, 1),
    (121_000 + HOUR_MS, 5, 0, 3, 0, 1, 40_400, 0),
    # user 9: three questions, 0.5 s and then about 463 days apart
    (0, 8, 0, 0, 1, 1, NAN, -1),
    (500, 9, 0, 1, 0, 0, 0, 0),
    (500 + 40_000_000_000, 8, 0, 2, 2, 1, 999_000, 1),
]
PARTS = np.array([0, 0, 0, 0, 0, 1, 3, 3, 5, 2], dtype=np.int8)  # part by content_id


def hand_arrays() -> TrainArrays:
    names = (
        "timestamp", "content_id", "content_type_id", "task_container_id", "user_answer",
        "answered_correctly", "prior_question_elapsed_time", "prior_question_had_explanation",
    )  # fmt: skip
    dtypes = (np.int64, np.int16, np.int8, np.int16, np.int8, np.int8, np.float32, np.int8)
    columns = {
        name: np.array([row[i] for row in ROWS], dtype=dtype)
        for i, (name, dtype) in enumerate(zip(names, dtypes, strict=True))
    }
    columns["row_id"] = np.arange(len(ROWS), dtype=np.int64)
    return TrainArrays(
        users=np.array([7, 9], dtype=np.int32),
        offsets=np.array([0, 5, 8], dtype=np.int64),
        columns=columns,
    )


def test_build_sequences_by_hand() -> None:
    seq = build_sequences(hand_arrays(), PARTS)
    assert seq.offsets.tolist() == [0, 4, 7]  # the lecture is no question
    assert seq.row.tolist() == [0, 2, 3, 4, 5, 6, 7]
    assert seq.question.tolist() == [5, 6, 7, 5, 8, 9, 8]
    assert seq.part.tolist() == [1, 3, 3, 1, 5, 2, 5]
    assert seq.response.tolist() == [0, 1, 0, 1, 1, 0, 1]
    assert seq.answer.tolist() == [2, 1, 3, 0, 1, 0, 2]
    assert seq.timestamp.tolist() == [0, 121_000, 121_000, 121_000 + HOUR_MS, 0, 500, 40e9 + 500]
    # positions of each question's container start: the bundle starts at 1
    assert seq.container_first.tolist() == [0, 1, 1, 3, 0, 1, 2]
    # a question's elapsed time is the NEXT container's prior_question_elapsed_time, in
    # whole seconds (rounded, capped at 300) plus 1; 0 while unknown (the last container)
    # user 7: 15 s; the bundle 40.4 s -> 40; unknown. user 9: 0 s is known (bucket 1, not
    # unknown); 999 s is capped at 300; unknown
    assert seq.elapsed.tolist() == [16, 41, 41, 0, 1, 301, 0]
    # the next container's explanation flag: 1 -> 2 (yes), 0 -> 1 (no), unknown -> 0
    assert seq.explanation.tolist() == [2, 1, 1, 0, 1, 2, 0]
    # lag: time since the previous QUESTION container (the lecture does not reset it):
    # 1 + floor(4 log2(1 + s)); 0 for a first container. 121 s -> 28, 3600 s -> 48,
    # 0.5 s -> 3, 4e7 s -> capped at 100
    assert seq.lag.tolist() == [0, 28, 28, 48, 0, 3, 100]


def test_elapsed_bucket_by_hand() -> None:
    milliseconds = np.array([NAN, 0, 499, 501, 1_500, 300_000, 300_600, 999_000])
    # NaN: unknown (0); otherwise 1 + whole seconds rounded half to even, at most 300
    assert elapsed_bucket(milliseconds).tolist() == [0, 1, 1, 2, 3, 301, 301, 301]


def test_lag_bucket_by_hand() -> None:
    milliseconds = np.array([NAN, 0, 999, 1_000, 3_000, 15_000, -5, 1e12])
    # 1 + floor(4 log2(1 + s)): 0 s -> 1, 0.999 s -> 1 + floor(3.996) = 4, 1 s -> 5,
    # 3 s -> 9, 15 s -> 17; negative times count as 0 s; NaN (no previous container) -> 0
    assert lag_bucket(milliseconds).tolist() == [0, 1, 4, 5, 9, 17, 1, 100]


def test_explanation_code_by_hand() -> None:
    assert explanation_code(np.array([-1, 0, 1])).tolist() == [0, 1, 2]


def test_a_container_opens_at_a_new_student_timestamp_or_container_id():
    """The task-container rule (common.data.arrays.opens_container), each key alone: a new
    student, a new timestamp under the same container id, a new container id at the same
    timestamp; neither changing keeps the container."""
    timestamp = np.array([0, 0, 5, 5, 5, 5, 9])
    container = np.array([0, 0, 0, 1, 1, 1, 1])
    new_student = np.array([1, 0, 0, 0, 0, 1, 0], dtype=bool)
    opens = opens_container(timestamp, container, new_student)
    # row: 0 first; 1 same; 2 timestamp only; 3 container id only; 4 same; 5 new student
    # with both keys equal to the row before; 6 timestamp only
    assert opens.tolist() == [True, False, True, True, False, True, True]
    assert opens_container(timestamp[:0], container[:0], new_student[:0]).tolist() == []
