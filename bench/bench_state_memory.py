"""Peak memory of the Kaggle notebook's online state at Riiid's size, on the CPU: a snapshot
of 393,656 students (synthetic histories of Riiid's mean length) filled under the notebook's
default budget (common.stream.kaggle_notebook.COMPETITION_STATE_GB) for the reference model (d256,
2+2 layers), then a group with a new student, then groups of students until the cache pool
is full. Each phase prints the process's peak RSS so far.

    python -m bench.bench_state_memory          # bench/results/state_memory.txt
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bench.benchlib import Report, peak_gb, results_flag
from common.model.saint import SAINT, ModelConfig
from common.stream.kaggle_notebook import COMPETITION_STATE_GB
from common.stream.online import FIELD_DTYPES, OnlineState, Snapshot

STUDENTS, QUESTIONS = 393_656, 13_523


def synthetic_snapshot(model: SAINT, path: Path, students: int) -> None:
    length = model.config.receptive_field
    rng = np.random.default_rng(0)
    n_items = np.minimum(rng.geometric(1 / 257, students), 17_000).astype(np.int64)
    fields = {k: np.zeros((students, length), dtype=d) for k, d in FIELD_DTYPES.items()}
    fields["question"][:] = rng.integers(0, QUESTIONS, (1, length))
    fields["timestamp"][:] = np.arange(length) * 30_000
    users = np.arange(students, dtype=np.int64)
    Snapshot(users, n_items, n_items - 1, fields).save(path)


def group(users: np.ndarray, timestamp: int) -> pd.DataFrame:
    """A test_df of one question per student, as the API serves it."""
    n = len(users)
    return pd.DataFrame(
        {
            "row_id": np.arange(n),
            "timestamp": np.full(n, timestamp, dtype=np.int64),
            "user_id": users.astype(np.int32),
            "content_id": np.full(n, 5, dtype=np.int16),
            "content_type_id": np.zeros(n, dtype=np.int8),
            "task_container_id": np.zeros(n, dtype=np.int16),
            "prior_question_elapsed_time": np.full(n, np.nan, dtype=np.float32),
            "prior_question_had_explanation": pd.array([pd.NA] * n, dtype="boolean"),
            "prior_group_answers_correct": [np.nan] * n,
            "prior_group_responses": [np.nan] * n,
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--students", type=int, default=STUDENTS)
    parser.add_argument("--threads", type=int, default=2)
    results_flag(parser, "state_memory")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    say = Report("state_memory", args.results)
    say.header("The notebook's online state at Riiid's size (bench/bench_state_memory.py)")
    model = SAINT(ModelConfig(n_questions=QUESTIONS)).eval()
    budget = int(COMPETITION_STATE_GB * 1e9)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "snapshot.npz"
        synthetic_snapshot(model, path, args.students)
        start = time.time()
        state = OnlineState(model, np.ones(QUESTIONS, np.int8), torch.device("cpu"),
                            Snapshot.load(path), 4096, budget)  # fmt: skip
        planned = state.state_bytes()
        say(f"filled {args.students:,} students in {time.time() - start:.0f} s under a "
            f"{COMPETITION_STATE_GB:g} GB budget: rings for {planned['capacity']:,} students "
            f"{planned['student_state'] / 1e9:.2f} GB, a pool of {state.pool.size:,} caches "
            f"{planned['cache_pool'] / 1e9:.2f} GB; peak RSS {peak_gb():.2f} GB")  # fmt: skip
    state.predict(group(np.array([10**9]), 10**12))
    say(f"a new student's first group (the pool allocated): peak RSS {peak_gb():.2f} GB")
    step = 300
    for first in range(0, state.pool.size, step):
        state.predict(group(np.arange(first, min(first + step, state.pool.size)), 10**12))
    say(f"{state.pool.size:,} students cached (the pool full): peak RSS {peak_gb():.2f} GB "
        f"(Kaggle's notebooks have 13 GB)")  # fmt: skip
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
