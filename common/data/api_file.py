"""A test file in the competition's format (its example_test.csv: group_num, then the
API's columns; the previous group's outcome lists on each group's first row), checked
whole before 04_infer.py --test-csv does any other work: the file itself (a plain,
complete, comma-separated CSV with the competition's header), every line's field count,
group_num in order with each group's rows together, row_ids unique in the file, and then
each group, read as the stand-in API serves it (common.stream.local_api), through the
checker the notebook runs on the real API's groups (common.data.api_group.GroupChecker).
Every refusal names the file, the line and the column.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd

from common.data.api_group import ContainerRuleError, GroupChecker, read_group
from common.data.csv_file import header_line
from common.data.schema import TEST_COLUMNS, InputError
from common.errors import UserError

GROUP = "group_num"
HEADER = (GROUP, *TEST_COLUMNS)
TRAIN_ONLY = ("answered_correctly", "user_answer")  # train.csv's columns a test file lacks


class ApiFileError(UserError, ValueError):
    """A --test-csv file the stand-in API could not serve as the competition's would."""


def check_api_file(path: Path) -> dict[str, int]:
    """Refuse `path` (ApiFileError, or GroupError for a group) unless it is a test file
    the API could have served; returns its rows, groups and question rows."""
    path = Path(path)
    text = _text(path)
    records, lines = _records(path, text)
    if not records:
        raise ApiFileError(f"{path}: blank lines only; expected a header line and rows")
    header, rows = records[0], records[1:]
    _check_header(path, header)
    if not rows:
        raise ApiFileError(f"{path}: a header and no rows; expected a test group's rows")
    for row, line in zip(rows, lines[1:], strict=True):
        if len(row) != len(header):
            raise ApiFileError(
                f"{path}, line {line}: {len(row)} fields; expected {len(header)}, one per "
                f"column of the header"
            )
    data_lines = np.asarray(lines[1:], dtype=np.int64)
    column = {name: [row[i] for row in rows] for i, name in enumerate(header)}
    groups = _group_numbers(path, column[GROUP], data_lines)
    _check_unique_row_ids(path, column["row_id"], data_lines)
    frame = pd.read_csv(path)  # as common.stream.local_api reads it
    checker = GroupChecker()
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    for start, end in zip(starts, [*starts[1:], len(frame)], strict=True):
        group = frame.iloc[start:end].set_index(GROUP)
        checker.check(group, lambda i, start=start: f"{path}, line {data_lines[start + i]}")
        try:  # the one-container rule, as the states read the group
            read_group(group)
        except ContainerRuleError as error:
            lines = f"lines {data_lines[start]}-{data_lines[end - 1]}"
            raise ApiFileError(f"{path}, {lines}: {error}") from None
    kind = frame["content_type_id"].to_numpy()
    return {"rows": len(frame), "groups": len(starts), "question_rows": int((kind == 0).sum())}


def _text(path: Path) -> str:
    """The file's text, refused as 01 refuses its CSV files (header_line: no file, a
    folder, unreadable, compressed, a header not UTF-8 or not comma-separated), then if
    empty, not UTF-8 further down, or without a final newline."""
    try:
        header_line(path, HEADER)
    except InputError as error:
        raise ApiFileError(str(error)) from None
    raw = path.read_bytes()
    if not raw:
        raise ApiFileError(f"{path}: empty; expected a header line and a test group's rows")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise ApiFileError(f"{path}, line {line}: not UTF-8 text; expected a CSV file") from None
    if not text.endswith("\n"):
        raise ApiFileError(
            f"{path}, line {text.count(chr(10)) + 1}: incomplete (the file does not end with "
            f"a newline: cut short?); expected whole lines"
        )
    return text


def _records(path: Path, text: str) -> tuple[list[list[str]], list[int]]:
    """The file's records and the line each starts on."""
    reader = csv.reader(
        io.StringIO(text.removeprefix("\ufeff")), strict=True
    )  # a BOM, as pandas reads it
    records, lines, line = [], [], 1
    try:
        for record in reader:
            if record:  # a blank line, which pandas and the stand-in API skip
                records.append(record)
                lines.append(line)
            line = reader.line_num + 1
    except csv.Error as error:
        raise ApiFileError(
            f"{path}, line {reader.line_num}: not CSV as the API's files are ({error}: an "
            f"unclosed quote?)"
        ) from None
    return records, lines


def _check_header(path: Path, header: list[str]) -> None:
    expected = f"the competition's columns {', '.join(HEADER)}"
    if any(name in header for name in TRAIN_ONLY):
        raise ApiFileError(
            f"{path}, line 1: columns {[n for n in TRAIN_ONLY if n in header]}, as train.csv "
            f"has; expected a test file's: {expected}"
        )
    missing = [name for name in HEADER if name not in header]
    extra = [name for name in header if name not in HEADER]
    twice = sorted({name for name in header if header.count(name) > 1})
    for found, what in ((missing, "no column"), (extra, "an unknown column"), (twice, "twice")):
        if found:
            said = f"column {found[0]!r} twice" if what == "twice" else f"{what} {found[0]!r}"
            raise ApiFileError(f"{path}, line 1: {said}; expected {expected}")


def _group_numbers(path: Path, values: list[str], lines: np.ndarray) -> np.ndarray:
    """group_num as integers, refused unless each group's rows are together and the
    groups come in increasing order (as the API serves them)."""
    groups = np.empty(len(values), dtype=np.int64)
    for i, value in enumerate(values):
        try:
            groups[i] = int(value)
        except ValueError:
            raise ApiFileError(
                f"{path}, line {lines[i]}, column '{GROUP}': found {value!r}; expected an integer"
            ) from None
    back = np.flatnonzero(groups[1:] < groups[:-1])
    if len(back):
        i = int(back[0]) + 1
        raise ApiFileError(
            f"{path}, line {lines[i]}, column '{GROUP}': found {groups[i]} after "
            f"{groups[i - 1]}; expected the groups in the order served, each group's rows "
            f"together"
        )
    return groups


def _check_unique_row_ids(path: Path, values: list[str], lines: np.ndarray) -> None:
    seen: dict[str, int] = {}
    for i, value in enumerate(values):
        key = value.strip()
        if key in seen:
            raise ApiFileError(
                f"{path}, line {lines[i]}, column 'row_id': found {value!r}, as on line "
                f"{lines[seen[key]]}; expected each row_id once"
            )
        seen[key] = i
