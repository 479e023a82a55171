"""Reading the line formats of public knowledge-tracing datasets (common.inputs.kt_datasets
converts what is read): one StudentSequence per student block, in file order.

Input formats, one block of lines per student, no header:
    3line (DKVMN)  `length` / skill ids / 0-1 correctness. The skill is the question.
    4line (AKT)    `user_index,raw_student_id` / problem ids / skill ids / 0-1 correctness.
                   The problem is the question; its skill(s) become its tags.
Lists are comma-separated non-negative integers; one trailing comma per line and trailing
whitespace (CRLF) are tolerated, anything else raises `LineInputError` naming the file,
line, item and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from common.data.schema import InputError

LineFormat = Literal["3line", "4line"]
LINE_FORMATS: tuple[str, ...] = ("3line", "4line")
LINES_PER_STUDENT: dict[str, int] = {"3line": 3, "4line": 4}

# user_map.csv fold of a student in no shipped held-out fold (e.g. a train split); such
# students are left out of user_folds.csv, so they only ever train.
NO_FOLD = -1


@dataclass
class LineInputError(InputError):
    """An `InputError` in a headerless line-format file: located by 1-based line number and
    1-based item within the comma-separated line (`column` names what the line holds)."""

    line: int | None = None
    item: int | None = None

    def __str__(self) -> str:
        where = [self.file]
        if self.line is not None:
            what = f" ({self.column})" if self.column else ""
            where.append(f"line {self.line}{what}")
        if self.item is not None:
            where.append(f"item {self.item}")
        found = "" if self.value is None else f": found {self.value!r}"
        return f"{', '.join(where)}{found}; expected {self.expected}"


# [0-9], not \d: no non-ASCII digits; at most 18 digits, so every id fits int64
_INT = "[0-9]{1,18}"
_INT_LIST = re.compile(f"{_INT}(?:,{_INT})*")
_ID_LINE = re.compile(f"({_INT}),({_INT})")
_INTEGERS = "comma-separated non-negative integers (at most 18 digits each)"


@dataclass
class StudentSequence:
    """One student's block as read, in file order."""

    source_file: str
    source_line: int  # 1-based line of the block's first line
    problems: np.ndarray  # (n,) int64 raw ids
    skills: np.ndarray  # (n,) int64 raw ids
    correct: np.ndarray  # (n,) int64 0/1
    user_index: int | None = None  # 4line only
    raw_student_id: int | None = None  # 4line only
    fold: int = NO_FOLD


def _clean(text: str) -> str:
    text = text.strip()
    return text[:-1] if text.endswith(",") else text


def parse_int_list(text: str, *, file: str, line: int, what: str) -> np.ndarray:
    """(n,) int64: a comma-separated list of non-negative integers (empty line -> n = 0)."""
    text = _clean(text)
    if not text:
        return np.zeros(0, dtype=np.int64)
    if _INT_LIST.fullmatch(text):
        return np.array(text.split(","), dtype=np.int64)
    for item, token in enumerate(text.split(","), start=1):
        if not re.fullmatch(_INT, token):
            raise LineInputError(
                file,
                _INTEGERS,
                column=what,
                value=token,
                line=line,
                item=item,
            )
    raise AssertionError("unreachable: the regex and the token check disagree")


def _parse_correct(text: str, *, file: str, line: int) -> np.ndarray:
    values = parse_int_list(text, file=file, line=line, what="correctness")
    if len(values) and values.max() > 1:
        item = int(np.argmax(values > 1))
        raise LineInputError(
            file,
            "correctness 0 or 1",
            column="correctness",
            value=str(values[item]),
            line=line,
            item=item + 1,
        )
    return values


def _check_length(
    values: np.ndarray, expected: int, why: str, *, file: str, line: int, what: str
) -> None:
    if len(values) != expected:
        raise LineInputError(
            file, f"{expected} items ({why})", column=what, value=f"{len(values)} items", line=line
        )


def _bad_first_line(
    lines: list[str], first: int, file: str, column: str, expected: str
) -> LineInputError:
    """The error for a block whose first line (0-based index `first`) is not `expected`."""
    return LineInputError(
        file, expected, column=column, value=lines[first].rstrip("\r\n"), line=first + 1
    )


def _read_block_3line(lines: list[str], first: int, file: str) -> StudentSequence:
    """first: 0-based index of the block's `length` line."""
    head = _clean(lines[first])
    if not re.fullmatch(_INT, head):
        raise _bad_first_line(
            lines, first, file, "length", "a sequence length (one non-negative integer)"
        )
    length = int(head)
    skills = parse_int_list(lines[first + 1], file=file, line=first + 2, what="skill ids")
    correct = _parse_correct(lines[first + 2], file=file, line=first + 3)
    why = f"the length on line {first + 1}"
    _check_length(skills, length, why, file=file, line=first + 2, what="skill ids")
    _check_length(correct, length, why, file=file, line=first + 3, what="correctness")
    # skill-level data: the skill id is the question id
    return StudentSequence(file, first + 1, problems=skills, skills=skills, correct=correct)


def _read_block_4line(lines: list[str], first: int, file: str) -> StudentSequence:
    """first: 0-based index of the block's `user_index,raw_student_id` line."""
    ids = _ID_LINE.fullmatch(_clean(lines[first]))
    if ids is None:
        raise _bad_first_line(
            lines,
            first,
            file,
            "student ids",
            "'user_index,raw_student_id' (two non-negative integers)",
        )
    problems = parse_int_list(lines[first + 1], file=file, line=first + 2, what="problem ids")
    skills = parse_int_list(lines[first + 2], file=file, line=first + 3, what="skill ids")
    correct = _parse_correct(lines[first + 3], file=file, line=first + 4)
    why = f"one per problem id on line {first + 2}"
    _check_length(skills, len(problems), why, file=file, line=first + 3, what="skill ids")
    _check_length(correct, len(problems), why, file=file, line=first + 4, what="correctness")
    return StudentSequence(
        file,
        first + 1,
        problems=problems,
        skills=skills,
        correct=correct,
        user_index=int(ids.group(1)),
        raw_student_id=int(ids.group(2)),
    )


def read_students(
    path: str | Path, line_format: LineFormat, fold: int = NO_FOLD
) -> list[StudentSequence]:
    """Every student block of one file, in file order (empty students included)."""
    file = str(path)
    try:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as error:
        raise LineInputError(file, f"text of {_INTEGERS}", value=str(error)) from error
    if lines[-1] == "":  # the final newline
        lines.pop()
    per_student = LINES_PER_STUDENT[line_format]
    complete = len(lines) - len(lines) % per_student
    read_block = _read_block_3line if line_format == "3line" else _read_block_4line
    # complete blocks first: a stray or missing line mid-file fails where it shifts a block
    students = [read_block(lines, first, file) for first in range(0, complete, per_student)]
    if complete < len(lines):
        raise LineInputError(
            file,
            f"{per_student} lines per student; the file ends after {len(lines)} lines, "
            f"inside the block that starts here (a missing or extra line?)",
            column="block",
            line=complete + 1,
        )
    for student in students:
        student.fold = fold
    return students


def check_unique_students(students: list[StudentSequence]) -> None:
    """AKT ids must name one student each: its folds are disjoint sets of students."""
    for key in ("raw_student_id", "user_index"):
        seen: dict[int, StudentSequence] = {}
        for student in students:
            value = getattr(student, key)
            if value is None:
                continue
            if value in seen:
                earlier = seen[value]
                raise LineInputError(
                    student.source_file,
                    f"each {key} once in the dataset (it is also on line "
                    f"{earlier.source_line} of {earlier.source_file})",
                    column="student ids",
                    value=str(value),
                    line=student.source_line,
                )
            seen[value] = student
