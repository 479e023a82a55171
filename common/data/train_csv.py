"""train.csv read and checked block by block, for stage 1 (common.data.preprocess): the
header, pyarrow's streaming reader with the competition dtypes (the next block read on
a thread while the current one is checked and written), each block's values and nulls,
the checks that span blocks (student grouping, time order, row_id uniqueness), and the
row a parse error is on. Every check names the file, data row, column and value of the
first offending row.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from pathlib import Path
from typing import NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from common.data.csv_file import header_line
from common.data.schema import LECTURE, N_CHOICES, QUESTION, TRAIN_COLUMNS, TRAIN_DTYPES, InputError
from common.workspace import DataFolder

ARROW_TYPES = {
    "int64": pa.int64(),
    "int32": pa.int32(),
    "int16": pa.int16(),
    "int8": pa.int8(),
    "float32": pa.float32(),
    "boolean": pa.bool_(),
    "string": pa.string(),
}


def plain(value: object) -> object:
    """numpy scalars as Python ones, so that messages read `found 9`, not `np.int8(9)`."""
    return value.item() if isinstance(value, np.generic) else value


def _id_lookup(ids: np.ndarray) -> np.ndarray:
    """Boolean table over the int16 range (offset by 32768) marking known ids."""
    table = np.zeros(1 << 16, dtype=bool)
    table[ids.astype(np.int64) + (1 << 15)] = True
    return table


class RowChecker:
    """Checks that span blocks: student grouping, time order, row_id uniqueness."""

    def __init__(
        self,
        path: Path,
        questions: np.ndarray,
        lectures: np.ndarray,
        correct_answers: np.ndarray | None = None,
    ):
        self.path = str(path)
        self.known_question = _id_lookup(questions)
        self.known_lecture = _id_lookup(lectures)
        # each question's correct_answer by content_id (as known_question), -1 unknown
        self.correct_answer = np.full(len(self.known_question), -1, dtype=np.int64)
        if correct_answers is not None:
            self.correct_answer[np.asarray(questions, np.int64) + (1 << 15)] = correct_answers
        self.seen_users: set[int] = set()
        self.last_user: int | None = None
        self.last_timestamp = 0
        self.last_row_id = -1
        self.row_ids_increasing = True

    def fail(self, row: int, column: str, value: object, expected: str) -> None:
        raise InputError(self.path, expected, row, column, plain(value))

    def check(self, block: dict[str, np.ndarray], nulls: dict[str, np.ndarray], first_row: int):
        """first_row: 1-based data row number of block[...][0]."""
        n = len(block["user_id"])

        def first_bad(mask: np.ndarray, column: str, expected: str) -> None:
            if mask.any():
                i = int(np.argmax(mask))
                value = None if nulls.get(column, np.zeros(n, bool))[i] else block[column][i]
                self.fail(first_row + i, column, "<blank>" if value is None else value, expected)

        for column in ("timestamp", "user_id", "content_id", "content_type_id"):
            first_bad(nulls[column], column, "a value (this column may not be blank)")
        first_bad(nulls["task_container_id"], "task_container_id", "a value")
        ctype = block["content_type_id"]
        first_bad((ctype != QUESTION) & (ctype != LECTURE), "content_type_id", "0 or 1")
        is_question = ctype == QUESTION
        label = block["answered_correctly"]
        first_bad(
            is_question & nulls["answered_correctly"],
            "answered_correctly",
            "0 or 1 on a question row (labels may not be blank)",
        )
        first_bad(
            is_question & ~nulls["answered_correctly"] & (label != 0) & (label != 1),
            "answered_correctly",
            "0 or 1 on a question row",
        )
        first_bad(
            ~is_question & ~nulls["answered_correctly"] & (label != -1),
            "answered_correctly",
            "-1 on a lecture row",
        )
        answer = block["user_answer"]
        first_bad(
            is_question & ~nulls["user_answer"] & ((answer < 0) | (answer >= N_CHOICES)),
            "user_answer",
            f"0..{N_CHOICES - 1} on a question row",
        )
        first_bad(
            ~is_question & ~nulls["user_answer"] & (answer != -1),
            "user_answer",
            "-1 on a lecture row",
        )
        first_bad(block["timestamp"] < 0, "timestamp", "milliseconds >= 0")
        first_bad(block["user_id"] < 0, "user_id", "a user id >= 0")
        first_bad(block["task_container_id"] < 0, "task_container_id", "an id >= 0")
        elapsed = block["prior_question_elapsed_time"]  # NaN where blank
        first_bad(
            ~nulls["prior_question_elapsed_time"] & ~(np.isfinite(elapsed) & (elapsed >= 0)),
            "prior_question_elapsed_time",
            "milliseconds >= 0 or blank (a finite number, within float32)",
        )
        index = self._check_listed(block, first_row, is_question)
        self._check_labels(block, nulls, first_row, is_question, index)
        self._check_order(block, first_row)

    def _check_listed(self, block, first_row: int, is_question) -> np.ndarray:
        """Each row's content_id is listed in questions.csv or lectures.csv, as its
        content_type_id says; returns the ids' index into the lookup tables."""
        index = block["content_id"].astype(np.int64) + (1 << 15)
        listed = np.where(is_question, self.known_question[index], self.known_lecture[index])
        if not listed.all():
            i = int(np.argmin(listed))
            kind = (
                "question_id listed in questions"
                if is_question[i]
                else "lecture_id listed in lectures"
            )
            self.fail(first_row + i, "content_id", block["content_id"][i], f"a {kind}.csv")
        return index

    def _check_labels(self, block, nulls, first_row: int, is_question, index) -> None:
        """A question row's answered_correctly must say whether its user_answer is the
        question's correct_answer (questions.csv), where both are given."""
        answer, label = block["user_answer"], block["answered_correctly"]
        correct = self.correct_answer[index]
        known = is_question & ~nulls["user_answer"] & ~nulls["answered_correctly"] & (correct >= 0)
        wrong = known & (label != (answer == correct))
        if wrong.any():
            i = int(np.argmax(wrong))
            self.fail(
                first_row + i,
                "answered_correctly",
                block["answered_correctly"][i],
                f"{int(answer[i] == correct[i])}: user_answer {int(answer[i])} against the "
                f"correct_answer {int(correct[i])} of question {int(block['content_id'][i])}",
            )

    def _check_order(self, block: dict[str, np.ndarray], first_row: int) -> None:
        user, timestamp, row_id = block["user_id"], block["timestamp"], block["row_id"]
        n = len(user)
        prev_user = np.empty(n, dtype=np.int64)
        prev_user[1:] = user[:-1]
        prev_user[0] = -1 if self.last_user is None else self.last_user
        prev_time = np.empty(n, dtype=np.int64)
        prev_time[1:] = timestamp[:-1]
        prev_time[0] = self.last_timestamp
        same = prev_user == user
        backwards = same & (timestamp < prev_time)
        if backwards.any():
            i = int(np.argmax(backwards))
            self.fail(
                first_row + i,
                "timestamp",
                int(timestamp[i]),
                f"a student's rows in time order (user {int(user[i])}'s previous row has "
                f"timestamp {int(prev_time[i])})",
            )
        for i in np.flatnonzero(~same):
            uid = int(user[i])
            if uid in self.seen_users:
                self.fail(
                    first_row + int(i),
                    "user_id",
                    uid,
                    "each student's rows together in one run (this user appeared earlier, "
                    "before other users' rows); sort train.csv by user_id, then timestamp",
                )
            self.seen_users.add(uid)
        if self.row_ids_increasing:
            prev_id = np.empty(n, dtype=np.int64)
            prev_id[1:] = row_id[:-1]
            prev_id[0] = self.last_row_id
            self.row_ids_increasing = bool((row_id > prev_id).all())
        self.last_user = int(user[-1])
        self.last_timestamp = int(timestamp[-1])
        self.last_row_id = int(row_id[-1])


def check_header(path: Path) -> list[str]:
    first, second = header_line(path, TRAIN_COLUMNS)
    if not first:
        raise InputError(str(path), f"a header line with columns {TRAIN_COLUMNS}", row=0)
    header = first.split(",")
    for column in TRAIN_COLUMNS:
        if header.count(column) != 1:  # a repeated column: which copy is meant?
            found = "<missing>" if column not in header else "<repeated>"
            raise InputError(
                str(path), f"header columns {TRAIN_COLUMNS}, each once", 0, column, found
            )
    if not second.strip() and not _has_data_row(path):
        raise InputError(str(path), "at least one data row after the header", row=1)
    return header


def _has_data_row(path: Path) -> bool:
    """Whether a line after the header holds anything (pyarrow skips blank lines)."""
    with open(path, "rb") as handle:
        handle.readline()
        return any(line.strip() for line in handle)


def _parse_scalar(text: str, dtype: str) -> bool:
    """Whether one CSV field parses as `dtype` (blank counts as valid: nulls are checked
    separately with their own message)."""
    if text == "":
        return True
    if dtype == "boolean":
        return text in ("True", "False", "true", "false", "TRUE", "FALSE", "1", "0")
    if dtype == "float32":
        try:
            float(text)
        except ValueError:
            return False
        return True
    try:
        value = int(text)
    except ValueError:
        return False
    info = np.iinfo(dtype)
    return info.min <= value <= info.max


def locate_parse_error(path: Path, header: list[str], skip_rows: int, error: Exception) -> NoReturn:
    """pyarrow reports a bad block without a row number; find the first bad line after the
    `skip_rows` rows that parsed, and raise an InputError naming it."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        handle.readline()
        for _ in range(skip_rows):
            handle.readline()
        for offset, line in enumerate(handle):
            row = skip_rows + offset + 1
            fields = line.rstrip("\r\n").split(",")
            if len(fields) != len(header):
                raise InputError(
                    str(path),
                    f"{len(header)} comma-separated fields (the file may be truncated)",
                    row,
                    value=line.rstrip("\r\n")[:200],
                ) from error
            for name, text in zip(header, fields, strict=True):
                dtype = TRAIN_DTYPES.get(name)
                if dtype and not _parse_scalar(text, dtype):
                    expected = {"boolean": "True, False or blank", "float32": "a number"}.get(
                        dtype, f"an integer in the {dtype} range"
                    )
                    raise InputError(str(path), expected, row, name, text) from error
    raise InputError(str(path), f"a well-formed CSV file (pyarrow: {error})") from error


def block_arrays(batch: pa.RecordBatch) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    values, nulls = {}, {}
    for name in TRAIN_COLUMNS:
        column = batch.column(name)
        nulls[name] = column.is_null().to_numpy(zero_copy_only=False)
        dtype = TRAIN_DTYPES[name]
        if dtype == "boolean":
            values[name] = np.where(
                nulls[name], -1, column.fill_null(False).to_numpy(zero_copy_only=False)
            ).astype(np.int8)
        elif dtype == "float32":
            values[name] = column.to_numpy(zero_copy_only=False).astype(np.float32)
        else:
            values[name] = column.fill_null(0).to_numpy().astype(dtype)
    return values, nulls


def train_reader(path: Path, header: list[str], block_size: int) -> pacsv.CSVStreamingReader:
    types = {name: ARROW_TYPES[TRAIN_DTYPES[name]] for name in TRAIN_COLUMNS}
    return pacsv.open_csv(
        path,
        read_options=pacsv.ReadOptions(block_size=block_size, use_threads=True),
        convert_options=pacsv.ConvertOptions(
            column_types=types,
            include_columns=TRAIN_COLUMNS,
            true_values=["True", "true", "TRUE", "1"],
            false_values=["False", "false", "FALSE", "0"],
        ),
    )


class Prefetcher:
    """Reads the next block on a background thread while the current one is checked and
    written: pyarrow parses without holding the GIL, so parsing and parquet writing
    overlap. Batches, the end (StopIteration) and read errors arrive in file order."""

    _END = object()

    def __init__(self, reader: pacsv.CSVStreamingReader, depth: int = 1):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(reader,), daemon=True)
        self._thread.start()

    def _run(self, reader: pacsv.CSVStreamingReader) -> None:
        while not self._stop.is_set():
            try:
                item = reader.read_next_batch()
            except StopIteration:
                item = self._END
            except Exception as error:  # raised again by read_next_batch, in order
                item = error
            while not self._stop.is_set():
                with contextlib.suppress(queue.Full):
                    self._queue.put(item, timeout=0.1)
                    break
            if not isinstance(item, pa.RecordBatch):
                return

    def read_next_batch(self) -> pa.RecordBatch:
        item = self._queue.get()
        if item is self._END:
            raise StopIteration
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def check_unique_row_ids(path: Path, data: DataFolder, n_rows: int) -> None:
    # A sorted copy (8 B/row; the memory-mapped file is page cache), not an argsort and two
    # gathers (32 B/row): this holds every row at once.
    row_id = np.memmap(data.array("row_id"), dtype=np.int64, mode="r", shape=(n_rows,))
    ordered = np.sort(row_id)
    repeated = ordered[1:] == ordered[:-1]
    if repeated.any():
        value = int(ordered[int(np.argmax(repeated))])  # the smallest repeated row_id
        second = int(np.flatnonzero(row_id == value)[1])  # its second row in file order
        raise InputError(str(path), "unique row_id values", second + 1, "row_id", value)
