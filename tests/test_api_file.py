"""The competition's test groups checked before any state reads them: a --test-csv file
whole, before 04 does any work (common.data.api_file), and each group the API serves
(common.data.api_group.GroupChecker, run by common.stream.api_loop for the emulator, the
stand-in and the real API alike). Every refusal is one line naming the file (or group),
the line (or row) and the column."""

from __future__ import annotations

import csv
import gzip
import io
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.data.api_file import ApiFileError, check_api_file
from common.data.api_group import GroupChecker, GroupError, read_group
from common.stream.api_loop import stream_loop
from common.stream.trial import LAUNCHER
from tests.helpers import SHARED_DATA, run_numbered_script, shared_file

EXAMPLE = ("riiid_example_test", "example_test_reconstructed.csv")


@pytest.fixture
def example(tmp_path):
    """A copy of the real example test file (4 groups, 104 question rows)."""
    path = tmp_path / "example_test.csv"
    shutil.copyfile(shared_file(*EXAMPLE), path)
    return path


def lines_of(path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def edit_line(path, line: int, column: str, value: str) -> None:
    """Set `column` of file line `line` (1-based; one record per line, as in the example)."""
    records = list(csv.reader(io.StringIO(path.read_text())))
    records[line - 1][records[0].index(column)] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(records)
    path.write_text(out.getvalue())


def test_the_real_example_passes(example):
    assert check_api_file(example) == {"rows": 104, "groups": 4, "question_rows": 104}
    # as pandas reads it: a byte order mark, Windows line ends, blank lines
    text = example.read_text()
    example.write_text("\ufeff" + text.replace("\n", "\r\n") + "\r\n\n")
    assert check_api_file(example) == {"rows": 104, "groups": 4, "question_rows": 104}


def damage(path, how: str) -> None:
    text = path.read_text()
    lines = lines_of(path)
    if how == "a folder":
        path.unlink()
        path.mkdir()
    elif how == "missing":
        path.unlink()
    elif how == "empty":
        path.write_text("")
    elif how == "header only":
        path.write_text(lines[0])
    elif how == "blank lines only":
        path.write_text("\n\n")
    elif how == "an unclosed quote":
        path.write_text(lines[0] + '0,"1,2\n')
    elif how == "no content_id column":
        frame = pd.read_csv(path).drop(columns="content_id")
        frame.to_csv(path, index=False)
    elif how == "text in user_id":
        edit_line(path, 5, "user_id", "abc")
    elif how == "blank timestamp":
        edit_line(path, 5, "timestamp", "")
    elif how == "gzip":
        path.write_bytes(gzip.compress(text.encode()))
    elif how == "semicolons":
        path.write_text(text.replace(",", ";"))
    elif how == "train.csv":
        shutil.copyfile(SHARED_DATA / "riiid_train_sample" / "train_strict_format_5users.csv", path)
    elif how == "list not parsed":
        edit_line(path, 20, "prior_group_answers_correct", "[1 0")
    elif how == "list one short":
        records = list(csv.reader(io.StringIO(text)))
        edit_line(path, 20, "prior_group_answers_correct", str(eval(records[19][9])[1:]))
    elif how == "duplicated row_id":
        edit_line(path, 7, "row_id", lines[2].split(",")[1])
    elif how == "truncated last line":
        path.write_text(text[: len(text) - 12])
    elif how == "content type 2":
        edit_line(path, 9, "content_type_id", "2")
    elif how == "groups out of order":
        edit_line(path, 3, "group_num", "2")
    elif how == "an extra field":
        lines[10] = lines[10].rstrip("\n") + ",7\n"
        path.write_text("".join(lines))
    elif how == "infinite elapsed time":
        edit_line(path, 8, "prior_question_elapsed_time", "inf")
    elif how == "explanation not a flag":
        edit_line(path, 6, "prior_question_had_explanation", "maybe")
    elif how == "a list before the first group":
        edit_line(path, 2, "prior_group_answers_correct", "[1]")
    else:
        raise AssertionError(how)


# (damage, what the one-line message must name besides the file)
CASES = [
    ("a folder", "a folder"),
    ("missing", "expected the file to exist"),
    ("empty", "empty"),
    ("header only", "no rows"),
    ("blank lines only", "blank lines only"),
    ("an unclosed quote", "line 2"),
    ("no content_id column", "line 1: no column 'content_id'"),
    ("text in user_id", "line 5, column 'user_id': found 'abc'"),
    ("blank timestamp", "line 5, column 'timestamp': found a blank"),
    ("gzip", "gzip"),
    ("semicolons", "separates them by semicolons"),
    ("train.csv", "as train.csv has"),
    ("list not parsed", "line 20, column 'prior_group_answers_correct': found '[1 0'"),
    ("list one short", "line 20, column 'prior_group_answers_correct': 17 entries"),
    ("duplicated row_id", "line 7, column 'row_id'"),
    ("truncated last line", "line 105: incomplete"),
    ("content type 2", "line 9, column 'content_type_id': found 2"),
    ("groups out of order", "line 4, column 'group_num': found 0 after 2"),
    ("an extra field", "line 11: 12 fields; expected 11"),
    ("explanation not a flag", "line 6, column 'prior_question_had_explanation'"),
    ("infinite elapsed time", "line 8, column 'prior_question_elapsed_time': found inf"),
    ("a list before the first group", "line 2, column 'prior_group_answers_correct': 1 entries"),
]


@pytest.mark.parametrize(("how", "named"), CASES, ids=[c[0] for c in CASES])
def test_a_damaged_test_file_is_refused_naming_file_line_and_column(example, how, named):
    damage(example, how)
    with pytest.raises((ApiFileError, GroupError)) as refused:
        check_api_file(example)
    message = str(refused.value)
    assert len(message.splitlines()) == 1, message
    assert str(example) in message and named in message, message


def test_04_refuses_a_bad_test_file_before_any_work(example, tmp_path):
    """The check runs first: on an output folder that holds nothing, the file is what 04
    names, and nothing is written."""
    damage(example, "content type 2")
    out = tmp_path / "out"
    done = run_numbered_script("04_infer.py", "--output-dir", out, "--test-csv", example)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{example}, line 9, column 'content_type_id'" in done.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--fold", "all"), "--test-csv tries the export of one model"),
        (("--fold", "0,1"), "--test-csv tries the export of one model"),
        (("--full", "--fold", "1"), "--full exports the full-data model"),
    ],
)
def test_04_refuses_conflicting_flags(example, tmp_path, flags, named):
    extra = () if "--full" in flags else ("--test-csv", example)
    done = run_numbered_script("04_infer.py", "--output-dir", tmp_path / "out", *flags, *extra)
    assert done.returncode == 2 and named in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


class ListEnv:
    """An API stand-in serving the given frames (indexed by group_num) in turn."""

    def __init__(self, frames):
        self.frames = frames

    def iter_test(self):
        for frame in self.frames:
            yield frame, None

    def predict(self, predictions):
        pass


class CountingState:
    def __init__(self):
        self.groups = 0

    def predict(self, test_df):
        self.groups += 1
        return [0.5] * int((test_df["content_type_id"] == 0).sum())

    def time_split(self):
        return {"build_seconds": 0.0}


def test_the_api_loop_checks_every_group_before_a_state_reads_it():
    frame = pd.read_csv(shared_file(*EXAMPLE))
    groups = [g.set_index("group_num") for _, g in frame.groupby("group_num", sort=False)]
    state = CountingState()
    stream_loop(ListEnv(groups), state, progress=False)
    assert state.groups == 4
    groups[2] = groups[2].copy()
    groups[2].iloc[3, groups[2].columns.get_loc("content_type_id")] = 2
    state = CountingState()
    with pytest.raises(GroupError, match=r"group_num 2, row 3, column 'content_type_id'"):
        stream_loop(ListEnv(groups), state, progress=False)
    assert state.groups == 2  # the bad group was never predicted


def test_a_checker_refuses_outcomes_that_disagree_with_the_previous_rows():
    """A lecture row's outcomes are -1, a question's 0/1 (correct) and 0-3 (response)."""
    frame = pd.read_csv(shared_file(*EXAMPLE))
    first, second = (g.set_index("group_num") for _, g in list(frame.groupby("group_num"))[:2])
    first = first.copy()
    first.iloc[4, first.columns.get_loc("content_type_id")] = 1  # row 4 now a lecture

    def checked(correct: list[int], responses: list[int]) -> None:
        group = second.copy()
        group.iloc[0, group.columns.get_loc("prior_group_answers_correct")] = str(correct)
        group.iloc[0, group.columns.get_loc("prior_group_responses")] = str(responses)
        checker = GroupChecker()
        checker.check(first)
        checker.check(group)

    correct, responses = [1] * len(first), [2] * len(first)
    correct[4] = responses[4] = -1
    checked(correct, responses)  # as the API serves them
    for column, bad, expected in (
        ("prior_group_answers_correct", 1, r"-1 \(a lecture row\)"),
        ("prior_group_responses", 0, r"-1 \(a lecture row\)"),
    ):
        lists = {
            "prior_group_answers_correct": list(correct),
            "prior_group_responses": list(responses),
        }
        lists[column][4] = bad
        with pytest.raises(GroupError, match=rf"'{column}': entry 4 is {bad}; expected {expected}"):
            checked(*lists.values())
    lists = [list(correct), list(responses)]
    lists[1][0] = 4  # a question row answered with a fifth choice
    with pytest.raises(GroupError, match=r"entry 0 is 4; expected one of \[0, 1, 2, 3\]"):
        checked(*lists)


def test_ctrl_c_in_the_trial_ends_the_child_without_a_traceback(tmp_path):
    (tmp_path / "cell.py").write_text("raise KeyboardInterrupt\n")
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    command = [sys.executable, tmp_path / "launcher.py", tmp_path / "cell.py", tmp_path]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr


NASTY = ["", "abc", "-1", "2", "1.5", "1e99", "[", "[1, 2]", "True", "nan", ";", '"', "0x1"]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_any_damage_to_a_test_file_is_accepted_or_refused_in_one_line(data):
    """Generated damage (a field set to a nasty value, a line dropped, doubled or swapped,
    the text cut short): check_api_file returns, or refuses in one line naming the file;
    never another exception. A file it accepts, the states read group by group."""
    lines = shared_file(*EXAMPLE).read_text().splitlines(keepends=True)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(lines) - 1))
        op = data.draw(st.sampled_from(["field", "drop", "double", "swap", "cut"]))
        if op == "field":
            records = list(csv.reader(io.StringIO(lines[i])))
            fields = records[0] if records else [""]
            fields[data.draw(st.integers(0, len(fields) - 1))] = data.draw(st.sampled_from(NASTY))
            out = io.StringIO()
            csv.writer(out, lineterminator="\n").writerow(fields)
            lines[i] = out.getvalue()
        elif op == "drop" and len(lines) > 1:
            del lines[i]
        elif op == "double":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "cut":
            lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])))]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "test.csv"
        path.write_text("".join(lines))
        try:
            summary = check_api_file(path)
        except (ApiFileError, GroupError) as error:
            message = str(error)
            assert len(message.splitlines()) == 1 and str(path) in message, message
            return
        frame = pd.read_csv(path)
        for _, group in frame.groupby("group_num", sort=False):
            read_group(group.set_index("group_num"))
        assert summary["rows"] == len(frame)
