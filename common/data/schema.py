"""The competition's file schemas and the one error type for bad input.

Dtypes follow the Riiid! Answer Correctness Prediction data page: train.csv rows are
grouped by user and in time order; content_id names a question when content_type_id is 0
and a lecture when it is 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import UserError

# train.csv: column -> dtype as the competition documents it. "boolean" is pandas' nullable
# boolean (prior_question_had_explanation is empty on a student's first bundle).
TRAIN_DTYPES: dict[str, str] = {
    "row_id": "int64",
    "timestamp": "int64",
    "user_id": "int32",
    "content_id": "int16",
    "content_type_id": "int8",
    "task_container_id": "int16",
    "user_answer": "int8",
    "answered_correctly": "int8",
    "prior_question_elapsed_time": "float32",
    "prior_question_had_explanation": "boolean",
}
TRAIN_COLUMNS: list[str] = list(TRAIN_DTYPES)

QUESTIONS_DTYPES: dict[str, str] = {
    "question_id": "int16",
    "bundle_id": "int16",
    "correct_answer": "int8",
    "part": "int8",
    "tags": "string",
}
# questions.csv's tags: each question's tag ids, space-separated (blank: no tags). Ids stay
# within lectures.csv's int16 `tag` column: a larger id would size 03's tag embedding table.
TAG_ID_MAX = 32_767

LECTURES_DTYPES: dict[str, str] = {
    "lecture_id": "int16",
    "tag": "int16",
    "part": "int8",
    "type_of": "string",
}

# The test API's columns (riiideducation): train.csv without the labels, plus the previous
# group's labels as string-encoded lists on the first row of each group.
TEST_COLUMNS: list[str] = [
    "row_id",
    "timestamp",
    "user_id",
    "content_id",
    "content_type_id",
    "task_container_id",
    "prior_question_elapsed_time",
    "prior_question_had_explanation",
    "prior_group_answers_correct",
    "prior_group_responses",
]

N_PARTS = 7  # TOEIC parts 1-7
N_CHOICES = 4  # every question has four answer choices
QUESTION = 0  # content_type_id values
LECTURE = 1


@dataclass
class InputError(UserError, ValueError):
    """Bad input, located: which file, which data row (1-based; the header is line 1),
    which column, what value, and what was expected there."""

    file: str
    expected: str
    row: int | None = None
    column: str | None = None
    value: object = None

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def __str__(self) -> str:
        where = [self.file]
        if self.row is not None:
            where.append(f"data row {self.row} (line {self.row + 1})")
        if self.column is not None:
            where.append(f"column '{self.column}'")
        found = "" if self.value is None else f": found {self.value!r}"
        return f"{', '.join(where)}{found}; expected {self.expected}"
