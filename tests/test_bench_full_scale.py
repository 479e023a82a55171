"""The Riiid-size rehearsal: its parallel demo generator (common/inputs/demo_parallel.py) and one
run of bench/rehearsal/full_scale.py at a tiny scale, whose results file must hold every
stage's figures."""

from __future__ import annotations

import dataclasses
import filecmp
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from bench.rehearsal.report import whole_stream_rate
from common.inputs.demo_parallel import make_demo_parallel, riiid_config
from tests.helpers import REPO


def test_riiid_config_has_the_real_shape():
    config = riiid_config(1.0)
    assert (config.n_users, config.n_questions, config.n_lectures) == (393_656, 13_523, 418)
    assert riiid_config(0.001).n_users == 394


@pytest.mark.slow
def test_parallel_demo_is_one_ordered_file_whatever_the_processes(tmp_path):
    # 315 students in chunks of 100, 100, 100, 15; short histories keep it quick
    config = dataclasses.replace(riiid_config(0.0008, seed=3), max_events=300)
    one, two = tmp_path / "one", tmp_path / "two"
    summary = make_demo_parallel(config, one, chunk_users=100, n_jobs=1)
    make_demo_parallel(config, two, chunk_users=100, n_jobs=2)
    for name in ("train.csv", "questions.csv", "lectures.csv", "demo_truth.csv"):
        assert filecmp.cmp(one / name, two / name, shallow=False), name

    train = pd.read_csv(one / "train.csv")
    truth = pd.read_csv(one / "demo_truth.csv")
    assert summary["chunks"] == 4 and summary["rows"] == len(train)
    assert (train["row_id"].to_numpy() == np.arange(len(train))).all()
    user = train["user_id"].to_numpy()
    assert (np.diff(user) >= 0).all(), "rows ordered by user_id across chunks"
    assert len(np.unique(user)) == config.n_users == summary["students"]
    time_steps = np.diff(train["timestamp"].to_numpy())[np.diff(user) == 0]
    assert (time_steps >= 0).all(), "each history in time order"
    questions = train.loc[train["content_type_id"] == 0, "row_id"].to_numpy()
    assert (truth["row_id"].to_numpy() == questions).all()
    assert truth["p_true"].between(0.25, 1.0).all()
    assert train["content_id"][train["content_type_id"] == 0].max() < 13_523


STAGE_LINES = (
    "| 00 demo data (parallel) |",
    "| 01 preprocess |",
    "| 02 folds |",
    "| 03 training, d256 2+2",
    "| 03's batch builder alone |",
    "| 04 streaming, emulated API (d256) |",
    "| 04's trees and Kaggle export |",
    "| 04 streaming, Kaggle path (d256) |",
)


def table_after(text: str, header: str) -> list[str]:
    """The body lines of the Markdown table whose header line starts with `header`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    body = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        body.append(line)
    return body


def test_the_whole_stream_is_projected_from_its_builds_and_steps():
    """A sample's cache builds and steps apart: 5 builds in 5 s of its 10 s for 100 rows
    (steps 0.05 s a row); the whole stream's 1,000 rows and 20 continuing students
    (20 builds): 50 s + 20 s, so 14 rows/s."""
    timing = {"rows": 100, "seconds": 10.0, "cache_builds": 5, "build_seconds": 5.0}
    timing["rows_per_s_without_builds"] = 100 / (10.0 - 5.0)  # as stream_loop gives it
    whole = {"question_rows": 1000, "students": 30, "new_students": 10}
    text = whole_stream_rate(timing, whole)
    assert "(1,000 ms each), the steps alone 20 rows/s" in text
    assert "(1,000 rows, 20 builds) projected at 14 rows/s" in text
    assert whole_stream_rate({"rows": 100, "seconds": 10.0}, whole) == ""  # older figures


@pytest.mark.slow
def test_tiny_rehearsal_reports_every_stage(tmp_path):
    results = tmp_path / "full_scale.txt"
    command = [
        sys.executable,
        *("-m", "bench.rehearsal.full_scale"),  # from the repository root
        # one generating process: the parallel generator has its test above
        *("--scale", "0.0005", "--chunk-users", "100", "--jobs", "1", "--threads", "1"),
        *("--train-steps", "1", "--train-warmup", "1", "--batch-size", "8"),
        *("--batch-seconds", "1", "--stream-rows", "200", "--kaggle-rows", "100"),
        *("--profile-rows", "100", "--count-groups", "2"),
        *("--tree-students", "40"),  # a sample of the students, as at Riiid's size
        *("--work-dir", str(tmp_path / "work"), "--results", str(results)),
    ]
    done = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    text = results.read_text()
    table = table_after(text, "| stage | what ran |")
    for start in STAGE_LINES:
        lines = [line for line in table if line.startswith(start)]
        assert len(lines) == 1, f"{start!r} missing from the stage table:\n{text}"
        cells = [cell.strip() for cell in lines[0].strip("|").split("|")]
        wall, rate, rss = cells[2], cells[3], cells[4]
        assert float(wall) >= 0 and re.search(r"\d", rate) and float(rss) > 0, lines[0]
    for heading in ("Data: 0.0005 of the real train.csv", "One GPU, projected", "cProfile"):
        assert heading in text
    assert "submitting the blend" in text, "the Kaggle path streams the bundle's blend"
    for start in ("| 04 streaming, emulated API", "| 04 streaming, Kaggle path"):
        line = next(line for line in table if line.startswith(start))
        assert "cache builds took" in line and "the steps alone" in line, line
    assert "the feature state took" in next(line for line in table if "Kaggle path" in line)
    projection = "\n".join(table_after(text, "| stage | measured here, per unit |"))
    for stage in ("03 training step", "03's batch builder (host CPU)", "04 streaming, d256"):
        assert f"| {stage}" in projection, f"{stage} missing from the GPU projection"
    assert str(tmp_path) not in text, "machine paths are written relative"
    assert "command     python -m bench.rehearsal.full_scale --scale 0.0005" in text
