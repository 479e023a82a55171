"""bench/kt/run.py: one end-to-end run (00 -> 05 as subprocesses) on a tiny slice of the
real ASSISTments 2009 files, its section in the --results file, restarted once; and the
lock on a model dir's report."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys

import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from bench.fold_run import FoldRun
from bench.kt.run import main as kt_main
from bench.kt.run import report_lock
from common.workspace import Workspace
from tests.helpers import REPO, SHARED_DATA, shared_file


@pytest.mark.slow
def test_tiny_slice_runs_end_to_end_and_restarts(tmp_path, capsys):
    shared_file("assist2009_pid_akt", "assist2009_pid_test1.csv")
    kept = tmp_path / "kt.txt"
    work = tmp_path / "work"
    command = [
        sys.executable,
        *("-m", "bench.kt.run"),  # from the repository root, as BENCHMARKS.md runs it
        *("--datasets", "assist2009_pid", "--models", "saint", "baselines", "--slice", "40"),
        *("--folds", "0", "--epochs", "1", "--d-model", "16", "--heads", "2"),
        *("--layers", "1", "--window", "20", "--batch-size", "16", "--bootstrap", "0"),
        *("--work-dir", work, "--results", kept, "--source-root", SHARED_DATA),
    ]
    command = [str(c) for c in command]
    first = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]

    results = list(work.glob("assist2009_pid-keep-akt5-slice40/saint-*/results/fold0.json"))
    assert len(results) == 1, sorted(str(p) for p in work.rglob("*.json"))
    result = json.loads(results[0].read_text())
    # the model's AUC is that of its own streamed predictions of the fold
    folder = FoldRun(Workspace(results[0].parents[1])).folder  # the model dir's fold 0
    assert folder.path == results[0].parents[1] / "runs" / "bench" / "fold0"
    streamed = pd.read_parquet(folder.stream_predictions)
    recomputed = roc_auc_score(streamed["answered_correctly"], streamed["prediction"])
    assert result["scores"]["model"]["auc"] == pytest.approx(recomputed, abs=1e-12)
    baselines = ("question rate", "student + question", "trees")
    assert set(result["scores"]) == {"model", *baselines}
    # the baseline-only run scores the same rows as 05 did beside the model, in-process
    alone = work.glob("assist2009_pid-keep-akt5-slice40/baselines-*/results/fold0.json")
    alone = json.loads(next(alone).read_text())
    for name in baselines:
        assert alone["scores"][name]["rows"] == result["scores"][name]["rows"]
        assert alone["scores"][name]["auc"] == pytest.approx(result["scores"][name]["auc"])
    assert result["stream_rows"] == result["scores"]["model"]["rows"] > 0
    assert len(result["commands"]) == 3

    section = kept.read_text()
    assert section.startswith("## Public knowledge-tracing datasets (bench/kt/run.py)")
    assert "`python -m bench.kt.run --datasets assist2009_pid" in section
    assert "| assist2009_pid (akt5) | SAINT |" in section
    assert "| assist2009_pid (akt5) | baseline: question rate |" in section
    boosted = alone["scores"]["trees"]["auc"]
    assert f"| assist2009_pid (akt5) | baseline: trees | {boosted:.4f} |" in section
    # the table's AUCs (one fold: no ± part) are the fold's, as recomputed above
    auc, rate = (result["scores"][s]["auc"] for s in ("model", "question rate"))
    assert f"| assist2009_pid (akt5) | SAINT | {auc:.4f} |" in section
    assert f"| assist2009_pid (akt5) | baseline: question rate | {rate:.4f} |" in section
    assert "Slice run" in section

    # the restart and the table need no process of their own: main() in this one
    assert kt_main(command[3:]) == 0
    again = capsys.readouterr().out
    assert "skip:" in again and "train fold" not in again

    # --table-only runs nothing and rewrites the results file from the finished fold
    kept.unlink()
    assert kt_main([*command[3:], "--table-only"]) == 0
    table = capsys.readouterr().out
    assert "preparing" not in table and "skip:" not in table
    assert "| assist2009_pid (akt5) | SAINT |" in kept.read_text()


def test_report_lock_excludes_a_second_holder_until_released(tmp_path):
    """Two KT benchmark jobs on one model dir take turns at 05 and its read-back."""
    model_dir = Workspace(tmp_path / "model")

    def try_lock() -> bool:
        with open(model_dir.path / "report.lock", "w") as other:
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(other, fcntl.LOCK_UN)
            return True

    with report_lock(model_dir):
        assert not try_lock()
    assert try_lock()
