"""A demo of any size, generated in parallel chunks of students (joblib processes), in
the competition's file format with the per-row truth: the data of the Riiid-size
rehearsal (bench/rehearsal/full_scale.py).

The item bank is common.inputs.demo's for the config's seed (the same questions.csv and
lectures.csv as a one-process demo of that config). Chunk k of `chunk_users` students is
simulated by common.inputs.demo_students with its own generator, seeded by (seed, k), so the
output is fixed by (config, chunk_users) whatever the number of processes. user_ids are
drawn once for all students (unique, from their own generator) and handed out in
increasing order, chunk after chunk: train.csv stays ordered by user_id and time, as the
real file and a one-process demo are, and row_ids run 0..N-1 across chunks. The parent
writes the chunks in order as they arrive (one pass, no part files); the workers only
simulate.

`riiid_config` gives the real train.csv's shape at a fraction of its size: 393,656
students (scaled), 13,523 questions, 418 lectures, and history lengths whose median
(about 40 rows), mean (about 257 rows, so ~101M rows at full size) and longest (about
17,900 rows) match the real file's.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from joblib import Parallel, delayed

from common.files import atomic_file
from common.inputs.demo import (
    DemoConfig,
    train_table,
    truth_table,
    write_csv_rows,
    write_item_bank,
)
from common.inputs.demo_items import ItemBank, make_item_bank
from common.inputs.demo_students import simulate_students

REAL_STUDENTS = 393_656  # users in the competition's train.csv
REAL_ROWS = 101_230_332
REAL_QUESTIONS = 13_523
REAL_LECTURES = 418
# History lengths: 1.35 rows per event on this bank, so a median of 30.5 events gives
# ~41 rows (the real median is about 40) and the log-normal's tail, cut at 12,800 events
# (~17,900 rows, the real longest history), a mean of ~257 rows, the real file's.
RIIID_MEDIAN_EVENTS = 30.5
RIIID_MAX_EVENTS = 12_800


def riiid_config(scale: float = 1.0, seed: int = 0) -> DemoConfig:
    """The real train.csv's shape with `scale` times its students (at least 1)."""
    return DemoConfig(
        n_users=max(1, round(REAL_STUDENTS * scale)),
        n_questions=REAL_QUESTIONS,
        n_lectures=REAL_LECTURES,
        seed=seed,
        median_events=RIIID_MEDIAN_EVENTS,
        max_events=RIIID_MAX_EVENTS,
    )


def chunk_sizes(n_users: int, chunk_users: int) -> list[int]:
    """Students per chunk: chunks of `chunk_users`, the last one smaller."""
    full, rest = divmod(n_users, chunk_users)
    return [chunk_users] * full + ([rest] if rest else [])


def _simulate_chunk(bank: ItemBank, config: DemoConfig, index: int, n_users: int):
    """Chunk `index`'s histories (train.csv's columns in file order, its own user ids)
    and the p_true of its question rows."""
    rng = np.random.default_rng([config.seed, index])
    return simulate_students(bank, dataclasses.replace(config, n_users=n_users), rng)


def _global_user_ids(config: DemoConfig) -> np.ndarray:
    """Unique positive int32 user ids for every student, increasing."""
    rng = np.random.default_rng([config.seed, -1 % 2**32])  # apart from the chunks' seeds
    ids = rng.choice(np.iinfo(np.int32).max, size=config.n_users, replace=False) + 1
    return np.sort(ids).astype(np.int32)


def _renumber(train: dict[str, np.ndarray], user_ids: np.ndarray, first_row: int) -> None:
    """In place: the chunk's students (in user_id order) get `user_ids` (increasing, so
    the order holds), its rows the row_ids from `first_row` on."""
    user = train["user_id"]
    student = np.cumsum(np.r_[True, user[1:] != user[:-1]]) - 1
    assert student[-1] + 1 == len(user_ids), f"{student[-1] + 1} students, {len(user_ids)} ids"
    train["user_id"] = user_ids[student]
    train["row_id"] = train["row_id"] + first_row


def make_demo_parallel(
    config: DemoConfig, output_dir: str | Path, chunk_users: int = 10_000, n_jobs: int = 2
) -> dict:
    """Write train.csv, questions.csv, lectures.csv and demo_truth.csv for `config` into
    `output_dir`, simulating chunks of `chunk_users` students in `n_jobs` processes.
    Returns a summary: rows, students, question and lecture rows, history lengths, and
    the seconds spent."""
    began = time.perf_counter()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    bank = make_item_bank(config, np.random.default_rng(config.seed))
    user_ids = _global_user_ids(config)
    sizes = chunk_sizes(config.n_users, chunk_users)
    jobs = (delayed(_simulate_chunk)(bank, config, k, n) for k, n in enumerate(sizes))
    chunks = Parallel(n_jobs=n_jobs, return_as="generator")(jobs)  # in order
    rows = lectures = first_user = 0
    lengths = []
    with (  # every file or none: the renames come when all are whole
        atomic_file(output_dir / "questions.csv") as questions_tmp,
        atomic_file(output_dir / "lectures.csv") as lectures_tmp,
        atomic_file(output_dir / "train.csv") as train_tmp,
        atomic_file(output_dir / "demo_truth.csv") as truth_tmp,
        pa.OSFile(str(train_tmp), "wb") as train_sink,
        pa.OSFile(str(truth_tmp), "wb") as truth_sink,
    ):
        write_item_bank(bank.questions, bank.lectures, questions_tmp, lectures_tmp)
        for k, (train, p_true) in enumerate(chunks):
            _renumber(train, user_ids[first_user : first_user + sizes[k]], rows)
            write_csv_rows(train_table(train), train_sink, header=k == 0)
            write_csv_rows(truth_table(train, p_true), truth_sink, header=k == 0)
            user = train["user_id"]
            lengths.append(np.diff(np.flatnonzero(np.r_[True, user[1:] != user[:-1], True])))
            rows += len(user)
            lectures += int((train["content_type_id"] != 0).sum())
            first_user += sizes[k]
    lengths = np.concatenate(lengths)
    return {
        "rows": rows,
        "students": config.n_users,
        "questions": len(bank.questions),
        "lectures": len(bank.lectures),
        "question_rows": rows - lectures,
        "lecture_rows": lectures,
        "rows_per_student": {
            "median": float(np.median(lengths)),
            "mean": float(lengths.mean()),
            "max": int(lengths.max()),
            "share_under_30": float((lengths < 30).mean()),
        },
        "chunks": len(sizes),
        "chunk_users": chunk_users,
        "n_jobs": n_jobs,
        "seconds": time.perf_counter() - began,
    }
