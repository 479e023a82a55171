"""train/questions/lectures CSV -> parquet and flat arrays (see common/data.py for the layout).

train.csv is streamed in blocks with pyarrow's CSV reader, so memory stays flat whatever
the file size: each block is parsed with the competition dtypes, checked, appended to the
parquet file and to the flat arrays, and dropped. Every check names the file, data row,
column and value of the first offending row. Output goes to a temporary directory that
replaces `<output-dir>/data` only when everything is written. Before anything is read in
full or written, the run's peak memory is estimated from the file size (see
estimate_peak_memory) and an input that would not fit the budget is refused.
"""

from __future__ import annotations

import contextlib
import json
import math
import queue
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NoReturn

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from tqdm import tqdm

from common.data import ANSWER_UNKNOWN, ARRAYS_SUBDIR, DATA_SUBDIR, ROW_ARRAYS
from common.files import atomic_dir, write_run_record
from common.schema import (
    LECTURE,
    LECTURES_DTYPES,
    N_CHOICES,
    N_PARTS,
    QUESTION,
    QUESTIONS_DTYPES,
    TRAIN_COLUMNS,
    TRAIN_DTYPES,
    InputError,
)

ARROW_TYPES = {
    "int64": pa.int64(),
    "int32": pa.int32(),
    "int16": pa.int16(),
    "int8": pa.int8(),
    "float32": pa.float32(),
    "boolean": pa.bool_(),
    "string": pa.string(),
}
# The pandas metadata makes pd.read_parquet return the competition dtypes (a nullable
# boolean prior_question_had_explanation rather than object).
TRAIN_SCHEMA = pa.schema(
    [(name, ARROW_TYPES[TRAIN_DTYPES[name]]) for name in TRAIN_COLUMNS]
).with_metadata(
    pa.Schema.from_pandas(
        pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in TRAIN_DTYPES.items()}),
        preserve_index=False,
    ).metadata
)

# row_id and timestamp rise steadily: delta encoding stores them in a fraction of the plain
# size and writes faster than trying a dictionary first; the other columns have few
# distinct values, where dictionaries win.
_DELTA_COLUMNS = ("row_id", "timestamp")
PARQUET_OPTIONS = {
    "compression": "snappy",
    "use_dictionary": [name for name in TRAIN_COLUMNS if name not in _DELTA_COLUMNS],
    "column_encoding": {name: "DELTA_BINARY_PACKED" for name in _DELTA_COLUMNS},
}


def _plain(value: object) -> object:
    """numpy scalars as Python ones, so that messages read `found 9`, not `np.int8(9)`."""
    return value.item() if isinstance(value, np.generic) else value


@dataclass
class PreprocessConfig:
    input_dir: Path
    output_dir: Path
    # pyarrow's streaming reader reads up to 32 blocks of raw text ahead of the parser
    # (kDefaultBackgroundMaxQ in arrow/util/async_generator.h), so 32 x block_size bounds
    # what it holds whatever the file size: 8 MiB blocks keep that near 256 MiB, and a
    # block of ~150,000 rows still amortizes the per-block work.
    block_size: int = 8 << 20
    # Number rows 0..N-1 in file order when row_id is blank (some public dumps of the
    # competition data lost it); off by default because a blank row_id is usually a bug.
    assign_row_ids: bool = False
    progress: bool = True
    # GB the run may use at its peak, checked against estimate_peak_memory before any
    # output is written; None: the memory available when the run starts; 0: no check.
    max_memory: float | None = None


@dataclass
class PreprocessSummary:
    rows: int = 0
    students: int = 0
    questions: int = 0
    lectures: int = 0
    correct: int = 0
    blank_user_answers: int = 0
    lecture_labels_filled: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def share_correct(self) -> float:
        return self.correct / max(self.questions, 1)

    def report(self) -> str:
        rate = self.rows / max(self.seconds, 1e-9)
        lines = [
            f"rows {self.rows:,}  students {self.students:,}  questions {self.questions:,}  "
            f"lectures {self.lectures:,}  share correct {self.share_correct:.4f}",
            f"{self.seconds:.1f} s  ({rate:,.0f} rows/s)",
        ]
        return "\n".join(lines + [f"note: {note}" for note in self.notes])


# ---------------------------------------------------------------------------------------
# questions.csv and lectures.csv


def _read_small_csv(path: Path, dtypes: dict[str, str], key: str) -> pd.DataFrame:
    if not path.exists():
        raise InputError(str(path), "the file to exist")
    if path.stat().st_size == 0:
        raise InputError(str(path), f"a header line with columns {list(dtypes)}", row=0)
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in dtypes if c not in raw.columns]
    if missing:
        raise InputError(
            str(path), f"columns {list(dtypes)}", row=0, column=missing[0], value="<missing>"
        )
    if raw.empty:
        raise InputError(str(path), "at least one data row", row=1)
    out = {}
    for column, dtype in dtypes.items():
        values = raw[column]
        if dtype == "string":
            out[column] = values.astype("string").replace("", pd.NA)
            continue
        parsed = pd.to_numeric(values.where(values != "", None), errors="coerce")
        info = np.iinfo(dtype)
        bad = parsed.isna() | (parsed < info.min) | (parsed > info.max) | (parsed % 1 != 0)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(
                str(path), f"an integer in the {dtype} range", i + 1, column, values.iloc[i]
            )
        out[column] = parsed.astype(dtype)
    frame = pd.DataFrame(out)
    duplicated = frame[key].duplicated()
    if duplicated.any():
        i = int(np.flatnonzero(duplicated.to_numpy())[0])
        raise InputError(str(path), f"unique {key} values", i + 1, key, _plain(frame[key].iloc[i]))
    bad_part = ~frame["part"].between(1, N_PARTS)
    if bad_part.any():
        i = int(np.flatnonzero(bad_part.to_numpy())[0])
        raise InputError(
            str(path), f"part in 1..{N_PARTS}", i + 1, "part", _plain(frame["part"].iloc[i])
        )
    return frame


def read_questions(path: Path) -> pd.DataFrame:
    frame = _read_small_csv(path, QUESTIONS_DTYPES, "question_id")
    bad = ~frame["correct_answer"].between(0, N_CHOICES - 1)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(
            str(path),
            f"correct_answer in 0..{N_CHOICES - 1}",
            i + 1,
            "correct_answer",
            _plain(frame["correct_answer"].iloc[i]),
        )
    if (frame["question_id"] < 0).any():
        i = int(np.flatnonzero((frame["question_id"] < 0).to_numpy())[0])
        raise InputError(
            str(path),
            "question_id >= 0",
            i + 1,
            "question_id",
            _plain(frame["question_id"].iloc[i]),
        )
    return frame


def read_lectures(path: Path) -> pd.DataFrame:
    if path.exists() and path.stat().st_size > 0:
        header = path.read_text().splitlines()[:2]
        if len(header) == 1:  # a header and no lectures (e.g. converted public KT datasets)
            frame = pd.DataFrame({c: pd.Series(dtype=d) for c, d in LECTURES_DTYPES.items()})
            missing = [c for c in LECTURES_DTYPES if c not in header[0].split(",")]
            if missing:
                raise InputError(str(path), f"columns {list(LECTURES_DTYPES)}", 0, missing[0])
            return frame
    return _read_small_csv(path, LECTURES_DTYPES, "lecture_id")


def _id_lookup(ids: np.ndarray) -> np.ndarray:
    """Boolean table over the int16 range (offset by 32768) marking known ids."""
    table = np.zeros(1 << 16, dtype=bool)
    table[ids.astype(np.int64) + (1 << 15)] = True
    return table


# ---------------------------------------------------------------------------------------
# train.csv


class _RowChecker:
    """Checks that span blocks: student grouping, time order, row_id uniqueness."""

    def __init__(self, path: Path, questions: np.ndarray, lectures: np.ndarray):
        self.path = str(path)
        self.known_question = _id_lookup(questions)
        self.known_lecture = _id_lookup(lectures)
        self.seen_users: set[int] = set()
        self.last_user: int | None = None
        self.last_timestamp = 0
        self.last_row_id = -1
        self.row_ids_increasing = True

    def fail(self, row: int, column: str, value: object, expected: str) -> None:
        raise InputError(self.path, expected, row, column, _plain(value))

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
        elapsed = block["prior_question_elapsed_time"]
        first_bad(elapsed < 0, "prior_question_elapsed_time", "milliseconds >= 0 or blank")
        index = block["content_id"].astype(np.int64) + (1 << 15)
        first_bad(
            is_question & ~self.known_question[index],
            "content_id",
            "a question_id listed in questions.csv",
        )
        first_bad(
            ~is_question & ~self.known_lecture[index],
            "content_id",
            "a lecture_id listed in lectures.csv",
        )
        self._check_order(block, first_row)

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


def _check_header(path: Path) -> list[str]:
    if not path.exists():
        raise InputError(str(path), "the file to exist")
    with open(path, "rb") as handle:
        first = handle.readline().decode("utf-8", errors="replace").strip()
        second = handle.readline()
    if not first:
        raise InputError(str(path), f"a header line with columns {TRAIN_COLUMNS}", row=0)
    header = first.split(",")
    missing = [c for c in TRAIN_COLUMNS if c not in header]
    if missing:
        raise InputError(
            str(path), f"header columns {TRAIN_COLUMNS}", 0, missing[0], value="<missing>"
        )
    if not second.strip():
        raise InputError(str(path), "at least one data row after the header", row=1)
    return header


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


def _locate_parse_error(
    path: Path, header: list[str], skip_rows: int, error: Exception
) -> NoReturn:
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


def _block_arrays(batch: pa.RecordBatch) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
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


def _train_reader(path: Path, header: list[str], block_size: int) -> pacsv.CSVStreamingReader:
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


class _Prefetcher:
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


def convert_train(
    path: Path,
    out_dir: Path,
    questions: pd.DataFrame,
    lectures: pd.DataFrame,
    config: PreprocessConfig,
) -> PreprocessSummary:
    header = _check_header(path)
    summary = PreprocessSummary()
    checker = _RowChecker(
        path, questions["question_id"].to_numpy(), lectures["lecture_id"].to_numpy()
    )
    arrays_dir = out_dir / ARRAYS_SUBDIR
    arrays_dir.mkdir()
    boundaries: list[np.ndarray] = []
    users: list[np.ndarray] = []
    start = time.perf_counter()
    try:  # open_csv parses the first block: its errors surface here
        reader = _train_reader(path, header, config.block_size)
    except pa.ArrowInvalid as error:
        _locate_parse_error(path, header, 0, error)
    with contextlib.ExitStack() as stack:
        sinks = {
            name: stack.enter_context(open(arrays_dir / f"{name}.bin", "wb")) for name in ROW_ARRAYS
        }
        writer = stack.enter_context(
            pq.ParquetWriter(out_dir / "train.parquet", TRAIN_SCHEMA, **PARQUET_OPTIONS)
        )
        bar = stack.enter_context(
            tqdm(unit=" rows", unit_scale=True, disable=not config.progress, desc="train.csv")
        )
        batches = _Prefetcher(reader)
        stack.callback(batches.close)
        while True:
            try:
                batch = batches.read_next_batch()
            except StopIteration:
                break
            except pa.ArrowInvalid as error:
                _locate_parse_error(path, header, summary.rows, error)
            if batch.num_rows == 0:
                continue
            values, nulls = _block_arrays(batch)
            first_row = summary.rows + 1
            if nulls["row_id"].any() and not config.assign_row_ids:
                i = int(np.argmax(nulls["row_id"]))
                raise InputError(
                    str(path),
                    "a row_id on every row (pass --assign-row-ids to number rows "
                    "0..N-1 in file order instead)",
                    first_row + i,
                    "row_id",
                    "<blank>",
                )
            if config.assign_row_ids:
                values["row_id"] = np.arange(
                    summary.rows, summary.rows + batch.num_rows, dtype=np.int64
                )
            previous_user = checker.last_user
            checker.check(values, nulls, first_row)
            values = _fill_blanks(values, nulls, summary)
            _append(values, nulls, writer, sinks, summary)
            new_user = np.ones(batch.num_rows, dtype=bool)
            new_user[1:] = values["user_id"][1:] != values["user_id"][:-1]
            new_user[0] = values["user_id"][0] != previous_user
            boundaries.append(np.flatnonzero(new_user) + summary.rows)
            users.append(values["user_id"][new_user])
            summary.rows += batch.num_rows
            bar.update(batch.num_rows)
    if summary.rows == 0:
        raise InputError(str(path), "at least one data row", row=1)
    if not checker.row_ids_increasing:
        _check_unique_row_ids(path, arrays_dir, summary.rows)
    user_ids = np.concatenate(users).astype(np.int32)
    offsets = np.append(np.concatenate(boundaries), summary.rows).astype(np.int64)
    user_ids.tofile(arrays_dir / "users.bin")
    offsets.tofile(arrays_dir / "offsets.bin")
    manifest = {
        "n_rows": summary.rows,
        "n_students": len(user_ids),
        "columns": ROW_ARRAYS,
        "answer_unknown": ANSWER_UNKNOWN,
    }
    (arrays_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    summary.students = len(user_ids)
    summary.seconds = time.perf_counter() - start
    return summary


def _fill_blanks(values, nulls, summary: PreprocessSummary) -> dict[str, np.ndarray]:
    is_lecture = values["content_type_id"] == LECTURE
    filled = is_lecture & nulls["answered_correctly"]
    if filled.any():
        values["answered_correctly"] = np.where(filled, -1, values["answered_correctly"])
        summary.lecture_labels_filled += int(filled.sum())
    blank_answer = nulls["user_answer"]
    summary.blank_user_answers += int((blank_answer & ~is_lecture).sum())
    values["user_answer"] = np.where(
        blank_answer, np.where(is_lecture, -1, ANSWER_UNKNOWN), values["user_answer"]
    ).astype(np.int8)
    nulls["user_answer"] = blank_answer & ~is_lecture
    nulls["answered_correctly"] = np.zeros_like(filled)
    return values


def _append(values, nulls, writer, sinks, summary: PreprocessSummary) -> None:
    arrays = []
    for name in TRAIN_COLUMNS:
        dtype = TRAIN_DTYPES[name]
        if dtype == "boolean":
            arrays.append(pa.array(values[name] == 1, mask=nulls[name]))
        elif dtype == "float32":
            arrays.append(pa.array(values[name]))
        else:
            mask = nulls[name] if name == "user_answer" else None
            arrays.append(pa.array(values[name], mask=mask))
    writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=TRAIN_SCHEMA))
    for name, dtype in ROW_ARRAYS.items():
        sinks[name].write(np.ascontiguousarray(values[name], dtype=dtype).tobytes())
    is_question = values["content_type_id"] == QUESTION
    summary.questions += int(is_question.sum())
    summary.lectures += int((~is_question).sum())
    summary.correct += int((values["answered_correctly"] == 1).sum())


def _check_unique_row_ids(path: Path, arrays_dir: Path, n_rows: int) -> None:
    # A sorted copy (8 B/row; the memory-mapped file is page cache), not an argsort and two
    # gathers (32 B/row): this holds every row at once.
    row_id = np.memmap(arrays_dir / "row_id.bin", dtype=np.int64, mode="r", shape=(n_rows,))
    ordered = np.sort(row_id)
    repeated = ordered[1:] == ordered[:-1]
    if repeated.any():
        value = int(ordered[int(np.argmax(repeated))])  # the smallest repeated row_id
        second = int(np.flatnonzero(row_id == value)[1])  # its second row in file order
        raise InputError(str(path), "unique row_id values", second + 1, "row_id", value)


# ---------------------------------------------------------------------------------------
# peak memory, estimated before the run
#
# Measured (bench/results/preprocess.txt, peak RSS of 01_preprocess.py on 1M-10M demo rows):
# start-up and the per-block working set 0.20-0.31 GB; pyarrow's readahead, up to 32 blocks
# of raw text (the whole file when smaller); ~100 B per student (the seen-user set and the
# student index); and, only when row_ids are not increasing, 17 B per row for the
# duplicate check (a sorted copy 8, flags 1, the memory-mapped row_id 8). Every term is
# taken at or above its measured value, then a margin on the sum.
MEMORY_FIXED_BYTES = 400_000_000  # start-up and working set: 0.31 GB measured at 10M rows
READAHEAD_BLOCKS = 32  # kDefaultBackgroundMaxQ (see PreprocessConfig.block_size)
MEMORY_PER_STUDENT = 200  # ~100 B measured
MEMORY_PER_ROW_ID_CHECK = 17  # bytes per row when row_ids are not increasing
MEMORY_MARGIN = 1.25
SAMPLE_BYTES = 4 << 20  # head of train.csv read for bytes per row and students per byte


@dataclass
class MemoryEstimate:
    file_bytes: int
    rows: int  # the file's size over the sample's bytes per row
    students: int  # twice the sample's students per byte, over the whole file
    peak_bytes: int

    def describe(self) -> str:
        return (
            f"{self.file_bytes / 1e9:.2f} GB of CSV, ~{self.rows:,} rows, "
            f"~{self.students:,} students: estimated peak {self.peak_bytes / 1e9:.2f} GB"
        )


def estimate_peak_memory(path: Path, config: PreprocessConfig) -> MemoryEstimate:
    """A conservative estimate of the run's peak memory from train.csv's size and its
    first SAMPLE_BYTES: rows from the head's bytes per row (row_id and timestamp only grow
    longer further down, so this overcounts), students at twice the head's rate, and the
    row_id duplicate check counted unless --assign-row-ids numbers the rows."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        header = handle.readline()
        head = handle.read(SAMPLE_BYTES)
    lines = head.split(b"\n")[:-1] if len(head) == SAMPLE_BYTES else head.splitlines()
    body = size - len(header)
    if not lines or body <= 0:
        return MemoryEstimate(size, 0, 0, int(MEMORY_MARGIN * MEMORY_FIXED_BYTES))
    sampled = sum(len(line) + 1 for line in lines)
    rows = math.ceil(body * len(lines) / sampled)
    columns = header.decode("utf-8", errors="replace").strip().split(",")
    column = columns.index("user_id") if "user_id" in columns else 0
    users = {line.split(b",")[column] for line in lines if line.count(b",") >= column}
    students = min(rows, math.ceil(2 * len(users) * body / sampled))
    row_id_check = 0 if config.assign_row_ids else MEMORY_PER_ROW_ID_CHECK * rows
    peak = MEMORY_MARGIN * (
        MEMORY_FIXED_BYTES
        + min(size, READAHEAD_BLOCKS * config.block_size)
        + MEMORY_PER_STUDENT * students
        + row_id_check
    )
    return MemoryEstimate(size, rows, students, int(peak))


def available_memory() -> int | None:
    """Bytes this process can still take: MemAvailable, lowered to the cgroup's free
    limit inside a container (where the OOM killer acts); None when unknown."""
    candidates = []
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                candidates.append(int(line.split()[1]) * 1024)
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        with contextlib.suppress(OSError, ValueError):
            limit = Path(limit_file).read_text().strip()
            if limit != "max" and int(limit) < 1 << 60:
                candidates.append(int(limit) - int(Path(usage_file).read_text()))
    return min(candidates) if candidates else None


def check_memory(path: Path, config: PreprocessConfig) -> MemoryEstimate | None:
    """Raise InputError when train.csv's estimated peak exceeds the budget."""
    if not path.is_file() or config.max_memory == 0:
        return None
    estimate = estimate_peak_memory(path, config)
    if config.max_memory is None:
        budget, source = available_memory(), "the memory available now"
        if budget is None:
            return estimate
    else:
        budget, source = int(config.max_memory * 1e9), "--max-memory"
    if estimate.peak_bytes > budget:
        raise InputError(
            str(path),
            f"an estimated peak within {budget / 1e9:.2f} GB ({source}); pass a larger "
            "--max-memory if the machine has it, or --max-memory 0 to skip this check",
            value=estimate.describe(),
        )
    return estimate


# ---------------------------------------------------------------------------------------


def preprocess(config: PreprocessConfig) -> PreprocessSummary:
    """Convert `<input-dir>/{train,questions,lectures}.csv` into `<output-dir>/data/`."""
    input_dir = Path(config.input_dir)
    estimate = check_memory(input_dir / "train.csv", config)
    questions = read_questions(input_dir / "questions.csv")
    lectures = read_lectures(input_dir / "lectures.csv")
    with atomic_dir(Path(config.output_dir) / DATA_SUBDIR) as tmp:
        summary = convert_train(input_dir / "train.csv", tmp, questions, lectures, config)
        questions.to_parquet(tmp / "questions.parquet", index=False)
        lectures.to_parquet(tmp / "lectures.parquet", index=False)
        if summary.blank_user_answers:
            summary.notes.append(
                f"{summary.blank_user_answers:,} question rows have a blank user_answer "
                f"(kept as null in parquet, {ANSWER_UNKNOWN} in the arrays)"
            )
        if summary.lecture_labels_filled:
            summary.notes.append(
                f"{summary.lecture_labels_filled:,} lecture rows had a blank "
                "answered_correctly; set to -1 (lectures are never labelled)"
            )
        record = {"config": {k: str(v) for k, v in asdict(config).items()}}
        record["summary"] = asdict(summary) | {"share_correct": summary.share_correct}
        record["memory_estimate"] = asdict(estimate) if estimate else None
        (tmp / "preprocess_summary.json").write_text(json.dumps(record, indent=2) + "\n")
        write_run_record(tmp, "preprocess", record["config"])
    return summary
