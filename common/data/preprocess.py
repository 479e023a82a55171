"""train/questions/lectures CSV -> parquet and flat arrays (see common/data/arrays.py for the
layout).

train.csv is streamed in blocks with pyarrow's CSV reader, so memory stays flat whatever
the file size: each block is parsed with the competition dtypes, checked, appended to the
parquet file and to the flat arrays, and dropped (the reading and the checks are in
common/data/train_csv.py). Every check names the file, data row, column and value of the first
offending row. Output goes to a temporary directory that replaces `<output-dir>/data` only
when everything is written. Before anything is read in full or written, the run's peak
memory is estimated from the file size (common/data/memory.py) and an input that would not fit
the budget is refused.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from common.data.arrays import ROW_ARRAYS, write_data_fingerprint
from common.data.csv_file import BOM, header_line
from common.data.memory import check_memory
from common.data.question_fields import ANSWER_UNKNOWN
from common.data.schema import (
    LECTURE,
    LECTURES_DTYPES,
    N_CHOICES,
    N_PARTS,
    QUESTION,
    QUESTIONS_DTYPES,
    TAG_ID_MAX,
    TRAIN_COLUMNS,
    TRAIN_DTYPES,
    InputError,
)
from common.data.train_csv import (
    ARROW_TYPES,
    Prefetcher,
    RowChecker,
    block_arrays,
    check_header,
    check_unique_row_ids,
    locate_parse_error,
    plain,
    train_reader,
)
from common.files import atomic_dir, write_run_record
from common.options import above, at_least, option, progress_option
from common.workspace import DataFolder, Workspace

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


@dataclass
class PreprocessConfig:
    input_dir: Path = option(Path("input"), "folder of train.csv, questions.csv, lectures.csv")
    output_dir: Path = option(Path("output"), "stage 1 writes <output-dir>/data/")
    # pyarrow's streaming reader reads up to 32 blocks of raw text ahead of the parser
    # (kDefaultBackgroundMaxQ in arrow/util/async_generator.h), so 32 x block_size bounds
    # what it holds whatever the file size: 8 MiB blocks keep that near 256 MiB, and a
    # block of ~150,000 rows still amortizes the per-block work.
    block_size: int = option(
        8 << 20, "bytes of train.csv parsed per block", range=at_least(1 << 16)
    )
    # Number rows 0..N-1 in file order when row_id is blank (some public dumps of the
    # competition data lost it); off by default because a blank row_id is usually a bug.
    assign_row_ids: bool = option(
        False, "number rows 0..N-1 in file order (for dumps whose row_id is blank)"
    )
    progress: bool = progress_option()
    # GB the run may use at its peak, checked against common.data.memory.estimate_peak_memory
    # before any output is written; None: the memory available when the run starts; 0: no
    # check.
    max_memory: float | None = option(
        None,
        "refuse input whose estimated peak memory exceeds this many GB (none: the memory "
        "available now; 0: no check); the estimate is in data/preprocess_summary.json",
        metavar="GB",
        range=above(0),
    )


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


def _read_small_csv(
    path: Path, dtypes: dict[str, str], key: str, allow_empty: bool = False
) -> pd.DataFrame:
    """questions.csv or lectures.csv with the competition dtypes, each value checked; a
    file of a header and no rows is refused unless allow_empty."""
    if not path.exists():
        raise InputError(str(path), "the file to exist")
    header_line(path, dtypes)  # a folder, compressed, not UTF-8 or not commas: named
    if path.stat().st_size == 0:
        raise InputError(str(path), f"a header line with columns {list(dtypes)}", row=0)
    raw = _text_fields(path, list(dtypes))
    if raw.empty and not allow_empty:
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
        raise InputError(str(path), f"unique {key} values", i + 1, key, plain(frame[key].iloc[i]))
    bad_part = ~frame["part"].between(1, N_PARTS)
    if bad_part.any():
        i = int(np.flatnonzero(bad_part.to_numpy())[0])
        raise InputError(
            str(path), f"part in 1..{N_PARTS}", i + 1, "part", plain(frame["part"].iloc[i])
        )
    return frame


def _text_fields(path: Path, columns: list[str]) -> pd.DataFrame:
    """A small CSV file's fields as text (blank lines skipped, as pandas skips them),
    refused with its row named where a byte is not UTF-8, a quote is not closed or a row
    has more or fewer fields than the header; the header must name each of `columns`
    once."""
    content = path.read_bytes().removeprefix(BOM)
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as error:
        line = content[: error.start].count(b"\n")
        raise InputError(
            str(path),
            f"UTF-8 text; byte {content[error.start]:#04x} is not UTF-8 (Latin-1 or "
            "Windows-1252?): save the file as UTF-8",
            row=line,
            value=content.split(b"\n")[line].decode("utf-8", errors="replace")[:200],
        ) from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[list[str]] = []
    try:
        header = next(reader, [])
        for column in columns:
            if header.count(column) != 1:
                found = "<missing>" if column not in header else "<repeated>"
                raise InputError(str(path), f"columns {columns}, each once", 0, column, found)
        for fields in reader:
            if fields and len(fields) != len(header):
                raise InputError(
                    str(path),
                    f"{len(header)} comma-separated fields (the file may be truncated)",
                    len(rows) + 1,
                    value=",".join(fields)[:200],
                )
            if fields:
                rows.append(fields)
    except csv.Error as error:
        raise InputError(str(path), f"well-formed CSV ({error})", len(rows) + 1) from None
    return pd.DataFrame(rows, columns=header, dtype=str)


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
            plain(frame["correct_answer"].iloc[i]),
        )
    if (frame["question_id"] < 0).any():
        i = int(np.flatnonzero((frame["question_id"] < 0).to_numpy())[0])
        raise InputError(
            str(path),
            "question_id >= 0",
            i + 1,
            "question_id",
            plain(frame["question_id"].iloc[i]),
        )
    _check_tags(path, frame["tags"])
    return frame


def _check_tags(path: Path, tags: pd.Series) -> None:
    """Each question's tags are blank (no tags) or tag ids 0..TAG_ID_MAX separated by
    spaces, as 03 --tags reads them: refused here, before any output is written."""
    text = tags.fillna("")
    ids = text.str.findall(r"[0-9]+")
    well_formed = text.str.fullmatch(r" *(?:[0-9]+(?: +[0-9]+)*)? *")
    in_range = ids.map(lambda found: all(_tag_id_in_range(tag) for tag in found))
    bad = ~(well_formed & in_range).to_numpy(dtype=bool)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(
            str(path),
            f"tag ids separated by spaces, each an integer in 0..{TAG_ID_MAX} (blank: no tags)",
            i + 1,
            "tags",
            text.iloc[i][:200],
        )


def _tag_id_in_range(digits: str) -> bool:
    significant = digits.lstrip("0") or "0"  # int() refuses strings over 4,300 digits
    return len(significant) <= len(str(TAG_ID_MAX)) and int(significant) <= TAG_ID_MAX


def read_lectures(path: Path) -> pd.DataFrame:
    """lectures.csv; a header and no rows is no lectures (e.g. converted public KT data)."""
    return _read_small_csv(path, LECTURES_DTYPES, "lecture_id", allow_empty=True)


# ---------------------------------------------------------------------------------------
# train.csv


def convert_train(
    path: Path,
    data: DataFolder,
    questions: pd.DataFrame,
    lectures: pd.DataFrame,
    config: PreprocessConfig,
) -> PreprocessSummary:
    header = check_header(path)
    summary = PreprocessSummary()
    checker = RowChecker(
        path,
        questions["question_id"].to_numpy(),
        lectures["lecture_id"].to_numpy(),
        questions["correct_answer"].to_numpy(),
    )
    data.arrays.mkdir()
    boundaries: list[np.ndarray] = []
    users: list[np.ndarray] = []
    start = time.perf_counter()
    try:  # open_csv parses the first block: its errors surface here
        reader = train_reader(path, header, config.block_size)
    except pa.ArrowInvalid as error:
        locate_parse_error(path, header, 0, error)
    with contextlib.ExitStack() as stack:
        sinks = {name: stack.enter_context(open(data.array(name), "wb")) for name in ROW_ARRAYS}
        writer = stack.enter_context(
            pq.ParquetWriter(data.train_parquet, TRAIN_SCHEMA, **PARQUET_OPTIONS)
        )
        bar = stack.enter_context(
            tqdm(unit=" rows", unit_scale=True, disable=not config.progress, desc="train.csv")
        )
        batches = Prefetcher(reader)
        stack.callback(batches.close)
        for batch in _nonempty_batches(batches, path, header, summary):
            previous_user = checker.last_user
            values = _convert_block(batch, path, checker, config, writer, sinks, summary)
            new_user = _new_students(values["user_id"], previous_user)
            boundaries.append(np.flatnonzero(new_user) + summary.rows)
            users.append(values["user_id"][new_user])
            summary.rows += batch.num_rows
            bar.update(batch.num_rows)
    if summary.rows == 0:
        raise InputError(str(path), "at least one data row", row=1)
    if not checker.row_ids_increasing:
        check_unique_row_ids(path, data, summary.rows)
    summary.students = _write_students(data, boundaries, users, summary.rows)
    summary.seconds = time.perf_counter() - start
    return summary


def _nonempty_batches(
    batches: Prefetcher, path: Path, header: list[str], summary: PreprocessSummary
) -> Iterator[pa.RecordBatch]:
    """train.csv's blocks with rows, in file order; a block that does not parse raises an
    InputError naming its first bad line (summary.rows: the rows converted before it)."""
    while True:
        try:
            batch = batches.read_next_batch()
        except StopIteration:
            break
        except pa.ArrowInvalid as error:
            locate_parse_error(path, header, summary.rows, error)
        if batch.num_rows == 0:
            continue
        yield batch


def _convert_block(
    batch: pa.RecordBatch,
    path: Path,
    checker: RowChecker,
    config: PreprocessConfig,
    writer: pq.ParquetWriter,
    sinks: dict,
    summary: PreprocessSummary,
) -> dict[str, np.ndarray]:
    """Check one block, fill its blanks and append it to the parquet file and the flat
    arrays; returns its columns as written to the arrays."""
    values, nulls = block_arrays(batch)
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
        values["row_id"] = np.arange(summary.rows, summary.rows + batch.num_rows, dtype=np.int64)
    checker.check(values, nulls, first_row)
    values = _fill_blanks(values, nulls, summary)
    _append(values, nulls, writer, sinks, summary)
    return values


def _new_students(user: np.ndarray, previous_user) -> np.ndarray:
    """(n,) bool: rows of a block that start a student (previous_user: the user of the
    row before the block)."""
    new_user = np.ones(len(user), dtype=bool)
    new_user[1:] = user[1:] != user[:-1]
    new_user[0] = user[0] != previous_user
    return new_user


def _write_students(
    data: DataFolder, boundaries: list[np.ndarray], users: list[np.ndarray], n_rows: int
) -> int:
    """users.bin, offsets.bin and manifest.json from each block's student starts (global
    rows) and their user ids; returns the number of students."""
    user_ids = np.concatenate(users).astype(np.int32)
    offsets = np.append(np.concatenate(boundaries), n_rows).astype(np.int64)
    user_ids.tofile(data.array("users"))
    offsets.tofile(data.array("offsets"))
    manifest = {
        "n_rows": n_rows,
        "n_students": len(user_ids),
        "columns": ROW_ARRAYS,
        "answer_unknown": ANSWER_UNKNOWN,
    }
    data.arrays_manifest.write_text(json.dumps(manifest, indent=2) + "\n")
    return len(user_ids)


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


# ---------------------------------------------------------------------------------------


def preprocess(config: PreprocessConfig, workspace: Workspace) -> PreprocessSummary:
    """Convert `<input-dir>/{train,questions,lectures}.csv` into the workspace's data/
    (`config.output_dir`'s)."""
    input_dir = Path(config.input_dir)
    estimate = check_memory(input_dir / "train.csv", config)
    questions = read_questions(input_dir / "questions.csv")
    lectures = read_lectures(input_dir / "lectures.csv")
    with atomic_dir(workspace.data.path, owns=DataFolder.WRITES) as tmp:
        data = DataFolder(tmp)
        summary = convert_train(input_dir / "train.csv", data, questions, lectures, config)
        questions.to_parquet(data.questions, index=False)
        lectures.to_parquet(data.lectures, index=False)
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
        data.summary.write_text(json.dumps(record, indent=2) + "\n")
        write_run_record(data.record("preprocess"), record["config"])
        write_data_fingerprint(data)
    workspace.forget()  # what was loaded from the data before is stale
    return summary
