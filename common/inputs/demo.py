"""An embedded demo dataset: simulated students in the exact Riiid! file formats.

`generate_demo` builds a question bank, a lecture list and the histories of simulated
students; `write_demo` writes them as `train.csv`, `questions.csv` and `lectures.csv` in the
competition's text format, plus `demo_truth.csv` (row_id, p_true): the true probability of a
correct answer on every question row, so the oracle AUC of any evaluation is known. Every
number comes from one `numpy.random.Generator` seeded by `DemoConfig.seed`, so a seed fixes
the output byte for byte.

The student model (parameter names are `DemoConfig` fields) is described where it is
computed: the question bank and each question's hidden parameters in
common/inputs/demo_items.py; the students, their knowledge, answers, time and histories, and the
simulation in common/inputs/demo_students.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from common.data.schema import N_PARTS, QUESTION, TRAIN_COLUMNS, TRAIN_DTYPES
from common.errors import UserError
from common.files import atomic_file
from common.inputs.demo_items import MAX_BUNDLE, MAX_CONTENT_ID, make_item_bank
from common.inputs.demo_students import simulate_students
from common.options import at_least, between, option
from common.workspace import record_file

OUTPUT_FILES = ("train.csv", "questions.csv", "lectures.csv", "demo_truth.csv")


@dataclass(frozen=True)
class DemoConfig:
    """Size, seed and the parameters of the student model (see the docstrings of
    common/inputs/demo_items.py and common/inputs/demo_students.py)."""

    n_users: int = option(2_000, "students", flag="users", range=at_least(1))
    # enough for ~7 bundles per skill tag, few enough to be seen often
    n_questions: int = option(
        1_500,
        "questions",
        flag="questions",
        range=between(N_PARTS * MAX_BUNDLE, MAX_CONTENT_ID + 1),
    )
    n_lectures: int = 300  # the real bank has 418 lectures for 13,523 questions
    seed: int = option(0, "seed of the whole data set", range=at_least(0))
    n_tags: int = 188  # the competition's tags are 0..187
    # Histories: ~1.4 rows per event, so a median of 40 rows; mean/median = exp(sigma^2 / 2)
    # ~ 6 as in the real train.csv (about 260 rows per user, median about 40).
    median_events: float = 29.0
    events_sigma: float = 1.95
    # the real task_container_id stops at 9999; fits int16
    max_events: int = option(
        10_000, "most events in one student's history", range=between(1, MAX_CONTENT_ID + 1)
    )
    # Items
    tag_difficulty_sd: float = 0.5
    item_difficulty_sd: float = 0.8
    discrimination_median: float = 1.5  # oracle AUC ~0.80, where the best real models end
    discrimination_sigma: float = 0.25
    popularity_sigma: float = 1.0
    # Students
    ability_sd: float = 1.0
    speed_sigma: float = 0.3
    explanation_beta: tuple[float, float] = (2.0, 0.5)  # mean 0.8; the real rate is ~0.9
    lecture_rate: float = 0.027  # lecture events per event: ~2% of rows are lectures
    # Knowledge, in logit units
    knowledge_max: float = 1.5  # a mastered skill is worth 1.5 sd of ability
    learn_practice: float = 0.04
    learn_explanation: float = 0.08  # reading the explanation triples what a question teaches
    learn_lecture: float = 0.25
    forgetting_days: float = 5.0  # most breaks last hours to days, so forgetting is visible
    logit_clip: float = 12.0  # keeps p_true, rounded to 6 decimals, strictly inside (1/4, 1)
    # Time
    answer_seconds: tuple[float, ...] = (22.0, 18.0, 23.0, 23.0, 17.0, 22.0, 30.0)  # per part
    answer_slowdown: float = 0.2  # exp(0.2 * 2): 1.5x slower at z = -2 than at z = 0
    answer_noise_sigma: float = 0.35
    max_answer_seconds: float = 300.0  # the real elapsed times stop at 300000 ms
    idle_seconds: float = 3.0
    idle_sigma: float = 0.7
    read_seconds: float = 10.0
    lecture_seconds: float = 180.0
    pause_prob: float = 0.05
    break_prob: float = 0.03  # sessions of ~30 events, as in the real data
    max_break_days: float = 30.0

    def __post_init__(self) -> None:
        checks = {
            "n_users >= 1": self.n_users >= 1,
            f"{N_PARTS * MAX_BUNDLE} <= n_questions <= {MAX_CONTENT_ID + 1}": (
                N_PARTS * MAX_BUNDLE <= self.n_questions <= MAX_CONTENT_ID + 1
            ),
            f"{N_PARTS} <= n_lectures <= {MAX_CONTENT_ID + 1}": (
                N_PARTS <= self.n_lectures <= MAX_CONTENT_ID + 1
            ),
            f"{2 * N_PARTS} <= n_tags <= {MAX_CONTENT_ID}": (
                2 * N_PARTS <= self.n_tags <= MAX_CONTENT_ID
            ),
            "1 <= max_events <= 32768": 1 <= self.max_events <= MAX_CONTENT_ID + 1,
            f"answer_seconds has {N_PARTS} values": len(self.answer_seconds) == N_PARTS,
            "0 <= lecture_rate < 1": 0 <= self.lecture_rate < 1,
            "pause_prob + break_prob <= 1": self.pause_prob + self.break_prob <= 1,
        }
        failed = [rule for rule, ok in checks.items() if not ok]
        if failed:
            raise ValueError(f"DemoConfig: expected {', '.join(failed)}; got {self}")


@dataclass
class DemoData:
    """A generated demo: the four output tables. `train` holds train.csv's columns in file
    order as numpy arrays (missing values: NaN elapsed time, -1 had_explanation)."""

    config: DemoConfig
    questions: pd.DataFrame
    lectures: pd.DataFrame
    train: dict[str, np.ndarray]
    p_true: np.ndarray  # (number of question rows,) in file order
    seconds: float = 0.0

    @property
    def n_rows(self) -> int:
        return len(self.train["row_id"])

    def train_frame(self) -> pd.DataFrame:
        """train.csv as a DataFrame with the competition dtypes (nullable boolean)."""
        frame = pd.DataFrame({name: self.train[name] for name in TRAIN_COLUMNS})
        explanation = self.train["prior_question_had_explanation"]
        frame["prior_question_had_explanation"] = pd.array(
            np.where(explanation < 0, None, explanation == 1), dtype="boolean"
        )
        return frame.astype(TRAIN_DTYPES)

    def summary(self) -> dict[str, float | int]:
        is_question = self.train["content_type_id"] == QUESTION
        users, rows_per_user = np.unique(self.train["user_id"], return_counts=True)
        return {
            "rows": self.n_rows,
            "students": len(users),
            "questions": len(self.questions),
            "lectures": len(self.lectures),
            "question_rows": int(is_question.sum()),
            "lecture_rows": int((~is_question).sum()),
            "median_rows_per_student": float(np.median(rows_per_user)),
            "share_correct": float(self.train["answered_correctly"][is_question].mean()),
            "seconds": round(self.seconds, 2),
        }


def generate_demo(config: DemoConfig) -> DemoData:
    """The whole demo for `config`, from one generator seeded with `config.seed`."""
    began = time.perf_counter()
    rng = np.random.default_rng(config.seed)
    bank = make_item_bank(config, rng)
    train, p_true = simulate_students(bank, config, rng)
    return DemoData(
        config=config,
        questions=bank.questions,
        lectures=bank.lectures,
        train=train,
        p_true=p_true,
        seconds=time.perf_counter() - began,
    )


# ----------------------------------------------------------------------------- writing


def write_csv_rows(table: pa.Table, sink, header: bool = True) -> None:
    """Write `table` to the open pyarrow sink `sink` as CSV with unquoted values (pyarrow
    quotes strings otherwise), preceded by an unquoted header line when `header` (pyarrow
    quotes header names). Appending tables with header=False continues one file."""
    if header:
        sink.write((",".join(table.column_names) + "\n").encode())
    options = pa_csv.WriteOptions(include_header=False, quoting_style="none")
    pa_csv.write_csv(table, sink, write_options=options)


def _write_arrow_csv(table: pa.Table, path: Path) -> None:
    with pa.OSFile(str(path), "wb") as sink:
        write_csv_rows(table, sink)


def train_table(train: dict[str, np.ndarray]) -> pa.Table:
    """train.csv's columns in the real file's text form: the elapsed time as an integer
    float ("13000.0"), booleans as True/False, missing values empty."""
    elapsed = train["prior_question_elapsed_time"]
    missing = np.isnan(elapsed)
    whole_ms = pa.array(np.where(missing, 0, elapsed).astype(np.int64), mask=missing)
    elapsed_text = pc.binary_join_element_wise(pc.cast(whole_ms, pa.string()), ".0", "")
    explanation = train["prior_question_had_explanation"]
    no_explanation = explanation < 0
    explanation_text = pc.take(
        pa.array(["False", "True"]),
        pa.array(np.where(no_explanation, 0, explanation), mask=no_explanation),
    )
    columns = {name: pa.array(train[name]) for name in TRAIN_COLUMNS}
    columns["prior_question_elapsed_time"] = elapsed_text
    columns["prior_question_had_explanation"] = explanation_text
    return pa.table(columns)


def truth_table(train: dict[str, np.ndarray], p_true: np.ndarray) -> pa.Table:
    """demo_truth.csv's columns: row_id and p_true of every question row."""
    is_question = train["content_type_id"] == QUESTION
    return pa.table({"row_id": train["row_id"][is_question], "p_true": p_true})


def write_item_bank(
    questions: pd.DataFrame, lectures: pd.DataFrame, questions_path: Path, lectures_path: Path
) -> None:
    """questions.csv and lectures.csv, to the (temporary) paths given."""
    questions.to_csv(questions_path, index=False, lineterminator="\n")
    lectures.to_csv(lectures_path, index=False, lineterminator="\n")


def write_demo(demo: DemoData, output_dir: str | Path) -> list[Path]:
    """Write train.csv, questions.csv, lectures.csv and demo_truth.csv into `output_dir`,
    atomically: each is written under a temporary name, and none replaces the earlier one
    unless all were written (other files there are left alone). Returns the paths."""
    output_dir = Path(output_dir)
    paths = [output_dir / name for name in OUTPUT_FILES]
    with contextlib.ExitStack() as written:  # the renames come when every file is whole
        train, questions, lectures, truth = (written.enter_context(atomic_file(p)) for p in paths)
        write_item_bank(demo.questions, demo.lectures, questions, lectures)
        _write_arrow_csv(truth_table(demo.train, demo.p_true), truth)
        _write_arrow_csv(train_table(demo.train), train)
    return paths


def make_demo(config: DemoConfig, output_dir: str | Path) -> DemoData:
    """Generate the demo for `config` and write it into `output_dir`; `seconds` covers
    both."""
    began = time.perf_counter()
    demo = generate_demo(config)
    write_demo(demo, output_dir)
    return dataclasses.replace(demo, seconds=time.perf_counter() - began)


def check_demo_target(output_dir: Path) -> None:
    """Refuse to write a demo over a train.csv that is not a demo's (the Kaggle files in
    input/, say): 00 writes a demo_run.json beside every demo it makes."""
    train = Path(output_dir) / "train.csv"
    if train.exists() and not record_file(output_dir, "demo").exists():
        raise UserError(
            f"{train} is not a demo's (no demo_run.json beside it): the demo will not "
            "replace it; choose another --output-dir"
        )
