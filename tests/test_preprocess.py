# ruff: noqa: E501 (the bad-input table keeps one case per line)
"""01_preprocess: bad input is refused with a located message and nothing written; real
and demo rows come out with the competition's dtypes and values."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from common.data.arrays import ROW_ARRAYS, TrainArrays
from common.data.preprocess import PreprocessConfig, preprocess
from common.data.question_fields import ANSWER_UNKNOWN
from common.data.schema import (
    LECTURES_DTYPES,
    QUESTIONS_DTYPES,
    TRAIN_COLUMNS,
    TRAIN_DTYPES,
    InputError,
)
from common.workspace import Workspace

# The bad row of most cases: deep in the demo's ~49,000 rows, so far past the first
# pyarrow block at SMALL_BLOCK (test_deep_row_is_in_a_later_block proves it).
DEEP_ROW = 20_000
SMALL_BLOCK = 64 << 10
ROW = "data row {row} (line {line})"  # how InputError names a row


# ---------------------------------------------------------------------------------------
# Corruptions: each takes a valid input dir, breaks one thing, and returns the fields
# ({row}, {value}, ...) that the expected message templates are formatted with.


class TrainLines:
    """train.csv as text lines: lines[0] is the header, lines[n] is data row n."""

    def __init__(self, input_dir: Path):
        self.path = input_dir / "train.csv"
        self.lines = self.path.read_text().split("\n")[:-1]  # the file ends with "\n"
        self.columns = self.lines[0].split(",")

    def get(self, row: int, column: str) -> str:
        return self.lines[row].split(",")[self.columns.index(column)]

    def set(self, row: int, column: str, value: object) -> None:
        fields = self.lines[row].split(",")
        fields[self.columns.index(column)] = str(value)
        self.lines[row] = ",".join(fields)

    def find(self, start: int, where: Callable[[TrainLines, int], bool]) -> int:
        """The first data row >= start that satisfies `where`."""
        return next(row for row in range(start, len(self.lines)) if where(self, row))

    def save(self) -> None:
        self.path.write_text("".join(line + "\n" for line in self.lines))


def any_row(train: TrainLines, row: int) -> bool:
    return True


def question_row(train: TrainLines, row: int) -> bool:
    return train.get(row, "content_type_id") == "0"


def lecture_row(train: TrainLines, row: int) -> bool:
    return train.get(row, "content_type_id") == "1"


def continuing_row(train: TrainLines, row: int) -> bool:
    """A row whose student had a row with an earlier timestamp just before it."""
    return train.get(row, "user_id") == train.get(row - 1, "user_id") and int(
        train.get(row, "timestamp")
    ) > int(train.get(row - 1, "timestamp"))


def set_field(column: str, value: str, where=any_row, start: int = DEEP_ROW):
    def corrupt(input_dir: Path) -> dict:
        train = TrainLines(input_dir)
        row = train.find(start, where)
        train.set(row, column, value)
        train.save()
        return {"row": row}

    return corrupt


def unknown_content_id(where):
    """content_id of a `where` row set to an id in neither questions.csv nor lectures.csv."""

    def corrupt(input_dir: Path) -> dict:
        used = set(pd.read_csv(input_dir / "questions.csv")["question_id"])
        used |= set(pd.read_csv(input_dir / "lectures.csv")["lecture_id"])
        unused = max(set(range(1, np.iinfo(np.int16).max + 1)) - used)
        return set_field("content_id", str(unused), where)(input_dir) | {"value": unused}

    return corrupt


def timestamp_backwards(input_dir: Path) -> dict:
    train = TrainLines(input_dir)
    row = train.find(DEEP_ROW, continuing_row)
    value = int(train.get(row - 1, "timestamp")) - 1
    train.set(row, "timestamp", value)
    train.save()
    return {"row": row, "value": value}


def duplicate_row_id(input_dir: Path) -> dict:
    """Row DEEP_ROW takes the row_id of row 10: row_ids stop increasing, and the two
    copies lie in different blocks."""
    train = TrainLines(input_dir)
    value = train.get(10, "row_id")
    train.set(DEEP_ROW, "row_id", value)
    train.save()
    return {"row": DEEP_ROW, "value": value}


def student_reappears(input_dir: Path) -> dict:
    """The first student's last 3 rows move to the end of the file."""
    train = TrainLines(input_dir)
    user = train.get(1, "user_id")
    end = train.find(1, lambda t, r: t.get(r, "user_id") != user)
    moved = train.lines[end - 3 : end]
    del train.lines[end - 3 : end]
    train.lines += moved
    train.save()
    return {"row": len(train.lines) - 3, "value": user}


def truncate_last_line(input_dir: Path) -> dict:
    train = TrainLines(input_dir)
    row = len(train.lines) - 1
    cut = train.lines[row][: len(train.lines[row]) // 2]
    train.path.write_text("".join(line + "\n" for line in train.lines[:-1]) + cut)
    return {"row": row, "value": cut}


def rename_header_column(old: str, new: str):
    def corrupt(input_dir: Path) -> dict:
        train = TrainLines(input_dir)
        train.lines[0] = ",".join(new if c == old else c for c in train.columns)
        train.save()
        return {}

    return corrupt


def drop_column(column: str):
    def corrupt(input_dir: Path) -> dict:
        train = TrainLines(input_dir)
        index = train.columns.index(column)
        train.lines = [
            ",".join(f for i, f in enumerate(line.split(",")) if i != index) for line in train.lines
        ]
        train.save()
        return {}

    return corrupt


def keep_lines(n: int):
    """Keep the first n lines of train.csv (0: an empty file, 1: the header only)."""

    def corrupt(input_dir: Path) -> dict:
        train = TrainLines(input_dir)
        train.path.write_text("".join(line + "\n" for line in train.lines[:n]))
        return {}

    return corrupt


def set_metadata(file: str, row: int, column: str, value: str):
    def corrupt(input_dir: Path) -> dict:
        frame = pd.read_csv(input_dir / file, dtype=str, keep_default_na=False)
        frame.loc[row - 1, column] = value
        frame.to_csv(input_dir / file, index=False, lineterminator="\n")
        return {"row": row}

    return corrupt


def edit_line(file: str, row: int, change: Callable[[str], str], encoding: str = "utf-8"):
    """Line `row` of `file` (0: the header) rewritten as raw text, saved in `encoding`."""

    def corrupt(input_dir: Path) -> dict:
        path = input_dir / file
        lines = path.read_text().split("\n")
        lines[row] = change(lines[row])
        path.write_bytes("\n".join(lines).encode(encoding))
        return {"row": row}

    return corrupt


def repeat_column(file: str, column: str):
    """`column` repeated as the last column, header and rows."""

    def corrupt(input_dir: Path) -> dict:
        path = input_dir / file
        lines = path.read_text().split("\n")[:-1]
        index = lines[0].split(",").index(column)
        path.write_text("".join(f"{line},{line.split(',')[index]}\n" for line in lines))
        return {}

    return corrupt


def folder_instead(file: str):
    def corrupt(input_dir: Path) -> dict:
        (input_dir / file).unlink()
        (input_dir / file).mkdir()
        return {}

    return corrupt


def gzipped(input_dir: Path) -> dict:
    """train.csv compressed, its name unchanged."""
    path = input_dir / "train.csv"
    path.write_bytes(gzip.compress(path.read_bytes()))
    return {}


def separated_by(mark: str):
    def corrupt(input_dir: Path) -> dict:
        train = TrainLines(input_dir)
        train.lines = [line.replace(",", mark) for line in train.lines]
        train.save()
        return {}

    return corrupt


def latin1_header(input_dir: Path) -> dict:
    """A header column named in Latin-1 (a spreadsheet's export)."""
    path = input_dir / "train.csv"
    head, rest = path.read_bytes().split(b"\n", 1)
    rows = b"\n".join(line + b",x" for line in rest.split(b"\n") if line)
    path.write_bytes(head + b",r\xe9sum\xe9\n" + rows + b"\n")
    return {}


def contradicting_label(input_dir: Path) -> dict:
    """A question row whose label says the opposite of its user_answer against the
    question's correct_answer."""
    train = TrainLines(input_dir)
    correct = pd.read_csv(input_dir / "questions.csv").set_index("question_id")["correct_answer"]
    row = train.find(3, question_row)
    train.set(row, "user_answer", int(correct[int(train.get(row, "content_id"))]))
    train.set(row, "answered_correctly", 0)
    train.save()
    return {"row": row}


@dataclass
class Case:
    name: str
    corrupt: Callable[[Path], dict]
    expected: tuple[str, ...]  # message substrings; templates over corrupt()'s fields + line

    def __repr__(self) -> str:
        return self.name


# One line per case: name, corruption, expected message parts (file, row, column, value).
# fmt: off
BAD_INPUT_CASES = [
    Case("missing column", drop_column("task_container_id"), ("train.csv", "(line 1)", "column 'task_container_id'", "'<missing>'")),
    Case("wrong header", rename_header_column("user_id", "student_id"), ("train.csv", "(line 1)", "column 'user_id'", "'<missing>'")),
    Case("no header", keep_lines(0), ("train.csv", "(line 1)", "a header line")),
    Case("header only", keep_lines(1), ("train.csv", "data row 1 (line 2)", "at least one data row")),
    Case("text in a number", set_field("timestamp", "abc"), ("train.csv", ROW, "column 'timestamp'", "found 'abc'", "int64")),
    Case("text in the first block", set_field("timestamp", "abc", start=7), ("train.csv", ROW, "column 'timestamp'", "found 'abc'")),
    Case("int16 overflow", set_field("content_id", "40000"), ("train.csv", ROW, "column 'content_id'", "found '40000'", "int16 range")),
    Case("content_type_id 2", set_field("content_type_id", "2"), ("train.csv", ROW, "column 'content_type_id'", "found 2", "0 or 1")),
    Case("label 5", set_field("answered_correctly", "5", question_row), ("train.csv", ROW, "column 'answered_correctly'", "found 5", "0 or 1")),
    Case("blank label", set_field("answered_correctly", "", question_row), ("train.csv", ROW, "column 'answered_correctly'", "found '<blank>'")),
    Case("NaN label", set_field("answered_correctly", "NaN", question_row), ("train.csv", ROW, "column 'answered_correctly'", "found '<blank>'", "may not be blank")),
    Case("int32 overflow", set_field("user_id", "3000000000"), ("train.csv", ROW, "column 'user_id'", "found '3000000000'", "int32 range")),
    Case("user_answer 7", set_field("user_answer", "7", question_row), ("train.csv", ROW, "column 'user_answer'", "found 7", "0..3")),
    Case("blank user_id", set_field("user_id", ""), ("train.csv", ROW, "column 'user_id'", "found '<blank>'")),
    Case("negative timestamp", set_field("timestamp", "-5"), ("train.csv", ROW, "column 'timestamp'", "found -5", ">= 0")),
    Case("unknown question", unknown_content_id(question_row), ("train.csv", ROW, "column 'content_id'", "found {value}", "questions.csv")),
    Case("unknown lecture", unknown_content_id(lecture_row), ("train.csv", ROW, "column 'content_id'", "found {value}", "lectures.csv")),
    Case("duplicate row_id", duplicate_row_id, ("train.csv", ROW, "column 'row_id'", "found {value}", "unique row_id")),
    Case("time goes back", timestamp_backwards, ("train.csv", ROW, "column 'timestamp'", "found {value}", "time order")),
    Case("student reappears", student_reappears, ("train.csv", ROW, "column 'user_id'", "found {value}", "together")),
    Case("truncated file", truncate_last_line, ("train.csv", ROW, "found '{value}'", "truncated")),
    Case("blank row_id", set_field("row_id", ""), ("train.csv", ROW, "column 'row_id'", "found '<blank>'", "--assign-row-ids")),
    Case("blank part", set_metadata("questions.csv", 5, "part", ""), ("questions.csv", ROW, "column 'part'", "found ''")),
    Case("part 9", set_metadata("questions.csv", 5, "part", "9"), ("questions.csv", ROW, "column 'part'", "found 9", "1..7")),
    Case("text in tags", set_metadata("questions.csv", 5, "tags", "12 abc"), ("questions.csv", ROW, "column 'tags'", "found '12 abc'", "tag ids separated by spaces")),
    Case("decimal tag", set_metadata("questions.csv", 5, "tags", "1.5"), ("questions.csv", ROW, "column 'tags'", "found '1.5'", "each an integer in 0..32767")),
    Case("commas in tags", set_metadata("questions.csv", 5, "tags", "1,2"), ("questions.csv", ROW, "column 'tags'", "found '1,2'", "tag ids separated by spaces")),
    Case("tag id past int16", set_metadata("questions.csv", 5, "tags", "3 40000"), ("questions.csv", ROW, "column 'tags'", "found '3 40000'", "0..32767")),
    Case("Latin-1 in questions", edit_line("questions.csv", 5, lambda line: line + "\xe9", "latin-1"), ("questions.csv", ROW, "not UTF-8", "save the file as UTF-8")),
    Case("extra field in questions", edit_line("questions.csv", 5, lambda line: line + ",7"), ("questions.csv", ROW, "expected 5 comma-separated fields")),
    Case("questions row cut short", edit_line("questions.csv", 5, lambda line: line.rsplit(",", 1)[0]), ("questions.csv", ROW, "expected 5 comma-separated fields", "truncated")),
    Case("lectures row cut short", edit_line("lectures.csv", 5, lambda line: line.rsplit(",", 1)[0]), ("lectures.csv", ROW, "expected 4 comma-separated fields", "truncated")),
    Case("unclosed quote in questions", edit_line("questions.csv", 5, lambda line: line.replace(",", ',"', 1)), ("questions.csv", ROW, "well-formed CSV", "unexpected end of data")),
    Case("repeated column in questions", repeat_column("questions.csv", "part"), ("questions.csv", "(line 1)", "column 'part'", "'<repeated>'", "each once")),
    Case("repeated column in train", repeat_column("train.csv", "user_id"), ("train.csv", "(line 1)", "column 'user_id'", "'<repeated>'", "each once")),
    Case("train.csv a folder", folder_instead("train.csv"), ("train.csv", "a CSV file; this is a folder")),
    Case("questions.csv a folder", folder_instead("questions.csv"), ("questions.csv", "a CSV file; this is a folder")),
    Case("lectures.csv a folder", folder_instead("lectures.csv"), ("lectures.csv", "a CSV file; this is a folder")),
    Case("infinite elapsed time", set_field("prior_question_elapsed_time", "inf"), ("train.csv", ROW, "column 'prior_question_elapsed_time'", "found inf", "finite")),
    Case("gzip named .csv", gzipped, ("train.csv", "gzip-compressed: decompress it first")),
    Case("semicolons", separated_by(";"), ("train.csv", "(line 1)", "separates them by semicolons")),
    Case("tabs", separated_by("\t"), ("train.csv", "(line 1)", "separates them by tabs")),
    Case("Latin-1 header", latin1_header, ("train.csv", "(line 1)", "not UTF-8", "save the file as UTF-8")),
    Case("label against answer", contradicting_label, ("train.csv", ROW, "column 'answered_correctly'", "found 0", "expected 1: user_answer")),
]
# fmt: on


def assert_nothing_written(output_dir: Path) -> None:
    left = sorted(p.name for p in output_dir.iterdir()) if output_dir.exists() else []
    data = Workspace(output_dir).data.path.name
    assert data not in left, f"{output_dir} has a {data} folder after a failed run"
    assert not [name for name in left if name.startswith(".")], f"temp leftovers: {left}"


@pytest.mark.parametrize("case", BAD_INPUT_CASES, ids=lambda case: case.name)
def test_bad_input_is_refused(case: Case, tmp_path: Path, write_input, run_script) -> None:
    input_dir = write_input(tmp_path / "input")
    fields = case.corrupt(input_dir)
    if "row" in fields:
        fields["line"] = fields["row"] + 1
    expected = [part.format(**fields) for part in case.expected]

    output_dir = tmp_path / "output"
    result = run_script(
        "01_preprocess.py", "--input-dir", input_dir, "--output-dir", output_dir, "--no-progress"
    )
    message = result.stderr.strip()
    assert result.returncode == 2, f"exit {result.returncode}\n{result.stderr}"
    assert message.startswith("error: ") and "Traceback" not in message, message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"
    assert_nothing_written(output_dir)

    # The same input read in small blocks (the bad row in a later block) gives the same
    # message: row numbers and cross-row checks carry over block boundaries.
    small_blocks = tmp_path / "output_small_blocks"
    config = PreprocessConfig(input_dir, small_blocks, block_size=SMALL_BLOCK, progress=False)
    with pytest.raises(InputError) as error:
        preprocess(config, Workspace(small_blocks))
    assert f"error: {error.value}" == message
    assert_nothing_written(small_blocks)


def block_first_rows(path: Path, block_size: int) -> list[int]:
    """1-based data row numbers that open each pyarrow block of a CSV file."""
    reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=block_size))
    first_rows, rows = [], 0
    for batch in reader:
        first_rows.append(rows + 1)
        rows += batch.num_rows
    return first_rows


def test_deep_row_is_in_a_later_block(demo_input: Path) -> None:
    first_rows = block_first_rows(demo_input / "train.csv", SMALL_BLOCK)
    assert sum(first < DEEP_ROW for first in first_rows) >= 10, first_rows[:3]


def first_row_of_block(train: TrainLines, block: int, where) -> int:
    """A row satisfying `where` that opens a pyarrow block (block >= 1) at SMALL_BLOCK."""
    first_rows = block_first_rows(train.path, SMALL_BLOCK)
    return next(row for row in first_rows[block:] if where(train, row))


# Errors on the first row of a block, where the checks depend on the previous block.
@pytest.mark.parametrize("error", ["text", "time goes back", "student reappears"])
def test_errors_on_a_block_boundary(error: str, tmp_path: Path, write_input) -> None:
    input_dir = write_input(tmp_path / "input")
    train = TrainLines(input_dir)
    row = first_row_of_block(train, 5, continuing_row)
    if error == "text":  # same length: block boundaries stay where they were
        value = "x" * len(train.get(row, "timestamp"))
        train.set(row, "timestamp", value)
        column, found = "timestamp", f"'{value}'"
    elif error == "time goes back":
        value = int(train.get(row - 1, "timestamp")) - 1
        train.set(row, "timestamp", value)
        column, found = "timestamp", str(value)
    else:
        value = train.get(1, "user_id")
        train.set(row, "user_id", value)
        column, found = "user_id", value
    train.save()
    if error != "text":  # the edit may shift bytes: the row must still open a block
        assert row in block_first_rows(train.path, SMALL_BLOCK)

    output_dir = tmp_path / "output"
    with pytest.raises(InputError) as raised:
        config = PreprocessConfig(input_dir, output_dir, block_size=SMALL_BLOCK, progress=False)
        preprocess(config, Workspace(output_dir))
    message = str(raised.value)
    assert f"data row {row} (line {row + 1}), column '{column}': found {found}" in message
    assert_nothing_written(output_dir)


def test_failed_run_keeps_the_previous_output(tmp_path: Path, write_input) -> None:
    input_dir = write_input(tmp_path / "input")
    output_dir = tmp_path / "output"
    config = PreprocessConfig(input_dir, output_dir, progress=False)
    preprocess(config, Workspace(output_dir))
    before = {p.relative_to(output_dir): p.read_bytes() for p in output_dir.rglob("*.bin")}
    set_field("content_type_id", "2")(input_dir)
    with pytest.raises(InputError):
        preprocess(config, Workspace(output_dir))
    after = {p.relative_to(output_dir): p.read_bytes() for p in output_dir.rglob("*.bin")}
    assert after == before
    assert sorted(p.name for p in output_dir.iterdir()) == [Workspace(output_dir).data.path.name]


def test_blank_lines_are_skipped(tmp_path: Path, write_input) -> None:
    """A blank line after the header (train.csv) or between rows (questions.csv): the same
    data as without it."""
    input_dir = write_input(tmp_path / "input")
    edit_line("train.csv", 0, lambda header: header + "\n")(input_dir)
    edit_line("questions.csv", 5, lambda line: line + "\n")(input_dir)
    output_dir = tmp_path / "output"
    preprocess(PreprocessConfig(input_dir, output_dir, progress=False), Workspace(output_dir))
    rows = len((input_dir / "train.csv").read_text().splitlines()) - 2  # header, blank
    assert TrainArrays.load(Workspace(output_dir).data).n_rows == rows
    questions = pd.read_csv(input_dir / "questions.csv")  # pandas skips the blank line
    assert len(pd.read_parquet(Workspace(output_dir).data.questions)) == len(questions)


def test_blank_tags_are_accepted(tmp_path: Path, write_input) -> None:
    """A question with no tags (Riiid's question 10033): its tags field blank, or spaces."""
    input_dir = write_input(tmp_path / "input")
    set_metadata("questions.csv", 5, "tags", "")(input_dir)
    set_metadata("questions.csv", 6, "tags", "  ")(input_dir)
    output_dir = tmp_path / "output"
    preprocess(PreprocessConfig(input_dir, output_dir, progress=False), Workspace(output_dir))
    tags = pd.read_parquet(Workspace(output_dir).data.questions)["tags"]
    assert pd.isna(tags.iloc[4]) and tags.iloc[5] == "  ", tags.iloc[4:6].tolist()


# ---------------------------------------------------------------------------------------
# Real rows (../shared/data/riiid_train_sample)


def real_input(shared_data: Path, train_file: str, dest: Path) -> Path:
    dest.mkdir()
    shutil.copyfile(shared_data / "riiid_train_sample" / train_file, dest / "train.csv")
    for name in ("questions.csv", "lectures.csv"):
        shutil.copyfile(shared_data / "riiid_metadata" / name, dest / name)
    return dest


def read_train_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=TRAIN_DTYPES)


def parquet_frame(output_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(Workspace(output_dir).data.train_parquet)


def assert_competition_dtypes(frame: pd.DataFrame) -> None:
    assert list(frame.columns) == TRAIN_COLUMNS
    assert {c: str(t) for c, t in frame.dtypes.items()} == TRAIN_DTYPES


def summary_numbers(stdout: str) -> dict[str, float]:
    """The figures of 01's summary line: rows, students, questions, lectures, share."""
    pairs = re.findall(r"([a-z ]+?) ([\d,.]+)(?:\s|$)", stdout.splitlines()[0])
    return {name.strip(): float(value.replace(",", "")) for name, value in pairs}


def assert_arrays_match(output_dir: Path, csv: pd.DataFrame) -> TrainArrays:
    """The flat arrays and the student index agree with the CSV rows (file order)."""
    data = Workspace(output_dir).data
    arrays = TrainArrays.load(data, mmap=False)
    manifest = json.loads(data.arrays_manifest.read_text())
    assert manifest["n_rows"] == len(csv) == arrays.n_rows
    assert manifest["columns"] == ROW_ARRAYS
    users = pd.unique(csv["user_id"])
    assert manifest["n_students"] == len(users) == arrays.n_students
    assert arrays.users.tolist() == users.tolist()
    assert np.diff(arrays.offsets).tolist() == [int((csv["user_id"] == u).sum()) for u in users]
    assert arrays.offsets[0] == 0 and arrays.offsets[-1] == len(csv)
    assert np.array_equal(arrays.users[arrays.user_of_row()], csv["user_id"].to_numpy())
    for name, dtype in ROW_ARRAYS.items():
        assert arrays[name].dtype == np.dtype(dtype), name
    for name in ("timestamp", "content_id", "content_type_id", "task_container_id"):
        assert np.array_equal(arrays[name], csv[name].to_numpy()), name
    elapsed = csv["prior_question_elapsed_time"].to_numpy()
    assert np.array_equal(arrays["prior_question_elapsed_time"], elapsed, equal_nan=True)
    explanation = csv["prior_question_had_explanation"]
    expected = np.where(explanation.isna(), -1, explanation.fillna(False).astype(int))
    assert np.array_equal(arrays["prior_question_had_explanation"], expected)
    return arrays


def test_real_complete_histories(shared_data: Path, tmp_path: Path, run_script) -> None:
    """5 students' complete histories, every field present (PROVENANCE: 20,632 rows,
    171 lecture rows)."""
    input_dir = real_input(shared_data, "train_strict_format_5users.csv", tmp_path / "input")
    output_dir = tmp_path / "output"
    result = run_script(
        "01_preprocess.py", "--input-dir", input_dir, "--output-dir", output_dir, "--no-progress"
    )
    assert result.returncode == 0, result.stderr
    csv = read_train_csv(input_dir / "train.csv")
    is_question = csv["content_type_id"] == 0
    share_correct = csv.loc[is_question, "answered_correctly"].mean()
    assert summary_numbers(result.stdout) == {
        "rows": 20_632,
        "students": 5,
        "questions": 20_632 - 171,
        "lectures": 171,
        "share correct": round(share_correct, 4),
    }
    assert "note:" not in result.stdout  # nothing blank, nothing filled

    frame = parquet_frame(output_dir)
    assert_competition_dtypes(frame)
    pd.testing.assert_frame_equal(frame, csv, check_exact=True)

    arrays = assert_arrays_match(output_dir, csv)
    assert arrays.users.tolist() == [138650, 475020, 1283420, 7171715, 2147481750]
    assert np.diff(arrays.offsets).tolist() == [1105, 1082, 7569, 10826, 50]
    for name in ("row_id", "user_answer", "answered_correctly"):
        assert np.array_equal(arrays[name], csv[name].to_numpy()), name

    data = Workspace(output_dir).data
    summary = json.loads(data.summary.read_text())
    assert summary["summary"]["rows"] == 20_632
    assert summary["summary"]["correct"] == int(csv.loc[is_question, "answered_correctly"].sum())
    assert summary["summary"]["blank_user_answers"] == 0
    questions = pd.read_parquet(data.questions)
    lectures = pd.read_parquet(data.lectures)
    assert (len(questions), len(lectures)) == (13_523, 418)
    for frame, dtypes in ((questions, QUESTIONS_DTYPES), (lectures, LECTURES_DTYPES)):
        for column, dtype in dtypes.items():
            if dtype != "string":
                assert str(frame[column].dtype) == dtype, column


def test_real_prefixes_with_blank_fields(shared_data: Path, tmp_path: Path, run_script) -> None:
    """420 history prefixes: row_id blank on most rows (numbered with --assign-row-ids),
    user_answer blank on many, answered_correctly blank on some lecture rows."""
    input_dir = real_input(shared_data, "train_prefix_histories_420users.csv", tmp_path / "input")
    output_dir = tmp_path / "output"
    args = ("--input-dir", input_dir, "--output-dir", output_dir, "--no-progress")

    refused = run_script("01_preprocess.py", *args)
    assert refused.returncode == 2, refused.stderr
    row_ids = pd.read_csv(input_dir / "train.csv", usecols=["row_id"], dtype="Int64")["row_id"]
    first_blank = int(np.argmax(row_ids.isna())) + 1
    assert (
        f"train.csv, data row {first_blank} (line {first_blank + 1}), column 'row_id': "
        "found '<blank>'; expected a row_id on every row (pass --assign-row-ids"
    ) in refused.stderr
    assert_nothing_written(output_dir)

    result = run_script("01_preprocess.py", *args, "--assign-row-ids")
    assert result.returncode == 0, result.stderr
    nullable = {"row_id": "Int64", "user_answer": "Int8", "answered_correctly": "Int8"}
    csv = pd.read_csv(input_dir / "train.csv", dtype=TRAIN_DTYPES | nullable)
    is_question = csv["content_type_id"] == 0
    blank_answers = int((is_question & csv["user_answer"].isna()).sum())
    blank_lecture_labels = int((~is_question & csv["answered_correctly"].isna()).sum())
    assert (len(csv), csv["user_id"].nunique()) == (75_320, 420)
    assert blank_answers > 0 and blank_lecture_labels > 0
    numbers = summary_numbers(result.stdout)
    assert (numbers["rows"], numbers["students"]) == (75_320, 420)
    assert f"note: {blank_answers:,} question rows have a blank user_answer" in result.stdout
    assert (
        f"note: {blank_lecture_labels:,} lecture rows had a blank answered_correctly; set to -1"
        in result.stdout
    )

    frame = parquet_frame(output_dir)
    assert frame["row_id"].tolist() == list(range(len(csv)))
    parquet_answers = pq.read_table(Workspace(output_dir).data.train_parquet)["user_answer"]
    assert parquet_answers.type == "int8" and parquet_answers.null_count == blank_answers
    assert frame["user_answer"][is_question].isna().sum() == blank_answers
    assert (frame["user_answer"][~is_question] == -1).all()  # lectures: -1, blank or not
    assert (frame["answered_correctly"][~is_question] == -1).all()
    labels = frame["answered_correctly"][is_question]
    assert (
        labels.isin([0, 1]).all()
        and labels.tolist() == csv["answered_correctly"][is_question].astype(int).tolist()
    )
    assert str(frame["prior_question_had_explanation"].dtype) == "boolean"

    arrays = assert_arrays_match(output_dir, csv)
    answers = arrays["user_answer"]
    assert (answers[(is_question & csv["user_answer"].isna()).to_numpy()] == ANSWER_UNKNOWN).all()
    assert (answers[~is_question.to_numpy()] == -1).all()
    assert np.array_equal(arrays["row_id"], np.arange(len(csv)))


# ---------------------------------------------------------------------------------------
# Demo rows


def test_demo_parquet_equals_csv(demo_input: Path, demo_output: Path) -> None:
    csv = read_train_csv(demo_input / "train.csv")
    frame = parquet_frame(demo_output)
    assert_competition_dtypes(frame)
    pd.testing.assert_frame_equal(frame, csv, check_exact=True)
    arrays = assert_arrays_match(demo_output, csv)
    for name in ("row_id", "user_answer", "answered_correctly"):
        assert np.array_equal(arrays[name], csv[name].to_numpy()), name
    for name, dtypes in (("questions", QUESTIONS_DTYPES), ("lectures", LECTURES_DTYPES)):
        written = pd.read_parquet(getattr(Workspace(demo_output).data, name))
        read = pd.read_csv(demo_input / f"{name}.csv", dtype=dtypes)
        pd.testing.assert_frame_equal(written, read, check_dtype=False, check_exact=True)
        for column, dtype in dtypes.items():
            if dtype != "string":
                assert str(written[column].dtype) == dtype, f"{name}.{column}"


def test_a_utf8_byte_order_mark_is_read_as_pandas_reads_it(tmp_path: Path, write_input):
    """A UTF-8 BOM before the header (as some editors write one): the same data as
    without it, in train.csv and in questions.csv."""
    plain = write_input(tmp_path / "plain")
    marked = write_input(tmp_path / "marked")
    for name in ("train.csv", "questions.csv"):
        path = marked / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    outputs = {}
    for name, folder in (("plain", plain), ("marked", marked)):
        outputs[name] = tmp_path / f"out_{name}"
        preprocess(
            PreprocessConfig(folder, outputs[name], progress=False), Workspace(outputs[name])
        )
    a = TrainArrays.load(Workspace(outputs["plain"]).data)
    b = TrainArrays.load(Workspace(outputs["marked"]).data)
    assert a.columns.keys() == b.columns.keys()
    for column in a.columns:
        assert np.array_equal(a[column], b[column], equal_nan=a[column].dtype.kind == "f"), column
    questions = [pd.read_parquet(Workspace(outputs[n]).data.questions) for n in outputs]
    pd.testing.assert_frame_equal(*questions)
