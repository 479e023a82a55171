"""Public knowledge-tracing datasets -> competition-schema input files.

The formats that DKVMN (Zhang et al., WWW 2017), AKT (Ghosh et al., KDD 2020) and pyKT
(Liu et al., NeurIPS 2022, arXiv 2206.11460) ship their ASSISTments splits in (read by
common/inputs/kt_readers.py) are converted into
`train.csv`, `questions.csv` and `lectures.csv` with exactly the Riiid! schema
(common/data/schema.py), so the same pipeline (01_preprocess.py -> ...) runs on them unchanged;
common/inputs/kt_outputs.py writes them with the maps and conversion.json.

What the sources lack is filled in so that no feature carries invented signal (also
written to conversion.json as `filled_in`):
    timestamp             task_container_id * timestamp_step_ms (a constant step from 0)
    prior_question_*      empty everywhere (elapsed time and explanation are unknown)
    user_answer           synthetic: 0 when correct, 1 when wrong; correct_answer is 0
    part                  derived: (smallest skill tag of the question) mod 7 + 1, a coarse
                          deterministic grouping only, not a TOEIC part
    bundle_id             the question's own id (no bundles in these data)
    lectures.csv          header only

Multi-skill problems (AKT 4line): the AKT files repeat a response once per skill of its
problem on consecutive lines (same problem, same correctness, a different skill each).
A question's tags are the union of the skills it appears with. What happens to the repeated
rows is `multi_skill_rows`:
    keep    every input line is its own response and task container (the rows AKT trains
            and scores on, so AUCs compare with published ones; note the later copies follow
            their own answer one step earlier, an easy target)
    bundle  every input line is a row, but the copies of one response share its timestamp
            and task_container_id, so the pipeline predicts them together, before feedback
    merge   the copies become one row (one response per answered problem)
A run of copies is: consecutive lines of one student with the same problem and the same
correctness, each with a skill not yet in the run (`response_starts`). `attempt_leaks`
finds the copies that sit in a later task container than their run's first row, i.e. that
are predicted after their own attempt's answer was revealed: conversion.json's
`rows_seeing_their_own_attempt`, every copy under keep, none under bundle or merge.

Limits (int16 columns): at most 32,768 distinct questions and skills (dense ids
0..32,767), and at most 32,768 responses per student (task_container_id 0..32,767); more
raises an error rather than splitting students, so that a user id keeps meaning one student.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from common.data.schema import LECTURES_DTYPES, N_PARTS, QUESTIONS_DTYPES, TRAIN_COLUMNS, InputError
from common.errors import UserError
from common.inputs.kt_outputs import ConvertedDataset, write_converted
from common.inputs.kt_readers import (
    LINE_FORMATS,
    NO_FOLD,
    LineFormat,
    LineInputError,
    StudentSequence,
    check_unique_students,
    read_students,
)

MultiSkillRows = Literal["keep", "bundle", "merge"]
MULTI_SKILL_MODES: tuple[str, ...] = ("keep", "bundle", "merge")

INT16_MAX = int(np.iinfo(np.int16).max)
TIMESTAMP_STEP_MS = 60_000  # one minute per response: a constant, so lags carry no signal


# ---------------------------------------------------------------------------------------
# Configuration and presets


@dataclass
class ConversionConfig:
    """One conversion. `input_folds[i]` is the shipped fold of every student in `inputs[i]`
    (NO_FOLD for none); None when the dataset ships no folds (no user_folds.csv)."""

    name: str
    line_format: LineFormat
    inputs: list[Path]
    input_folds: list[int] | None = None
    multi_skill_rows: MultiSkillRows = "keep"  # keep: the rows published AUCs are scored on
    timestamp_step_ms: int = TIMESTAMP_STEP_MS
    folds_note: str = ""  # what the shipped folds are, for conversion.json

    def __post_init__(self) -> None:
        self.inputs = [Path(p) for p in self.inputs]
        if self.line_format not in LINE_FORMATS:
            raise ValueError(
                f"line_format: expected one of {LINE_FORMATS}, got {self.line_format!r}"
            )
        if self.multi_skill_rows not in MULTI_SKILL_MODES:
            raise ValueError(
                f"multi_skill_rows: expected one of {MULTI_SKILL_MODES}, "
                f"got {self.multi_skill_rows!r}"
            )
        if not self.inputs:
            raise ValueError("inputs: expected at least one input file")
        for i, path in enumerate(self.inputs):  # its students would be converted twice
            if path.resolve() in {p.resolve() for p in self.inputs[:i]}:
                raise ValueError(f"inputs: {path} is given twice; give each file once")
        if self.input_folds is not None:
            if len(self.input_folds) != len(self.inputs):
                raise ValueError(
                    f"input_folds: expected one fold per input ({len(self.inputs)}), "
                    f"got {len(self.input_folds)}"
                )
            if any(f < NO_FOLD for f in self.input_folds):
                raise ValueError(
                    f"input_folds: expected folds >= {NO_FOLD}, got {self.input_folds}"
                )
        if self.timestamp_step_ms <= 0:
            raise ValueError(f"timestamp_step_ms: expected > 0, got {self.timestamp_step_ms}")


@dataclass(frozen=True)
class DatasetPreset:
    """A known dataset: its folder under the shared data directory, files and folds."""

    folder: str
    line_format: LineFormat
    files: tuple[str, ...]
    folds: tuple[int, ...]
    folds_note: str


PRESETS: dict[str, DatasetPreset] = {
    # AKT's five test files are five disjoint user folds (AKT trains on the other four).
    "assist2009_pid": DatasetPreset(
        folder="assist2009_pid_akt",
        line_format="4line",
        files=tuple(f"assist2009_pid_test{k}.csv" for k in range(1, 6)),
        folds=(0, 1, 2, 3, 4),
        folds_note="5 disjoint user folds shipped by AKT: fold k-1 = the students of "
        "assist2009_pid_test{k}.csv",
    ),
    # DKVMN ships one train/test split; a fold strategy may hash the train students itself.
    "assist2015": DatasetPreset(
        folder="assist2015_dkvmn",
        line_format="3line",
        files=("assist2015_train.csv", "assist2015_test.csv"),
        folds=(NO_FOLD, 0),
        folds_note="a single train/test split shipped by DKVMN: fold 0 = the students of "
        f"assist2015_test.csv; the students of assist2015_train.csv (fold {NO_FOLD} in "
        "user_map.csv) are not in user_folds.csv",
    ),
    # pyKT's own split of assist2015 (students with fewer than 3 responses dropped): it
    # trains and selects on train_valid.csv (its 5 folds) and scores test.csv.
    "assist2015_pykt": DatasetPreset(
        folder="assist2015_pykt",
        line_format="pykt",
        files=("train_valid.csv", "test.csv"),
        folds=(NO_FOLD, 0),
        folds_note="pyKT's train/test split: fold 0 = the students of test.csv (scored on "
        f"pyKT's leaderboard); the students of train_valid.csv (fold {NO_FOLD} in "
        "user_map.csv) are not in user_folds.csv, only train; pyKT's own 5 train_valid "
        "folds are user_map.csv's source_fold (0-4; -1 for test.csv)",
    ),
}


def preset_config(dataset: str, source_dir: str | Path, **overrides: object) -> ConversionConfig:
    """The ConversionConfig of a PRESETS dataset whose files lie in `source_dir`."""
    if dataset not in PRESETS:
        raise ValueError(f"dataset: expected one of {sorted(PRESETS)}, got {dataset!r}")
    preset = PRESETS[dataset]
    fields: dict = {
        "name": dataset,
        "line_format": preset.line_format,
        "inputs": [Path(source_dir) / f for f in preset.files],
        "input_folds": list(preset.folds),
        "folds_note": preset.folds_note,
    }
    return ConversionConfig(**{**fields, **overrides})


# ---------------------------------------------------------------------------------------
# Conversion


def _dense_ids(raw: np.ndarray, what: str, files: str) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct raw ids, dense id 0..n-1 of every element); n must fit int16."""
    distinct = np.unique(raw)
    if len(distinct) > INT16_MAX + 1:
        raise InputError(
            files,
            f"at most {INT16_MAX + 1:,} distinct {what} (dense ids 0..{INT16_MAX:,} fit the "
            "competition's int16 columns)",
            value=f"{len(distinct):,} distinct {what}",
        )
    return distinct, np.searchsorted(distinct, raw)


def response_starts(
    user: np.ndarray, problem: np.ndarray, skill: np.ndarray, correct: np.ndarray
) -> np.ndarray:
    """(n_rows,) bool: False where a row repeats the previous row's response for another
    skill (same student, problem and correctness, a skill not yet in the run)."""
    n = len(user)
    starts = np.ones(n, dtype=bool)
    if n < 2:
        return starts
    candidate = np.zeros(n, dtype=bool)
    candidate[1:] = (
        (user[1:] == user[:-1])
        & (problem[1:] == problem[:-1])
        & (correct[1:] == correct[:-1])
        & (skill[1:] != skill[:-1])
    )
    next_is_candidate = np.append(candidate[1:], False)
    run_skills: set[int] = set()
    for i in np.flatnonzero(candidate | next_is_candidate).tolist():  # the rest start a run
        if candidate[i] and int(skill[i]) not in run_skills:
            starts[i] = False
            run_skills.add(int(skill[i]))
        else:
            run_skills = {int(skill[i])}
    return starts


def attempt_leaks(train: pd.DataFrame, attempt: np.ndarray) -> np.ndarray:
    """Positions (in `train`'s row order) of the rows that sit in a later task_container_id
    than an earlier row of their own attempt: the pipeline reveals that attempt's answer
    before predicting them. `attempt` (n_rows,) names the source response each row of the
    converted frame records: `np.cumsum(response_starts(...))` over the rows as read (the
    skill that tells a copy from a new response is not in train.csv; a merged row loses
    all but its first copy's, and AKT lists a problem's skills in no fixed order)."""
    frame = pd.DataFrame(
        {
            "user": train["user_id"].to_numpy(),
            "attempt": attempt,
            "container": train["task_container_id"].to_numpy(),
        }
    )
    first_container = frame.groupby(["user", "attempt"], sort=False)["container"].transform("min")
    return np.flatnonzero(frame["container"].to_numpy() > first_container.to_numpy())


def _rank_within_user(user: np.ndarray, increments: np.ndarray) -> np.ndarray:
    """(n,) cumulative count of `increments` within each user's run of rows, minus one."""
    counts = np.cumsum(increments)
    first_of_user = np.ones(len(user), dtype=bool)
    first_of_user[1:] = user[1:] != user[:-1]
    before_user = np.repeat(
        counts[first_of_user] - increments[first_of_user],
        np.diff(np.append(np.flatnonzero(first_of_user), len(user))),
    )
    return counts - before_user - 1


def convert(config: ConversionConfig) -> ConvertedDataset:
    """Read every input and build the competition-schema frames (nothing is written)."""
    # checked here, not in the config: a recipe names files that need not be there until
    # the conversion runs (../shared/data)
    for path in map(Path, config.inputs):
        if path.is_dir():
            raise UserError(f"inputs: {path} is a folder; expected a file of the dataset")
    students, kept, files = _read_inputs(config)
    lengths = np.array([len(s.problems) for s in kept], dtype=np.int64)
    user_id = np.repeat(np.arange(1, len(kept) + 1, dtype=np.int64), lengths)
    raw_problem = np.concatenate([s.problems for s in kept])
    raw_skill = np.concatenate([s.skills for s in kept])
    correct = np.concatenate([s.correct for s in kept])

    problem_ids, content_id = _dense_ids(raw_problem, "questions", files)
    skill_ids, tag = _dense_ids(raw_skill, "skills", files)
    questions, question_tags = _question_table(content_id, tag, len(problem_ids), len(skill_ids))

    starts = response_starts(user_id, content_id, tag, correct)
    attempt = np.cumsum(starts)  # the source response each row records, for attempt_leaks
    if config.multi_skill_rows == "merge":
        user_id, content_id, correct, attempt = (
            a[starts] for a in (user_id, content_id, correct, attempt)
        )
        rows_per_container = np.ones(int(starts.sum()), dtype=bool)
    elif config.multi_skill_rows == "bundle":
        rows_per_container = starts
    else:
        rows_per_container = np.ones(len(user_id), dtype=bool)
    container = _rank_within_user(user_id, rows_per_container.astype(np.int64))
    _check_containers(kept, user_id, container)

    user_map = _user_map(config, kept)
    converted = ConvertedDataset(
        train=_train_frame(user_id, content_id, correct, container, config.timestamp_step_ms),
        questions=questions,
        lectures=pd.DataFrame({c: pd.Series(dtype=d) for c, d in LECTURES_DTYPES.items()}),
        question_map=pd.DataFrame(
            {"raw_problem_id": problem_ids, "content_id": np.arange(len(problem_ids))}
        ),
        skill_map=pd.DataFrame({"raw_skill_id": skill_ids, "tag": np.arange(len(skill_ids))}),
        user_map=user_map,
        user_folds=None
        if config.input_folds is None
        else user_map.loc[user_map["fold"] != NO_FOLD, ["user_id", "fold"]].reset_index(drop=True),
    )
    leaks = attempt_leaks(converted.train, attempt)
    converted.record = _record(config, students, converted, starts, question_tags, leaks)
    return converted


def _read_inputs(
    config: ConversionConfig,
) -> tuple[list[StudentSequence], list[StudentSequence], str]:
    """(every student read, those with at least one response, the input files named
    for errors); raises when a student id repeats or a file has no student with a
    response."""
    folds = config.input_folds or [NO_FOLD] * len(config.inputs)
    students: list[StudentSequence] = []
    for path, fold in zip(config.inputs, folds, strict=True):
        read = read_students(path, config.line_format, fold)
        if not any(len(s.problems) for s in read):  # empty, or cut short to nothing
            raise InputError(str(path), "at least one student with at least one response")
        students.extend(read)
    check_unique_students(students)
    kept = [s for s in students if len(s.problems)]
    return students, kept, ", ".join(str(p) for p in config.inputs)


def _train_frame(
    user_id: np.ndarray,
    content_id: np.ndarray,
    correct: np.ndarray,
    container: np.ndarray,
    timestamp_step_ms: int,
) -> pd.DataFrame:
    """train.csv's frame, one row per response, with what the source lacks filled in
    (see filled_in)."""
    n = len(user_id)
    return pd.DataFrame(
        {
            "row_id": np.arange(n, dtype=np.int64),
            "timestamp": container * timestamp_step_ms,
            "user_id": user_id.astype(np.int32),
            "content_id": content_id.astype(np.int16),
            "content_type_id": np.zeros(n, dtype=np.int8),
            "task_container_id": container.astype(np.int16),
            "user_answer": (1 - correct).astype(np.int8),  # synthetic: 0 = right, 1 = wrong
            "answered_correctly": correct.astype(np.int8),
            "prior_question_elapsed_time": np.full(n, np.nan, dtype=np.float32),
            "prior_question_had_explanation": pd.arrays.BooleanArray(
                np.zeros(n, dtype=bool), mask=np.ones(n, dtype=bool)
            ),
        }
    )[TRAIN_COLUMNS]


def _user_map(config: ConversionConfig, kept: list[StudentSequence]) -> pd.DataFrame:
    """user_map.csv: each dense user id's source student, file, line and fold, and the fold
    the source file itself gives it (pyKT's fold column; empty for the line formats)."""
    names = {str(path): path.name for path in config.inputs}
    return pd.DataFrame(
        {
            "user_id": np.arange(1, len(kept) + 1, dtype=np.int32),
            "raw_student_id": pd.array([s.raw_student_id for s in kept], dtype="Int64"),
            "raw_user_index": pd.array([s.user_index for s in kept], dtype="Int64"),
            "source_file": [names[s.source_file] for s in kept],
            "source_line": np.array([s.source_line for s in kept], dtype=np.int64),
            "fold": np.array([s.fold for s in kept], dtype=np.int64),
            "source_fold": pd.array([s.source_fold for s in kept], dtype="Int64"),
        }
    )


def question_part(smallest_tag: np.ndarray) -> np.ndarray:
    """The derived part 1..7 of questions: smallest skill tag mod 7 + 1 (a coarse grouping
    standing in for the TOEIC part, which these data do not have)."""
    return (smallest_tag % N_PARTS + 1).astype(np.int8)


def _question_table(
    content_id: np.ndarray, tag: np.ndarray, n_questions: int, n_skills: int
) -> tuple[pd.DataFrame, list[list[int]]]:
    """questions.csv frame (tags: the union of the question's skills, ascending) and each
    question's tag list."""
    pairs = np.unique(content_id * n_skills + tag)  # sorted by question, then tag
    pair_question, pair_tag = pairs // n_skills, pairs % n_skills
    bounds = np.searchsorted(pair_question, np.arange(n_questions + 1))
    question_tags = [t.tolist() for t in np.split(pair_tag, bounds[1:-1])]
    question_id = np.arange(n_questions)
    questions = pd.DataFrame(
        {
            "question_id": question_id.astype(np.int16),
            "bundle_id": question_id.astype(np.int16),
            "correct_answer": np.zeros(n_questions, dtype=np.int8),  # synthetic
            "part": question_part(pair_tag[bounds[:-1]]),
            "tags": [" ".join(map(str, t)) for t in question_tags],
        }
    )[list(QUESTIONS_DTYPES)]
    return questions, question_tags


def _check_containers(
    kept: list[StudentSequence], user_id: np.ndarray, container: np.ndarray
) -> None:
    if len(container) and container.max() > INT16_MAX:
        row = int(np.argmax(container > INT16_MAX))
        student = kept[int(user_id[row]) - 1]
        raise LineInputError(
            student.source_file,
            f"at most {INT16_MAX + 1:,} responses per student (task_container_id is int16; "
            "students are not split, so that a user id means one student)",
            column="student",
            value=f"{len(student.problems):,} responses",
            line=student.source_line,
        )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _record(
    config: ConversionConfig,
    students: list[StudentSequence],
    converted: ConvertedDataset,
    starts: np.ndarray,
    question_tags: list[list[int]],
    leaks: np.ndarray,
) -> dict:
    """conversion.json: what went in, what came out, and what was filled in."""
    return {
        "dataset": config.name,
        "line_format": config.line_format,
        "config": {
            k: (v if k != "inputs" else [str(p) for p in v]) for k, v in asdict(config).items()
        },
        "inputs": _input_records(config, students),
        "counts": _counts(students, converted, starts, question_tags, leaks),
        "share_correct": float(converted.train["answered_correctly"].mean()),
        "folds": _folds_note(config),
        "filled_in": filled_in(config),
    }


def _input_records(config: ConversionConfig, students: list[StudentSequence]) -> list[dict]:
    """Per input file: its path, size, digest, fold, and the students and rows read."""
    folds = config.input_folds or [NO_FOLD] * len(config.inputs)
    inputs = []
    for path, fold in zip(config.inputs, folds, strict=True):
        own = [s for s in students if s.source_file == str(path)]
        inputs.append(
            {
                "path": str(path),
                "name": path.name,
                "bytes": path.stat().st_size,
                "sha256": _sha256(path),
                "fold": fold,
                "students": len(own),
                "rows": sum(len(s.problems) for s in own),
            }
        )
    return inputs


def _counts(
    students: list[StudentSequence],
    converted: ConvertedDataset,
    starts: np.ndarray,
    question_tags: list[list[int]],
    leaks: np.ndarray,
) -> dict:
    """conversion.json's counts: students, rows, questions and skills, repeats, and the
    rows predicted after their own attempt's answer (attempt_leaks)."""
    train = converted.train
    user, content = train["user_id"].to_numpy(), train["content_id"].to_numpy()
    seen_before = pd.DataFrame({"u": user, "c": content}).duplicated().to_numpy()
    lengths = train.groupby("user_id", sort=False).size().to_numpy()
    n_tags = np.array([len(t) for t in question_tags])
    return {
        "students": len(converted.user_map),
        "responses": len(train),
        "task_containers": int(
            (train[["user_id", "task_container_id"]].drop_duplicates()).shape[0]
        ),
        "input_rows": int(sum(len(s.problems) for s in students)),
        "questions": len(converted.questions),
        "skills": len(converted.skill_map),
        "questions_with_several_skills": int((n_tags > 1).sum()),
        "max_skills_per_question": int(n_tags.max()),
        "repeated_skill_rows_in_input": int((~starts).sum()),
        "rows_seeing_their_own_attempt": len(leaks),
        "empty_students_skipped": sum(1 for s in students if not len(s.problems)),
        "rows_repeating_a_question_of_the_student": int(seen_before.sum()),
        "students_with_a_repeated_question": int(pd.Series(seen_before).groupby(user).any().sum()),
        "responses_per_student": {
            "min": int(lengths.min()),
            "median": float(np.median(lengths)),
            "max": int(lengths.max()),
        },
    }


def _folds_note(config: ConversionConfig) -> str | None:
    if config.input_folds is None:
        return None
    return config.folds_note or (
        f"the fold of each input file's students: {config.input_folds}; "
        f"students of fold {NO_FOLD} are not in user_folds.csv"
    )


def filled_in(config: ConversionConfig) -> dict[str, str]:
    """What the converter invents, per column or file, stated for conversion.json."""
    rows = {
        "keep": "each input row is its own response and task container",
        "bundle": "the rows repeating one response for further skills share its "
        "task_container_id and timestamp",
        "merge": "the rows repeating one response for further skills are merged into one row",
    }[config.multi_skill_rows]
    return {
        "timestamp": f"constant step: task_container_id * {config.timestamp_step_ms} ms, "
        "from 0 for every student (the source has no times)",
        "task_container_id": f"0..n-1 per student in source order; {rows}",
        "prior_question_elapsed_time": "empty everywhere (unknown)",
        "prior_question_had_explanation": "empty everywhere (unknown)",
        "user_answer": "synthetic: 0 when correct, 1 when wrong (the chosen option is unknown)",
        "correct_answer": "synthetic: 0 for every question",
        "part": "derived: smallest skill tag of the question mod 7 + 1; a coarse "
        "deterministic grouping, not a TOEIC part",
        "tags": "the dense ids (skill_map.csv) of every skill the question appears with",
        "bundle_id": "the question's own id (no bundles in the source)",
        "content_id": "dense 0..Q-1 by ascending raw problem id (question_map.csv)",
        "user_id": "dense 1..U in file order, empty students skipped (user_map.csv)",
        "lectures.csv": "header only (no lectures in the source)",
    }


def convert_dataset(config: ConversionConfig, output_dir: str | Path) -> dict:
    """Convert and write; returns the conversion record (conversion.json)."""
    converted = convert(config)
    write_converted(converted, output_dir)
    return converted.record
