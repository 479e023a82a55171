"""The pipeline as a user runs it: 00 -> 05 through the command line, each script in its
own process, on a tiny demo (the one test that launches every stage as a shell would)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from common.data.arrays import TrainArrays
from common.data.fold_data import Fold
from common.model.trees.forest import logit_blend
from common.workspace import ModelFolder, Workspace
from tests.helpers import RUN, run_numbered_script


def blend_weight(folder: ModelFolder) -> float:
    return json.loads(folder.blend.read_text())["weight"]


TINY_MODEL = ("--d-model", 16, "--heads", 2, "--layers", 1, "--window", 20, "--batch-size", 16)


@pytest.mark.slow
def test_every_stage_from_the_command_line(tmp_path: Path) -> None:
    """The README's all-folds workflow: every fold trained and streamed in one command
    each, the report, the runs table (in-process: printing it needs no process of its
    own). The Kaggle export of one fold's model: tests/test_reliability.py, test_kaggle.py."""
    input_dir, output_dir = tmp_path / "input", tmp_path / "output"
    stages = [
        ("00_make_demo_input.py", "--users", 60, "--max-events", 500, "--output-dir", input_dir),
        ("01_preprocess.py", "--input-dir", input_dir, "--output-dir", output_dir, "--no-progress"),
        ("02_make_folds.py", "--output-dir", output_dir, "--n-folds", 2),
        ("03_train.py", "--output-dir", output_dir, "--run", RUN, "--fold", "all", *TINY_MODEL,
         "--epochs", 2, "--no-progress"),
        ("04_infer.py", "--output-dir", output_dir, "--fold", "all", "--no-progress"),
        ("05_evaluate.py", "--input-dir", input_dir, "--output-dir", output_dir, "--bootstrap", 20),
    ]  # fmt: skip
    for script, *args in stages:
        done = run_numbered_script(script, *args, process=True)
        assert done.returncode == 0, f"{script}: {done.stdout}{done.stderr}"
        assert "Traceback" not in done.stderr
    listed = run_numbered_script("05_evaluate.py", "--output-dir", output_dir, "--runs")
    assert listed.returncode == 0, listed.stderr
    workspace = Workspace(output_dir)
    run = workspace.run(RUN)
    fold0 = run.fold(0)
    validation = pd.read_csv(fold0.validation_predictions)
    streamed = pd.read_parquet(fold0.stream_predictions)
    assert len(validation) == len(streamed) > 0
    assert validation["answered_correctly"].between(0, 1).all()
    assert not list(output_dir.rglob("submission.csv"))  # only the competition gets one
    assert not run.kaggle.path.exists()  # a bundle ships one model: not from a fold list

    # out-of-fold predictions: every streamed question row of every fold, once
    # 04 submits the blend of the model and the trees: its parts are kept beside it
    assert streamed["prediction"].tolist() == validation["answered_correctly"].tolist()
    blended = logit_blend(
        streamed["model_prediction"], streamed["trees_prediction"], blend_weight(fold0)
    )
    np.testing.assert_allclose(streamed["prediction"], blended, atol=1e-12)
    assert not np.allclose(streamed["prediction"], streamed["model_prediction"])
    oof = pd.read_parquet(run.oof)
    assert list(oof.columns) == [
        "row_id", "fold", "prediction", "label", "model_prediction", "trees_prediction"
    ]  # fmt: skip
    arrays = TrainArrays.load(workspace.data)
    row_id, kind = np.asarray(arrays["row_id"]), np.asarray(arrays["content_type_id"])
    expected = []
    for k in range(2):
        stream = Fold.load(workspace, k).stream_index
        expected.append(pd.DataFrame({"row_id": row_id[stream[kind[stream] == 0]], "fold": k}))
    expected = pd.concat(expected).sort_values("row_id").reset_index(drop=True)
    got = oof.sort_values("row_id").reset_index(drop=True)
    assert oof["row_id"].is_unique and got[["row_id", "fold"]].equals(
        expected.astype(got.dtypes[["row_id", "fold"]])
    )
    labels = pd.Series(np.asarray(arrays["answered_correctly"]), index=row_id)[got["row_id"]]
    assert np.array_equal(got["label"].to_numpy(), labels.to_numpy())
    # row_folds.csv says the same: a row is validation in fold k exactly when fold k streams it
    row_folds = pd.read_csv(workspace.folds.row_folds)
    assert row_folds["row_id"].tolist() == row_id.tolist()  # one line per row, file order
    questions = row_folds[kind == 0]
    valid = questions[questions["role"] == "validation"].sort_values("row_id")
    assert valid["row_id"].tolist() == got["row_id"].tolist()
    assert valid["fold"].tolist() == got["fold"].tolist()

    # the runs table: 2 trained folds, 2 streamed, one report
    runs = pd.read_csv(workspace.runs_table)
    assert runs["stage"].value_counts().to_dict() == {"train": 2, "stream": 2, "evaluate": 1}
    assert set(runs["run"]) == {RUN}
    report_row = runs[runs["stage"] == "evaluate"].iloc[0]
    assert report_row["folds"] == "0,1" and 0.5 < report_row["stream_auc"] < 1
    assert f"{report_row['stream_auc']:.4f}" in listed.stdout  # --runs shows it
    report = run.report_file.read_text()
    assert report.startswith(f"# Evaluation report: run {RUN}")
    assert "## Run" in report and "## Headline" in report and "Fold mean" in report
