"""common/inputs/kt_datasets.py and 00_convert_kt_dataset.py: hand-written students in the line
formats and pyKT's CSV, malformed inputs, the check that no row sees its own attempt's
answer, and (when ../shared/data is present) the real ASSISTments files."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from common.data.schema import QUESTIONS_DTYPES, TRAIN_COLUMNS, TRAIN_DTYPES, InputError
from common.errors import UserError
from common.inputs.kt_datasets import (
    INT16_MAX,
    MULTI_SKILL_MODES,
    PRESETS,
    ConversionConfig,
    attempt_leaks,
    convert,
    convert_dataset,
    preset_config,
    response_starts,
)
from common.inputs.kt_outputs import OUTPUT_FILES
from common.inputs.kt_readers import LineInputError
from tests.helpers import run_numbered_script

REPO_ROOT = Path(__file__).resolve().parents[1]
REAL_DATA = REPO_ROOT.parent / "shared" / "data"
STEP = 60_000


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def read_train(path: Path) -> pd.DataFrame:
    train = pd.read_csv(path, dtype=TRAIN_DTYPES)
    assert list(train.columns) == TRAIN_COLUMNS
    assert {c: str(t) for c, t in train.dtypes.items()} == TRAIN_DTYPES
    return train


def column(frame: pd.DataFrame, name: str) -> list:
    return frame[name].tolist()


# ---------------------------------------------------------------------------------------
# AKT 4-line format

AKT_FOLD0 = (
    "10,501\n"
    "7,7,3,9\n"  # problem 7 answered once, written once per skill (2 and 5)
    "2,5,1,1\n"
    "1,1,0,1\n"
    "11,502\n"
    "9,3,9,\n"  # trailing commas; problem 9 answered twice
    "1,1,1,\n"
    "0,1,1,\n"
)
AKT_FOLD1 = "12,503\r\n3\r\n1\r\n1\r\n"  # CRLF line ends


@pytest.fixture
def akt_files(tmp_path: Path) -> list[Path]:
    return [write(tmp_path / "fold0.csv", AKT_FOLD0), write(tmp_path / "fold1.csv", AKT_FOLD1)]


def test_4line_conversion_writes_every_column_map_and_fold(tmp_path: Path, akt_files):
    config = ConversionConfig("toy", "4line", akt_files, input_folds=[0, 1])
    out = tmp_path / "out"
    record = convert_dataset(config, out)
    assert sorted(p.name for p in out.iterdir()) == sorted([*OUTPUT_FILES, "user_folds.csv"])

    # problems 3, 7, 9 -> content 0, 1, 2; skills 1, 2, 5 -> tags 0, 1, 2
    train = read_train(out / "train.csv")
    assert column(train, "row_id") == list(range(8))
    assert column(train, "user_id") == [1, 1, 1, 1, 2, 2, 2, 3]
    assert column(train, "content_id") == [1, 1, 0, 2, 2, 0, 2, 0]
    assert column(train, "task_container_id") == [0, 1, 2, 3, 0, 1, 2, 0]
    assert column(train, "timestamp") == [0, STEP, 2 * STEP, 3 * STEP, 0, STEP, 2 * STEP, 0]
    assert column(train, "content_type_id") == [0] * 8
    assert column(train, "answered_correctly") == [1, 1, 0, 1, 0, 1, 1, 1]
    assert column(train, "user_answer") == [0, 0, 1, 0, 1, 0, 0, 0]
    assert train["prior_question_elapsed_time"].isna().all()
    assert train["prior_question_had_explanation"].isna().all()
    lines = (out / "train.csv").read_text().splitlines()
    assert lines[0] == ",".join(TRAIN_COLUMNS)
    assert lines[1] == "0,0,1,1,0,0,0,1,,"
    assert lines[3] == "2,120000,1,0,0,2,1,0,,"

    questions = pd.read_csv(out / "questions.csv", dtype=QUESTIONS_DTYPES)
    assert column(questions, "question_id") == [0, 1, 2]
    assert column(questions, "bundle_id") == [0, 1, 2]
    assert column(questions, "correct_answer") == [0, 0, 0]
    assert column(questions, "tags") == ["0", "1 2", "0"]
    assert column(questions, "part") == [1, 2, 1]  # smallest tag mod 7 + 1
    assert (out / "questions.csv").read_text().splitlines()[2] == "1,1,0,2,1 2"
    assert (out / "lectures.csv").read_text() == "lecture_id,tag,part,type_of\n"

    question_map = pd.read_csv(out / "question_map.csv")
    assert question_map.to_dict("list") == {"raw_problem_id": [3, 7, 9], "content_id": [0, 1, 2]}
    skill_map = pd.read_csv(out / "skill_map.csv")
    assert skill_map.to_dict("list") == {"raw_skill_id": [1, 2, 5], "tag": [0, 1, 2]}
    user_map = pd.read_csv(out / "user_map.csv")
    assert user_map.pop("source_fold").isna().all()  # AKT's files have no fold column
    assert user_map.to_dict("list") == {
        "user_id": [1, 2, 3],
        "raw_student_id": [501, 502, 503],
        "raw_user_index": [10, 11, 12],
        "source_file": ["fold0.csv", "fold0.csv", "fold1.csv"],
        "source_line": [1, 5, 1],
        "fold": [0, 0, 1],
    }
    folds = pd.read_csv(out / "user_folds.csv")
    assert folds.to_dict("list") == {"user_id": [1, 2, 3], "fold": [0, 0, 1]}

    saved = json.loads((out / "conversion.json").read_text())
    assert saved == record
    assert saved["dataset"] == "toy"
    assert [i["sha256"] for i in saved["inputs"]] == [
        hashlib.sha256(p.read_bytes()).hexdigest() for p in akt_files
    ]
    assert [(i["students"], i["rows"], i["fold"]) for i in saved["inputs"]] == [
        (2, 7, 0),
        (1, 1, 1),
    ]
    counts = saved["counts"]
    assert (counts["students"], counts["responses"], counts["questions"], counts["skills"]) == (
        3,
        8,
        3,
        3,
    )
    assert counts["questions_with_several_skills"] == 1
    assert counts["repeated_skill_rows_in_input"] == 1
    assert counts["rows_repeating_a_question_of_the_student"] == 2  # 7 copy, 9 again
    assert saved["share_correct"] == pytest.approx(6 / 8)
    for filled in ("timestamp", "prior_question_elapsed_time", "user_answer", "part"):
        assert filled in saved["filled_in"]


def test_multi_skill_rows_bundle_shares_a_container_and_merge_keeps_one_row(akt_files):
    bundle = convert(ConversionConfig("toy", "4line", akt_files, multi_skill_rows="bundle"))
    assert column(bundle.train, "content_id") == [1, 1, 0, 2, 2, 0, 2, 0]
    assert column(bundle.train, "task_container_id") == [0, 0, 1, 2, 0, 1, 2, 0]
    assert column(bundle.train, "timestamp") == [0, 0, STEP, 2 * STEP, 0, STEP, 2 * STEP, 0]
    assert bundle.user_folds is None  # no input_folds: no user_folds.csv

    merge = convert(ConversionConfig("toy", "4line", akt_files, multi_skill_rows="merge"))
    assert column(merge.train, "row_id") == list(range(7))
    assert column(merge.train, "content_id") == [1, 0, 2, 2, 0, 2, 0]
    assert column(merge.train, "task_container_id") == [0, 1, 2, 0, 1, 2, 0]
    assert column(merge.train, "answered_correctly") == [1, 0, 1, 0, 1, 1, 1]
    assert column(merge.questions, "tags") == ["0", "1 2", "0"]  # tags do not depend on mode

    # the copy of problem 7 (skill 5) is predicted after its attempt's answer only under keep
    keep = convert(ConversionConfig("toy", "4line", akt_files))
    leaks = {c.record["counts"]["rows_seeing_their_own_attempt"] for c in (bundle, merge)}
    assert keep.record["counts"]["rows_seeing_their_own_attempt"] == 1 and leaks == {0}


def test_response_starts_splits_runs_at_a_repeated_skill_or_a_new_answer():
    # two attempts at a 3-skill problem (as in assist2009_pid), then the same problem and
    # skill twice in a row (two genuine responses), then another student
    user = np.array([1, 1, 1, 1, 1, 1, 1, 1, 2])
    problem = np.array([216, 216, 216, 216, 216, 216, 5, 5, 5])
    skill = np.array([31, 2, 48, 48, 2, 31, 9, 9, 9])
    correct = np.array([1, 1, 1, 0, 0, 0, 1, 1, 1])
    starts = response_starts(user, problem, skill, correct)
    assert starts.tolist() == [True, False, False, True, False, False, True, True, True]


def test_attempt_leaks_finds_a_copy_in_a_later_container_than_its_attempt():
    # student 1: attempt 1 written twice (two skills), then attempt 2 written three times;
    # student 2 reuses attempt ids (they are only compared within a student)
    attempt = np.array([1, 1, 2, 2, 2, 1, 1])
    train = pd.DataFrame(
        {
            "user_id": [1, 1, 1, 1, 1, 2, 2],
            "task_container_id": [0, 0, 1, 1, 1, 0, 0],
        }
    )
    assert attempt_leaks(train, attempt).tolist() == []  # bundled: predicted together
    train.loc[4, "task_container_id"] = 2  # attempt 2's third copy, one container later
    assert attempt_leaks(train, attempt).tolist() == [4]
    train["task_container_id"] = [0, 1, 2, 3, 4, 0, 1]  # keep: every copy after its first
    assert attempt_leaks(train, attempt).tolist() == [1, 3, 4, 6]
    assert attempt_leaks(train, np.arange(7)).tolist() == []  # merge: no copies left


def test_a_copy_with_another_answer_is_its_own_response(tmp_path: Path):
    path = write(tmp_path / "a.csv", "1,9\n4,4\n1,2\n1,0\n")
    merged = convert(ConversionConfig("toy", "4line", [path], multi_skill_rows="merge"))
    assert len(merged.train) == 2


# ---------------------------------------------------------------------------------------
# DKVMN 3-line format

DKVMN_TRAIN = (
    "3\n5,5,2\n1,0,1\n"
    "0\n\n\n"  # an empty student: skipped
    "1,\n7,\n0,\n"  # trailing commas
)
DKVMN_TEST = "2\n2,7\n1,1\n"


def test_3line_conversion_skill_is_question_and_records_the_split(tmp_path: Path):
    inputs = [write(tmp_path / "train.csv", DKVMN_TRAIN), write(tmp_path / "test.csv", DKVMN_TEST)]
    config = ConversionConfig("toy15", "3line", inputs, input_folds=[-1, 0])
    out = tmp_path / "out"
    record = convert_dataset(config, out)

    train = read_train(out / "train.csv")
    assert column(train, "user_id") == [1, 1, 1, 2, 3, 3]
    assert column(train, "content_id") == [1, 1, 0, 2, 0, 2]  # skills 2, 5, 7 -> 0, 1, 2
    assert column(train, "task_container_id") == [0, 1, 2, 0, 0, 1]
    assert column(train, "timestamp") == [0, STEP, 2 * STEP, 0, 0, STEP]
    assert column(train, "answered_correctly") == [1, 0, 1, 0, 1, 1]
    assert column(train, "user_answer") == [0, 1, 0, 1, 0, 0]

    questions = pd.read_csv(out / "questions.csv", dtype=QUESTIONS_DTYPES)
    assert column(questions, "tags") == ["0", "1", "2"]
    assert column(questions, "part") == [1, 2, 3]
    assert pd.read_csv(out / "question_map.csv")["raw_problem_id"].tolist() == [2, 5, 7]
    assert pd.read_csv(out / "skill_map.csv")["raw_skill_id"].tolist() == [2, 5, 7]

    user_map = pd.read_csv(out / "user_map.csv")
    assert column(user_map, "source_line") == [1, 7, 1]
    assert column(user_map, "fold") == [-1, -1, 0]
    assert user_map["raw_student_id"].isna().all() and user_map["raw_user_index"].isna().all()
    # only held-out students are listed: the train split only trains
    folds = pd.read_csv(out / "user_folds.csv")
    assert folds.to_dict("list") == {"user_id": [3], "fold": [0]}
    assert record["counts"]["empty_students_skipped"] == 1
    assert record["counts"]["students"] == 3


# ---------------------------------------------------------------------------------------
# pyKT's one-row-per-student CSV

PYKT_TRAIN_VALID = (
    "fold,uid,concepts,responses\n"
    '3,40,"5,5,2","1,0,1"\n'
    "0,41,,\n"  # an empty student: skipped
    "4,42,7,0\n"  # a one-item list needs no quotes
)
PYKT_TEST = 'fold,uid,concepts,responses,cidxs\r\n-1,17,"2,7","1,1","0,1"\r\n'


def test_pykt_conversion_concept_is_question_and_keeps_pykt_folds(tmp_path: Path):
    source = tmp_path / "pykt"
    source.mkdir()
    write(source / "train_valid.csv", PYKT_TRAIN_VALID)
    write(source / "test.csv", PYKT_TEST)
    out = tmp_path / "out"
    argv = ["--dataset", "assist2015_pykt", "--source-dir", str(source), "--output-dir", str(out)]
    assert load_script().main(argv) == 0
    record = json.loads((out / "conversion.json").read_text())
    assert record["line_format"] == "pykt"
    assert [(i["students"], i["rows"], i["fold"]) for i in record["inputs"]] == [
        (3, 4, -1),
        (1, 2, 0),
    ]

    train = read_train(out / "train.csv")
    assert column(train, "user_id") == [1, 1, 1, 2, 3, 3]
    assert column(train, "content_id") == [1, 1, 0, 2, 0, 2]  # concepts 2, 5, 7 -> 0, 1, 2
    assert column(train, "task_container_id") == [0, 1, 2, 0, 0, 1]
    assert column(train, "answered_correctly") == [1, 0, 1, 0, 1, 1]
    assert pd.read_csv(out / "question_map.csv")["raw_problem_id"].tolist() == [2, 5, 7]
    assert pd.read_csv(out / "skill_map.csv")["raw_skill_id"].tolist() == [2, 5, 7]

    user_map = pd.read_csv(out / "user_map.csv")
    assert column(user_map, "raw_student_id") == [40, 42, 17]  # pyKT's uid
    assert column(user_map, "source_line") == [2, 4, 2]
    assert column(user_map, "fold") == [-1, -1, 0]
    assert column(user_map, "source_fold") == [3, 4, -1]  # pyKT's own train_valid folds
    folds = pd.read_csv(out / "user_folds.csv")
    assert folds.to_dict("list") == {"user_id": [3], "fold": [0]}  # test.csv is fold 0
    assert record["counts"]["empty_students_skipped"] == 1
    assert record["counts"]["rows_seeing_their_own_attempt"] == 0

    # a uid of train_valid.csv again in test.csv: the two are disjoint sets of students
    write(source / "test.csv", PYKT_TEST.replace("-1,17,", "-1,42,"))
    with pytest.raises(LineInputError, match="each raw_student_id once") as caught:
        convert(preset_config("assist2015_pykt", source))
    where = (caught.value.file, caught.value.line, caught.value.column)
    assert where == (str(source / "test.csv"), 2, "uid")


HEADER = "fold,uid,concepts,responses\n"
MALFORMED_PYKT = [
    ("fold,uid,concepts\n0,1,1\n", 1, "header", "missing responses"),
    ("fold,uid,questions,concepts,responses\n", 1, "header", "not read here: 'questions'"),
    ("fold,uid,uid,concepts,responses\n", 1, "header", "named twice: uid"),
    ("", 1, "header", "a header line"),
    (HEADER + '0,1,"1,2","1"\n', 2, "responses", "2 items (one per concept)"),
    (HEADER + '0,1,"1,2","1,2"\n', 2, "responses", "item 2: found '2'; expected correctness 0"),
    (HEADER + '0,1,"1,x","1,0"\n', 2, "concepts", "item 2: found 'x'; expected comma-separated"),
    (HEADER + '0,1,"1,-1","1,0"\n', 2, "concepts", "non-negative"),
    (HEADER + "0,1,1,1\n0,1,2,0\n", 3, "uid", "each raw_student_id once"),
    (HEADER + "0,u1,1,1\n", 2, "uid", "found 'u1'; expected one non-negative integer"),
    (HEADER + "x,1,1,1\n", 2, "fold", "one of pyKT's folds: 0-4, or -1"),
    (HEADER + "99,1,1,1\n", 2, "fold", "found '99'; expected one of pyKT's folds: 0-4, or -1"),
    (HEADER + "0,1,1,1\n0,2,1\n", 3, "row", "4 fields, one per header column"),
    (HEADER + '0,1,"1"x,1\n', 2, "row", "CSV fields"),
    (HEADER + "0,1,1,1\n\n", 3, "row", "found '0 fields'"),  # a blank line
    (
        HEADER.replace("\n", ",cidxs\n") + '-1,1,"1,2","1,0","0"\n',
        2,
        "cidxs",
        "2 items (one per concept)",
    ),
]


@pytest.mark.parametrize(("text", "line", "column_name", "expected"), MALFORMED_PYKT)
def test_malformed_pykt_input_names_file_line_and_column(
    tmp_path: Path, text, line, column_name, expected
):
    path = write(tmp_path / "bad.csv", text)
    with pytest.raises(LineInputError) as caught:
        convert(ConversionConfig("bad", "pykt", [path]))
    error = caught.value
    assert (error.file, error.line, error.column) == (str(path), line, column_name)
    assert f"{path}, line {line} ({column_name})" in str(error) and expected in str(error)


# ---------------------------------------------------------------------------------------
# Malformed inputs

MALFORMED = [
    ("3line", "2\n1,2\n1\n", 3, "2 items"),
    ("3line", "2\n1,x\n1,0\n", 2, "item 2"),
    ("3line", "2\n1,2\n1,2\n", 3, "correctness 0 or 1"),
    ("3line", "a\n1\n1\n", 1, "sequence length"),
    ("3line", "2\n1,2\n", 1, "3 lines per student"),
    ("3line", "1\n1,,\n1\n", 2, "item 2"),
    ("3line", "1\n-1\n1\n", 2, "non-negative"),
    ("3line", "1\n1 \n1\n\n1\n2\n1\n", 4, "sequence length"),  # a stray blank line
    ("3line", "1\n1\n1\n1\n\uff11\n1\n", 5, "non-negative"),  # a full-width digit
    ("4line", "1\n5\n1\n1\n", 1, "user_index,raw_student_id"),
    ("4line", "1,2\n5,6\n1\n1,1\n", 3, "2 items"),
    ("4line", "1,2\n5\n1\n1\n3,2\n6\n1\n1\n", 5, "each raw_student_id once"),
    ("4line", "1,2\n5\n1\n2\n", 4, "correctness 0 or 1"),
]


@pytest.mark.parametrize(("line_format", "text", "line", "expected"), MALFORMED)
def test_malformed_input_names_file_and_line(tmp_path: Path, line_format, text, line, expected):
    path = write(tmp_path / "bad.csv", text)
    with pytest.raises(InputError) as caught:
        convert(ConversionConfig("bad", line_format, [path]))
    message = str(caught.value)
    assert isinstance(caught.value, LineInputError)
    assert caught.value.file == str(path) and caught.value.line == line
    assert f"{path}, line {line}" in message and expected in message


def test_too_many_questions_or_responses_per_student_raise(tmp_path: Path):
    n = INT16_MAX + 2
    many_skills = write(tmp_path / "q.csv", f"{n}\n{','.join(map(str, range(n)))}\n{'1,' * n}\n")
    with pytest.raises(InputError, match="at most 32,768 distinct questions"):
        convert(ConversionConfig("big", "3line", [many_skills]))
    long_student = write(tmp_path / "r.csv", f"1\n1\n1\n{n}\n{'3,' * n}\n{'0,' * n}\n")
    with pytest.raises(LineInputError, match="at most 32,768 responses per student") as caught:
        convert(ConversionConfig("big", "3line", [long_student]))
    assert caught.value.line == 4


def test_a_conversion_replaces_only_its_own_files(tmp_path: Path, akt_files):
    other = tmp_path / "other"  # a train.csv no conversion wrote: refused, untouched
    other.mkdir()
    (other / "train.csv").write_text("the user's own")
    with pytest.raises(UserError, match=r"holds train\.csv but no conversion\.json"):
        convert_dataset(ConversionConfig("toy", "4line", akt_files), other)
    assert [p.name for p in other.iterdir()] == ["train.csv"]
    assert (other / "train.csv").read_text() == "the user's own"
    again = tmp_path / "again"
    convert_dataset(ConversionConfig("toy", "4line", akt_files, input_folds=[0, 1]), again)
    (again / "notes.txt").write_text("mine")  # the user's, and 01's output beside
    (again / "data" / "arrays").mkdir(parents=True)
    (again / "data" / "arrays" / "user_id.bin").write_bytes(b"01")
    convert_dataset(ConversionConfig("toy", "4line", akt_files[:1]), again)  # replaces itself
    assert pd.read_csv(again / "user_map.csv")["user_id"].tolist() == [1, 2]
    assert sorted(p.name for p in again.iterdir()) == sorted([*OUTPUT_FILES, "data", "notes.txt"])
    assert (again / "notes.txt").read_text() == "mine"  # user_folds.csv was the conversion's
    assert (again / "data" / "arrays" / "user_id.bin").read_bytes() == b"01"


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (["a.csv", "a.csv"], "inputs: {0} is given twice; give each file once"),
        (["a.csv", "d/../a.csv"], "inputs: {1} is given twice; give each file once"),
        (["a.csv", "empty.csv"], "{1}; expected at least one student with at least one response"),
    ],
)
def test_the_converter_refuses_a_file_twice_and_a_file_without_students(
    tmp_path: Path, inputs, message
):
    write(tmp_path / "a.csv", AKT_FOLD0)
    write(tmp_path / "empty.csv", "")  # AKT's format: no student at all
    (tmp_path / "d").mkdir()
    paths = [str(tmp_path / name) for name in inputs]
    argv = ["--format", "4line", "--name", "x", "--output-dir", str(tmp_path / "out")]
    done = run_numbered_script("00_convert_kt_dataset.py", *argv, "--inputs", *paths)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == f"error: {message.format(*paths)}"
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------
# The script


def load_script():
    spec = importlib.util.spec_from_file_location(
        "convert_script", REPO_ROOT / "00_convert_kt_dataset.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_explicit_files_and_preset(tmp_path: Path, akt_files, capsys):
    script = load_script()
    out = tmp_path / "cli"
    argv = ["--format", "4line", "--inputs", *map(str, akt_files), "--name", "toy"]
    assert script.main([*argv, "--input-folds", "0", "1", "--output-dir", str(out)]) == 0
    assert "students 3  responses 8" in capsys.readouterr().out
    assert (out / "user_folds.csv").exists()

    source = tmp_path / "dkvmn"
    source.mkdir()
    write(source / "assist2015_train.csv", DKVMN_TRAIN)
    write(source / "assist2015_test.csv", DKVMN_TEST)
    out15 = tmp_path / "cli15"
    script.main(
        ["--dataset", "assist2015", "--source-dir", str(source), "--output-dir", str(out15)]
    )
    record = json.loads((out15 / "conversion.json").read_text())
    assert record["dataset"] == "assist2015" and record["counts"]["responses"] == 6
    with pytest.raises(SystemExit):
        script.main(["--dataset", "assist2015", "--format", "3line"])
    bad = write(tmp_path / "bad.csv", "2\n1,x\n1,0\n")
    argv = ["--format", "3line", "--inputs", str(bad), "--name", "bad"]
    assert script.main([*argv, "--output-dir", str(tmp_path / "bad")]) == 2
    assert f"{bad}, line 2 (skill ids), item 2" in capsys.readouterr().err
    assert script.main([*argv, "--input-folds", "0", "1"]) == 2  # two folds for one file


# ---------------------------------------------------------------------------------------
# The real ASSISTments files

needs_real_data = pytest.mark.skipif(
    not REAL_DATA.is_dir(), reason=f"real data not found at {REAL_DATA} (../shared/data)"
)


@needs_real_data
def test_real_assist2009_pid_counts(tmp_path: Path):
    config = preset_config("assist2009_pid", REAL_DATA / PRESETS["assist2009_pid"].folder)
    record = convert_dataset(config, tmp_path / "assist2009_pid")
    counts = record["counts"]
    # PROVENANCE.txt: 4,150 students, 325,589 responses, 16,891 problems, 110 skills, 65.9%
    assert counts["students"] == 4150
    assert counts["responses"] == 325_589
    assert counts["questions"] == 16_891
    assert counts["skills"] == 110
    assert round(record["share_correct"], 3) == 0.658
    # 2,986 problems have 2-4 skills; each such response is written once per skill
    assert counts["questions_with_several_skills"] == 2986
    assert counts["repeated_skill_rows_in_input"] == 51_028
    assert [i["students"] for i in record["inputs"]] == [830] * 5
    folds = pd.read_csv(tmp_path / "assist2009_pid" / "user_folds.csv")
    assert folds["fold"].value_counts().sort_index().tolist() == [830] * 5
    train = read_train(tmp_path / "assist2009_pid" / "train.csv")
    assert len(train) == 325_589 and train["user_id"].is_monotonic_increasing


@needs_real_data
def test_real_assist2015_counts(tmp_path: Path):
    config = preset_config("assist2015", REAL_DATA / PRESETS["assist2015"].folder)
    record = convert_dataset(config, tmp_path / "assist2015")
    counts = record["counts"]
    # PROVENANCE.txt: 13,935 + 5,905 = 19,840 students; 683,801 responses; 100 skills; 73.2%
    assert counts["students"] == 19_840
    assert counts["responses"] == 683_801
    assert counts["questions"] == counts["skills"] == 100
    assert round(record["share_correct"], 3) == 0.732
    assert [(i["students"], i["rows"]) for i in record["inputs"]] == [
        (13_935, 484_040),
        (5_905, 199_761),
    ]
    folds = pd.read_csv(tmp_path / "assist2015" / "user_folds.csv")
    assert len(folds) == 5_905 and set(folds["fold"]) == {0}
    train = read_train(tmp_path / "assist2015" / "train.csv")
    assert len(train) == 683_801


@needs_real_data
def test_real_assist2015_pykt_counts(tmp_path: Path):
    config = preset_config("assist2015_pykt", REAL_DATA / PRESETS["assist2015_pykt"].folder)
    record = convert_dataset(config, tmp_path / "assist2015_pykt")
    counts = record["counts"]
    # PROVENANCE.txt: train_valid 15,275 students (3,055 per fold), 544,339 responses;
    # test 3,818 students, 138,458 responses; 100 skills, no problem ids
    assert [(i["name"], i["students"], i["rows"], i["fold"]) for i in record["inputs"]] == [
        ("train_valid.csv", 15_275, 544_339, -1),
        ("test.csv", 3_818, 138_458, 0),
    ]
    assert counts["students"] == 19_093 and counts["responses"] == 682_797
    assert counts["questions"] == counts["skills"] == 100
    assert counts["empty_students_skipped"] == 0
    out = tmp_path / "assist2015_pykt"
    user_map = pd.read_csv(out / "user_map.csv")
    assert user_map["raw_student_id"].is_unique
    by_file = user_map.groupby("source_file")["source_fold"].value_counts().to_dict()
    assert by_file == {("test.csv", -1): 3_818, **{("train_valid.csv", k): 3_055 for k in range(5)}}
    folds = pd.read_csv(out / "user_folds.csv")
    assert len(folds) == 3_818 and set(folds["fold"]) == {0}
    assert set(folds["user_id"]) == set(user_map.loc[user_map["fold"] == 0, "user_id"])


# the rows predicted after their own attempt's answer (attempt_leaks): AKT's copies under
# keep, none once they are bundled or merged; the skill-level data sets have no copies
REAL_ATTEMPT_LEAKS = [
    ("assist2009_pid", "keep", 51_028),
    ("assist2009_pid", "bundle", 0),
    ("assist2009_pid", "merge", 0),
    *(
        (dataset, mode, 0)
        for dataset in ("assist2015", "assist2015_pykt")
        for mode in MULTI_SKILL_MODES
    ),
]


@needs_real_data
@pytest.mark.parametrize(("dataset", "mode", "leaks"), REAL_ATTEMPT_LEAKS)
def test_real_multi_skill_rows_see_their_own_attempt_only_under_keep(dataset, mode, leaks):
    source = REAL_DATA / PRESETS[dataset].folder
    counts = convert(preset_config(dataset, source, multi_skill_rows=mode)).record["counts"]
    assert counts["rows_seeing_their_own_attempt"] == leaks
    if mode == "keep":  # every copy of a response follows its attempt's first row
        assert leaks == counts["repeated_skill_rows_in_input"]
