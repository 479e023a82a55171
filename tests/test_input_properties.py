"""01_preprocess on generated bad input (Hypothesis). A small valid demo's train.csv,
questions.csv or lectures.csv is damaged (a column dropped, renamed, repeated or moved;
letters, fractions, huge or negative numbers, blanks or any text in a field; a field added
or removed; a line repeated, deleted, swapped or cut; the file empty, header only, random
bytes, gzip, semicolons, cut short, a folder or missing; CRLF, a BOM) and preprocessed in
this process, as 01_preprocess.py does it. The property: preprocessing either succeeds or
raises a UserError whose message is one line naming a damaged file, never another
exception, and a refusal leaves nothing behind (no data/, no temporary file, no output
folder once 01's cleanup of empty folders has run). Damage that is certainly wrong (a
missing column, a repeated key, letters in a number) must be refused; damage that keeps
the data valid (columns reordered, CRLF, a BOM) must be accepted.
"""

from __future__ import annotations

import functools
import gzip
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from common.data.preprocess import PreprocessConfig, preprocess
from common.data.schema import LECTURES_DTYPES, QUESTIONS_DTYPES, TAG_ID_MAX, TRAIN_DTYPES
from common.errors import UserError
from common.files import no_new_empty_folders
from common.inputs.demo import make_demo
from common.workspace import Workspace
from tests.helpers import tiny_demo_config

DTYPES = {
    "train.csv": TRAIN_DTYPES,
    "questions.csv": QUESTIONS_DTYPES,
    "lectures.csv": LECTURES_DTYPES,
}
MISSING = b"<no file>"  # a damaged file's content standing for no file at all
FOLDER = b"<folder>"  # ... and for a folder where the file belongs
BOM = b"\xef\xbb\xbf"
# Letters no CSV reader takes for a number, a boolean or a blank (nan, inf, true, null...).
LETTERS = "bcdghjkmopvwxz"

# The same examples on every run and in CI, and no example database in the checkout.
PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None)


@functools.cache
def valid_input() -> dict[str, bytes]:
    """The three CSV files of a 4-student demo (106 train rows, 6 of them lectures)."""
    with tempfile.TemporaryDirectory() as folder:
        make_demo(tiny_demo_config(users=4, questions=35, seed=0, max_events=30), folder)
        files = {name: (Path(folder) / name).read_bytes() for name in DTYPES}
    rows = files["train.csv"].decode().splitlines()[1:]
    assert any(row.split(",")[4] == "1" for row in rows), "the demo needs lecture rows"
    return files


@dataclass(frozen=True)
class Damage:
    """One change to one input file. expect: "refuse" (certainly bad input), "accept"
    (the data stay valid) or "either". Text edits (stage 0) apply before byte-level
    changes (stage 1), which may leave the file no longer text. whole: the change
    replaces the file whatever it held (a refusal no other change can undo)."""

    file: str
    what: str
    change: Callable[[bytes], bytes]
    expect: str = "either"
    stage: int = 0
    whole: bool = False

    def __repr__(self) -> str:
        return f"<{self.file}: {self.what}, {self.expect}>"


# ---------------------------------------------------------------------------------------
# Text edits: rows[0] is the header, rows[1:] the data rows, each a list of fields.


def on_rows(edit: Callable[[list[list[str]]], None]) -> Callable[[bytes], bytes]:
    def change(content: bytes) -> bytes:
        rows = [line.split(",") for line in content.decode().split("\n")[:-1]]
        if len(rows) > 1:  # a file an earlier change left without data rows stays as it is
            edit(rows)
        return "".join(",".join(fields) + "\n" for fields in rows).encode()

    return change


def data_row(rows: list[list[str]], drawn: int) -> int:
    """A data row's index in rows, from a drawn number (earlier edits change the count)."""
    return 1 + drawn % (len(rows) - 1)


def n_columns(file: str) -> int:
    return len(DTYPES[file])


def drop_column(draw, file: str) -> Damage:
    column = draw(st.integers(0, n_columns(file) - 1))

    def edit(rows):
        for fields in rows:
            fields.pop(min(column, len(fields) - 1))

    return Damage(file, f"column {column} dropped", on_rows(edit), "refuse")


def rename_column(draw, file: str) -> Damage:
    column = draw(st.sampled_from(list(DTYPES[file])))
    name = draw(st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12))
    name = name if name not in DTYPES[file] else f"{name}_2"

    def edit(rows):
        rows[0] = [name if field == column else field for field in rows[0]]

    return Damage(file, f"column {column} renamed {name!r}", on_rows(edit), "refuse")


def repeat_column(draw, file: str) -> Damage:
    column = draw(st.integers(0, n_columns(file) - 1))

    def edit(rows):
        for fields in rows:
            fields.append(fields[min(column, len(fields) - 1)])

    return Damage(file, f"column {column} repeated at the end", on_rows(edit), "refuse")


def reorder_columns(draw, file: str) -> Damage:
    order = draw(st.permutations(range(n_columns(file))))

    def edit(rows):
        if all(len(fields) == len(order) for fields in rows):
            rows[:] = [[fields[i] for i in order] for fields in rows]

    return Damage(file, f"columns in order {order}", on_rows(edit), "accept")


def field_value(draw, dtype: str, column: str) -> tuple[str, str]:
    """(kind, text) of a field's new value."""
    limit = np.iinfo(dtype).max if dtype.startswith("int") else 1
    limit = TAG_ID_MAX if column == "tags" else limit
    return draw(
        st.one_of(
            st.tuples(st.just("letters"), st.text(LETTERS, min_size=1, max_size=8)),
            st.tuples(st.just("fraction"), st.integers(0, 99).map(lambda n: f"{n}.5")),
            st.tuples(st.just("too large"), st.integers(limit + 1, 10**30).map(str)),
            st.tuples(st.just("negative"), st.integers(-(10**6), -1).map(str)),
            st.tuples(st.just("integer"), st.integers(-(2**70), 2**70).map(str)),
            st.tuples(st.just("float"), st.floats().map(repr)),
            st.tuples(st.just("infinite"), st.sampled_from(["inf", "-Infinity", "1e39"])),
            st.tuples(st.just("blank"), st.sampled_from(["", " ", "NaN", "NA", "null"])),
            st.tuples(st.just("any text"), st.text(max_size=12)),
        )
    )


def certainly_refused(file: str, column: str, kind: str) -> bool:
    """Letters or an infinity in a number, boolean or tags field; a fraction or a value
    past the range of an integer, boolean or tags field."""
    dtype = DTYPES[file][column]
    if dtype == "string" and column != "tags":
        return False
    if dtype == "float32":
        return kind in ("letters", "infinite")
    return kind in ("letters", "fraction", "too large", "infinite")


def set_field(draw, file: str) -> Damage:
    row = draw(st.integers(0, 10_000))
    column = draw(st.sampled_from(list(DTYPES[file])))
    kind, value = field_value(draw, DTYPES[file][column], column)

    def edit(rows):
        if column in rows[0]:
            fields = rows[data_row(rows, row)]
            fields[min(rows[0].index(column), len(fields) - 1)] = value

    expect = "refuse" if certainly_refused(file, column, kind) else "either"
    return Damage(file, f"a row's {column} = {value!r} ({kind})", on_rows(edit), expect)


def add_field(draw, file: str) -> Damage:
    row = draw(st.integers(0, 10_000))
    value = draw(st.sampled_from(["", "0", "7", "x"]))

    def edit(rows):
        rows[data_row(rows, row)].append(value)

    return Damage(file, f"a row with an extra field {value!r}", on_rows(edit), "refuse")


def remove_field(draw, file: str) -> Damage:
    row = draw(st.integers(0, 10_000))
    column = draw(st.integers(0, n_columns(file) - 1))

    def edit(rows):
        fields = rows[data_row(rows, row)]
        fields.pop(min(column, len(fields) - 1))

    return Damage(file, f"a row without its field {column}", on_rows(edit), "refuse")


def repeat_row(draw, file: str) -> Damage:
    """A data row twice in a row: its row_id, question_id or lecture_id repeated."""
    row = draw(st.integers(0, 10_000))

    def edit(rows):
        i = data_row(rows, row)
        rows.insert(i, list(rows[i]))

    return Damage(file, "a row repeated", on_rows(edit), "refuse")


def copy_key(draw, file: str) -> Damage:
    """A row takes another row's row_id, question_id or lecture_id."""
    source, target = draw(st.integers(0, 10_000)), draw(st.integers(0, 10_000))
    key = next(iter(DTYPES[file]))

    def edit(rows):
        i, j = data_row(rows, source), data_row(rows, target)
        j = j if j != i else data_row(rows, target + 1)
        column = rows[0].index(key) if key in rows[0] else len(rows[0])
        if i != j and column < min(len(rows[i]), len(rows[j])):
            rows[j][column] = rows[i][column]

    return Damage(file, f"a row's {key} copied to another", on_rows(edit), "refuse")


def delete_row(draw, file: str) -> Damage:
    row = draw(st.integers(0, 10_000))

    def edit(rows):
        del rows[data_row(rows, row)]

    return Damage(file, "a row deleted", on_rows(edit))


def swap_rows(draw, file: str) -> Damage:
    first, second = draw(st.integers(0, 10_000)), draw(st.integers(0, 10_000))

    def edit(rows):
        i, j = data_row(rows, first), data_row(rows, second)
        rows[i], rows[j] = rows[j], rows[i]

    return Damage(file, "two rows swapped", on_rows(edit))


def blank_line(draw, file: str) -> Damage:
    row = draw(st.one_of(st.just(0), st.integers(0, 10_000)))  # 0: after the header

    def edit(rows):
        rows.insert(data_row(rows, row), [""])

    return Damage(file, "a blank line", on_rows(edit), "accept")


def cut_row(draw, file: str) -> Damage:
    """A row cut short, its line ending kept (remove_field: a field fewer, certainly)."""
    row = draw(st.integers(0, 10_000))
    keep = draw(st.floats(0, 1))

    def edit(rows):
        i = data_row(rows, row)
        line = ",".join(rows[i])
        rows[i] = line[: int(keep * len(line))].split(",")

    return Damage(file, f"a row cut at {keep:.2f} of its length", on_rows(edit))


# ---------------------------------------------------------------------------------------
# Byte-level changes (stage 1)


def whole_file(what: str, change: Callable[[bytes], bytes], expect: str, whole=False):
    def damage(draw, file: str) -> Damage:
        return Damage(file, what, change, expect, stage=1, whole=whole)

    return damage


def header_only(content: bytes) -> bytes:
    return content.split(b"\n", 1)[0] + b"\n"


def crlf(content: bytes) -> bytes:
    return content.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def random_bytes(draw, file: str) -> Damage:
    data = draw(st.binary(max_size=300))
    return Damage(file, f"{len(data)} random bytes", lambda c: data, "refuse", 1, whole=True)


def truncated_file(draw, file: str) -> Damage:
    """The file cut at a byte (a copy stopped part way): refused when its last line lost a
    comma or the header lost its line ending."""
    keep = draw(st.integers(1, len(valid_input()[file]) - 1))
    content = valid_input()[file][:keep]
    last = content.split(b"\n")[-1]
    short = b"\n" not in content or (last and last.count(b",") < n_columns(file) - 1)
    expect = "refuse" if short else "either"
    return Damage(file, f"cut after byte {keep}", lambda c: c[:keep], expect, stage=1)


def non_utf8_byte(draw, file: str) -> Damage:
    at = draw(st.integers(0, len(valid_input()[file]) - 1))
    byte = bytes([draw(st.integers(0x80, 0xFF))])
    return Damage(file, f"byte {byte!r} at {at}", lambda c: c[:at] + byte + c[at:], stage=1)


DAMAGES = [
    drop_column,
    rename_column,
    repeat_column,
    reorder_columns,
    set_field,
    set_field,  # twice: the widest family
    add_field,
    remove_field,
    repeat_row,
    copy_key,
    delete_row,
    swap_rows,
    blank_line,
    cut_row,
    random_bytes,
    truncated_file,
    non_utf8_byte,
    whole_file("empty", lambda c: b"", "refuse", whole=True),
    whole_file("header only", header_only, "refuse"),
    whole_file("gzip-compressed", gzip.compress, "refuse", whole=True),
    whole_file("semicolons", lambda c: c.replace(b",", b";"), "refuse"),
    whole_file("tabs", lambda c: c.replace(b",", b"\t"), "refuse"),
    whole_file("a folder", lambda c: FOLDER, "refuse", whole=True),
    whole_file("missing", lambda c: MISSING, "refuse", whole=True),
    whole_file("CRLF line endings", crlf, "accept"),
    whole_file("a BOM", lambda c: c if c.startswith(BOM) else BOM + c, "accept"),
    whole_file("no final line ending", lambda c: c.rstrip(b"\r\n"), "accept"),
]


@st.composite
def damage(draw) -> Damage:
    file = draw(st.sampled_from(list(DTYPES)))
    return draw(st.sampled_from(DAMAGES))(draw, file)


def damaged_input(folder: Path, damages: list[Damage]) -> None:
    """The valid input, its files changed by `damages`, written into `folder`."""
    files = dict(valid_input())
    for change in sorted(damages, key=lambda d: d.stage):
        if files[change.file] not in (MISSING, FOLDER):
            files[change.file] = change.change(files[change.file])
    folder.mkdir()
    for name, content in files.items():
        if content == FOLDER:
            (folder / name).mkdir()
        elif content != MISSING:
            (folder / name).write_bytes(content)


def expected_outcome(damages: list[Damage]) -> str:
    """What 01 must do with the input: "refuse", "accept" or "either". Two changes to
    one file may undo each other (a column repeated, then the original dropped), so two
    refusals add up to one only in different files or where one replaces the file."""
    if any(d.whole for d in damages):
        return "refuse"
    if all(d.expect == "accept" for d in damages):
        return "accept"
    refused = [d for d in damages if d.expect == "refuse"]
    if len(refused) == len(damages) and len({d.file for d in refused}) == len(refused):
        return "refuse"
    return "either"


# ---------------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(damages=st.lists(damage(), min_size=1, max_size=2))
def test_bad_input_is_refused_in_one_line_or_accepted(damages: list[Damage]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        input_dir, output_dir = Path(tmp) / "input", Path(tmp) / "output"
        damaged_input(input_dir, damages)
        expected = expected_outcome(damages)
        event(f"expected: {expected}")
        config = PreprocessConfig(input_dir, output_dir, progress=False)
        try:
            with no_new_empty_folders(output_dir):  # as 01_preprocess.py's cli.guarded
                preprocess(config, Workspace(output_dir))
        except UserError as error:
            message = str(error)
            note(f"refused: {message}")
            event("refused")
            assert expected != "accept", f"valid input refused: {message}"
            assert len(message.splitlines()) == 1, f"not one line: {message!r}"
            named = [d.file for d in damages if d.file in message]
            assert named, f"names no damaged file ({[d.file for d in damages]}): {message}"
            assert not output_dir.exists(), f"a refused run left {list(output_dir.rglob('*'))}"
        else:
            assert expected != "refuse", f"bad input accepted: {damages}"
            assert Workspace(output_dir).data.arrays_manifest.exists()
            event("accepted")
