"""Reading the line formats of public knowledge-tracing datasets (common.inputs.kt_datasets
converts what is read): one StudentSequence per student, in file order.

Input formats; the first two have one block of lines per student and no header:
    3line (DKVMN)  `length` / skill ids / 0-1 correctness. The skill is the question.
    4line (AKT)    `user_index,raw_student_id` / problem ids / skill ids / 0-1 correctness.
                   The problem is the question; its skill(s) become its tags.
    pykt (pyKT)    a CSV with a header, one row per student: fold, uid, concepts,
                   responses, and optionally cidxs (each list a quoted field, in time
                   order). No question ids: the concept is the question, as in 3line.
Lists are comma-separated non-negative integers; one trailing comma per list and trailing
whitespace (CRLF) are tolerated, anything else raises `LineInputError` naming the file,
line, column, item and what was expected.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from common.data.schema import InputError

LineFormat = Literal["3line", "4line", "pykt"]
LINE_FORMATS: tuple[str, ...] = ("3line", "4line", "pykt")
LINES_PER_STUDENT: dict[str, int] = {"3line": 3, "4line": 4}  # the block formats

# pyKT's raw per-student files (e.g. data/assist2015/train_valid.csv, test.csv); columns
# pyKT writes for other data sets (questions, timestamps, ...) are refused, not dropped
PYKT_COLUMNS: tuple[str, ...] = ("fold", "uid", "concepts", "responses")
PYKT_OPTIONAL_COLUMNS: tuple[str, ...] = ("cidxs",)  # test.csv: the rows' global indices

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
    raw_student_id: int | None = None  # 4line; pykt's uid
    fold: int = NO_FOLD
    source_fold: int | None = None  # the file's own fold column (pykt: 0-4, test.csv -1)
    id_column: str = "student ids"  # where the ids are, for errors (pykt: its uid column)


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


def _parse_correct(text: str, *, file: str, line: int, what: str = "correctness") -> np.ndarray:
    values = parse_int_list(text, file=file, line=line, what=what)
    if len(values) and values.max() > 1:
        item = int(np.argmax(values > 1))
        raise LineInputError(
            file,
            "correctness 0 or 1",
            column=what,
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


def _read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise LineInputError(str(path), f"text of {_INTEGERS}", value=str(error)) from error


def _read_blocks(path: str | Path, line_format: LineFormat) -> list[StudentSequence]:
    """Every student block of a 3line or 4line file."""
    file = str(path)
    lines = _read_text(path).split("\n")
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
    return students


def _pykt_columns(header: list[str], file: str) -> list[str]:
    """The header's column names, checked: every PYKT_COLUMNS, no other than
    PYKT_OPTIONAL_COLUMNS, none twice (the order is free: rows are read by name)."""
    names = [name.strip() for name in header]
    missing = [c for c in PYKT_COLUMNS if c not in names]
    unknown = [c for c in names if c not in (*PYKT_COLUMNS, *PYKT_OPTIONAL_COLUMNS)]
    twice = sorted({c for c in names if names.count(c) > 1})
    problems = [
        f"missing {', '.join(missing)}" if missing else "",
        f"not read here: {', '.join(map(repr, unknown))}" if unknown else "",
        f"named twice: {', '.join(twice)}" if twice else "",
    ]
    if any(problems):
        raise LineInputError(
            file,
            f"a header line naming the columns {','.join(PYKT_COLUMNS)} (and optionally "
            f"{','.join(PYKT_OPTIONAL_COLUMNS)}); {'; '.join(p for p in problems if p)}",
            column="header",
            value=",".join(header),
            line=1,
        )
    return names


def _read_row_pykt(values: dict[str, str], line: int, file: str) -> StudentSequence:
    """One pyKT row (a student), its columns by name; `line` is 1-based."""
    for column, pattern, expected in (
        ("uid", _INT, "one non-negative integer (at most 18 digits)"),
        ("fold", "-1|[0-4]", "one of pyKT's folds: 0-4, or -1 in test.csv"),
    ):
        if not re.fullmatch(pattern, values[column].strip()):
            raise LineInputError(file, expected, column=column, value=values[column], line=line)
    concepts = parse_int_list(values["concepts"], file=file, line=line, what="concepts")
    correct = _parse_correct(values["responses"], file=file, line=line, what="responses")
    why = "one per concept"
    _check_length(correct, len(concepts), why, file=file, line=line, what="responses")
    if "cidxs" in values:
        cidxs = parse_int_list(values["cidxs"], file=file, line=line, what="cidxs")
        _check_length(cidxs, len(concepts), why, file=file, line=line, what="cidxs")
    # skill-level data: the concept is the question, as in 3line
    return StudentSequence(
        file,
        line,
        problems=concepts,
        skills=concepts,
        correct=correct,
        raw_student_id=int(values["uid"]),
        source_fold=int(values["fold"]),
        id_column="uid",
    )


def _read_pykt(path: str | Path) -> list[StudentSequence]:
    """Every row of a pyKT file; the header is required."""
    file = str(path)
    # csv's field limit (131,072 characters) holds about 30,000 responses of 3-digit ids;
    # a longer list fails as csv.Error below rather than by raising the process-wide limit
    reader = csv.reader(_read_text(path).splitlines(keepends=True), strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise LineInputError(file, "a header line", column="header", value="", line=1)
        names = _pykt_columns(header, file)
        students, end = [], 1
        for row in reader:
            line, end = end + 1, reader.line_num  # a quoted field may span lines
            if len(row) != len(names):
                raise LineInputError(
                    file,
                    f"{len(names)} fields, one per header column",
                    column="row",
                    value=f"{len(row)} fields",
                    line=line,
                )
            students.append(_read_row_pykt(dict(zip(names, row, strict=True)), line, file))
    except csv.Error as error:
        raise LineInputError(
            file, "CSV fields", column="row", value=str(error), line=reader.line_num
        ) from error
    return students


def read_students(
    path: str | Path, line_format: LineFormat, fold: int = NO_FOLD
) -> list[StudentSequence]:
    """Every student of one file, in file order (empty students included)."""
    students = _read_pykt(path) if line_format == "pykt" else _read_blocks(path, line_format)
    for student in students:
        student.fold = fold
    return students


def check_unique_students(students: list[StudentSequence]) -> None:
    """AKT's and pyKT's ids must name one student each: their folds (and pyKT's
    train_valid/test split) are disjoint sets of students."""
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
                    column=student.id_column,
                    value=str(value),
                    line=student.source_line,
                )
            seen[value] = student
