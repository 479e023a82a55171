"""The pipeline as a user runs it: 00 -> 05 through the command line, each script in its
own process, on a tiny demo (the one test that launches every stage as a shell would)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import run_numbered_script

TINY_MODEL = ("--d-model", 16, "--heads", 2, "--layers", 1, "--window", 20, "--batch-size", 16)


@pytest.mark.slow
def test_every_stage_from_the_command_line(tmp_path: Path) -> None:
    input_dir, output_dir = tmp_path / "input", tmp_path / "output"
    stages = [
        ("00_make_demo_input.py", "--users", 60, "--max-events", 1000, "--output-dir", input_dir),
        ("01_preprocess.py", "--input-dir", input_dir, "--output-dir", output_dir, "--no-progress"),
        ("02_make_folds.py", "--output-dir", output_dir, "--n-folds", 3),
        ("03_train.py", "--output-dir", output_dir, *TINY_MODEL, "--epochs", 2, "--no-progress"),
        ("04_infer.py", "--output-dir", output_dir, "--no-progress"),
        ("05_evaluate.py", "--input-dir", input_dir, "--output-dir", output_dir, "--bootstrap", 20),
    ]
    for script, *args in stages:
        done = run_numbered_script(script, *args, process=True)
        assert done.returncode == 0, f"{script}: {done.stdout}{done.stderr}"
        assert "Traceback" not in done.stderr
    submission = pd.read_csv(output_dir / "fold0" / "submission.csv")
    streamed = pd.read_parquet(output_dir / "fold0" / "stream_predictions.parquet")
    assert len(submission) == len(streamed) > 0
    assert submission["answered_correctly"].between(0, 1).all()
    kaggle = output_dir / "kaggle"  # the Kaggle dataset and notebook
    assert (kaggle / "dataset" / "code" / "common" / "kaggle_notebook.py").exists()
    assert (kaggle / "kernel" / "kernel-metadata.json").exists()
    report = (output_dir / "report.md").read_text()
    assert "## Headline" in report and "model AUC" in done.stdout
