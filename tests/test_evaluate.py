"""05_evaluate: metrics against hand-computed answers, the baselines' use of information
(no future rows, training rows only), and the report of a tiny streamed run."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from common.data.arrays import TrainArrays
from common.data.dataset import Dataset
from common.data.features import build_sequences
from common.data.fold_data import Fold, FoldMismatchError, fold_fingerprint, load_fold_data
from common.data.folds import FoldConfig, make_folds
from common.data.past_features import past_features
from common.data.question_rates import question_rates, training_entries
from common.files import json_values
from common.metrics import (
    bootstrap_auc_interval,
    f1_optimal_threshold,
    score_metrics,
    threshold_metrics,
)
from common.model.trees import blending as blend
from common.model.trees.boosting import TreesConfig
from common.report.baselines import revealed_history, student_question_blend
from common.report.evaluate import EvaluateConfig, evaluate, slice_table
from common.report.scored_rows import container_sizes, selection_note
from common.runs.artefacts import inner_predictions
from common.stream.emulator import Emulator
from common.workspace import FoldsFolder, ModelFolder, Workspace
from tests.helpers import RUN, fold0_folder, run_of

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Eight rows: positives score 0.9 0.8 0.7 0.4, negatives 0.6 0.3 0.2 0.1.
LABELS = np.array([1, 1, 1, 1, 0, 0, 0, 0])
SCORES = np.array([0.9, 0.8, 0.7, 0.4, 0.6, 0.3, 0.2, 0.1])


def test_metrics_at_half_match_hand_counts():
    # >= 0.5: 0.9 0.8 0.7 (TP) and 0.6 (FP); 0.4 is a FN; 0.3 0.2 0.1 are TN.
    m = threshold_metrics(LABELS, SCORES, 0.5)
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (3, 1, 3, 1)
    assert m["accuracy"] == pytest.approx(6 / 8)
    assert m["precision"] == pytest.approx(3 / 4)
    assert m["recall"] == pytest.approx(3 / 4)
    assert m["fall_out"] == pytest.approx(1 / 4)
    assert m["specificity"] == pytest.approx(3 / 4)
    assert m["f1"] == pytest.approx(3 / 4)


def test_f1_optimal_threshold_is_found():
    # Thresholds and F1: 0.7 -> P 1, R 3/4, F1 6/7; 0.4 -> P 4/5, R 1, F1 8/9 (best);
    # 0.3 -> P 4/6, R 1, F1 4/5; 0.1 -> P 1/2, R 1, F1 2/3.
    assert f1_optimal_threshold(LABELS, SCORES) == pytest.approx(0.4)
    m = threshold_metrics(LABELS, SCORES, 0.4)
    assert m["f1"] == pytest.approx(8 / 9)
    assert m["accuracy"] == pytest.approx(7 / 8)
    assert m["fall_out"] == pytest.approx(1 / 4)


# Eight rows where every pair of metrics differs: positives 0.9 0.8 0.3, negatives 0.7
# 0.6 0.55 0.2 0.1.
SKEWED_LABELS = np.array([1, 1, 1, 0, 0, 0, 0, 0])
SKEWED_SCORES = np.array([0.9, 0.8, 0.3, 0.7, 0.6, 0.55, 0.2, 0.1])


def test_threshold_metrics_on_a_skewed_hand_case():
    # >= 0.5: TP 0.9 0.8; FN 0.3; FP 0.7 0.6 0.55; TN 0.2 0.1
    m = threshold_metrics(SKEWED_LABELS, SKEWED_SCORES, 0.5)
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (2, 3, 2, 1)
    assert m["precision"] == pytest.approx(2 / 5)
    assert m["recall"] == pytest.approx(2 / 3)
    assert m["fall_out"] == pytest.approx(3 / 5)  # not 1 - recall (1/3)
    assert m["specificity"] == pytest.approx(2 / 5)
    assert m["accuracy"] == pytest.approx(4 / 8)
    assert m["f1"] == pytest.approx(2 * (2 / 5) * (2 / 3) / (2 / 5 + 2 / 3))
    # best F1: at 0.8, P 1, R 2/3, F1 4/5 (at 0.3: P 1/2, R 1, F1 2/3; at 0.7: 2/3)
    full = score_metrics(SKEWED_LABELS, SKEWED_SCORES)
    assert full["best_f1_threshold"] == pytest.approx(0.8)
    assert full["f1_at_best_f1"] == pytest.approx(4 / 5)
    assert full["precision_at_best_f1"] == pytest.approx(1.0)
    assert full["recall_at_best_f1"] == pytest.approx(2 / 3)
    assert full["fall_out_at_best_f1"] == pytest.approx(0.0)
    assert full["specificity_at_best_f1"] == pytest.approx(1.0)
    assert full["accuracy_at_best_f1"] == pytest.approx(7 / 8)
    assert full["precision_at_half"] == pytest.approx(2 / 5)
    assert full["recall_at_half"] == pytest.approx(2 / 3)
    assert full["fall_out_at_half"] == pytest.approx(3 / 5)


def test_slice_table_by_hand():
    """Two new students' rows and three continuing ones, with their own labels and
    scores: each slice row counts its own rows."""
    rows = pd.DataFrame(
        {
            "label": [1, 0, 1, 1, 0],
            "model": [0.9, 0.2, 0.3, 0.8, 0.4],
            "new_student": [True, True, False, False, False],
            "part": [1, 1, 2, 5, 5],
            "history_length": [0, 1, 50, 500, 5000],
            "container_size": [1, 1, 2, 2, 5],
        }
    )
    table = slice_table(rows).set_index(["slice", "value"])
    new, continuing = table.loc[("student", "new")], table.loc[("student", "continuing")]
    assert (new["rows"], continuing["rows"]) == (2, 3)
    assert new["share_correct"] == pytest.approx(1 / 2)
    assert continuing["share_correct"] == pytest.approx(2 / 3)
    assert new["auc_model"] == 1.0  # 0.9 over 0.2
    assert continuing["auc_model"] == pytest.approx(1 / 2)  # 0.8 > 0.4 > 0.3
    assert table.loc[("part", "5"), "rows"] == 2 and table.loc[("part", "2"), "rows"] == 1
    history = table.loc["history length"]["rows"].to_dict()
    assert history == {"0": 1, "1-10": 1, "11-100": 1, "101-1000": 1, ">1000": 1}
    assert table.loc[("container size", "2"), "rows"] == 2
    assert table.loc[("container size", "5+"), "rows"] == 1


def test_score_metrics_match_hand_values():
    m = score_metrics(LABELS, SCORES)
    # 16 positive-negative pairs; only 0.4 < 0.6 is misordered.
    assert m["auc"] == pytest.approx(15 / 16)
    # Each class has errors 0.1 0.2 0.3 0.6: squared sum 0.5 per class.
    assert m["brier"] == pytest.approx(1.0 / 8)
    expected_log_loss = -(math.log(0.9) + math.log(0.8) + math.log(0.7) + math.log(0.4)) / 4
    assert m["log_loss"] == pytest.approx(expected_log_loss)
    assert m["rows"] == 8 and m["share_positive"] == pytest.approx(0.5)
    assert m["best_f1_threshold"] == pytest.approx(0.4)
    assert m["f1_at_best_f1"] == pytest.approx(8 / 9)
    assert m["recall_at_half"] == pytest.approx(3 / 4)


def test_bootstrap_interval_brackets_auc_and_is_reproducible():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 400)
    scores = (labels * 0.3 + rng.random(400)) / 1.3
    auc = score_metrics(labels, scores)["auc"]
    low, high = bootstrap_auc_interval(labels, scores, 100, seed=3)
    assert low < auc < high and high - low < 0.2
    assert (low, high) == bootstrap_auc_interval(labels, scores, 100, seed=3)
    assert all(np.isnan(bootstrap_auc_interval(labels, scores, 0, seed=3)))


# ---------------------------------------------------------------------------------------
# baselines on a hand-made stream


def hand_arrays(correct: list[int]) -> TrainArrays:
    """Three students, one row each line:

    student 10 (cut at row 3)  r0 t0 q1 | r1 t10 q2 | r2 t20 lecture || r3 t30 q1, r4 t30 q3
                               (one container) | r5 t40 q2
    student 20 (new, cut 0)    r6 t0 q1 | r7 t5 q2
    student 30 (training only) r8 t0 q1 | r9 t1 q3
    """
    content_type = np.array([0, 0, 1, 0, 0, 0, 0, 0, 0, 0], dtype=np.int8)
    columns = {
        "row_id": np.arange(10, dtype=np.int64),
        "timestamp": np.array([0, 10, 20, 30, 30, 40, 0, 5, 0, 1], dtype=np.int64),
        "content_id": np.array([1, 2, 7, 1, 3, 2, 1, 2, 1, 3], dtype=np.int16),
        "content_type_id": content_type,
        "task_container_id": np.array([0, 1, 2, 3, 3, 4, 0, 1, 0, 1], dtype=np.int16),
        "user_answer": np.where(content_type == 0, 0, -1).astype(np.int8),
        "answered_correctly": np.array(correct, dtype=np.int8),
        "prior_question_elapsed_time": np.full(10, np.nan, dtype=np.float32),
        "prior_question_had_explanation": np.full(10, -1, dtype=np.int8),
    }
    users = np.array([10, 20, 30], dtype=np.int32)
    offsets = np.array([0, 6, 8, 10], dtype=np.int64)
    return TrainArrays(users=users, offsets=offsets, columns=columns)


HAND_CORRECT = [1, 0, -1, 1, 0, 1, 0, 0, 1, 1]
HAND_CUT_ROW = np.array([3, 6, 10])  # global row of each student's cut
STREAM_ROWS = np.array([3, 4, 5, 6, 7])


def hand_sequences(correct: list[int]):
    sequences = build_sequences(hand_arrays(correct), np.zeros(8, dtype=np.int8))
    entries = np.searchsorted(sequences.row, STREAM_ROWS)
    return sequences, entries


def test_question_rates_use_training_rows_only():
    sequences, _ = hand_sequences(HAND_CORRECT)
    train = training_entries(sequences, HAND_CUT_ROW)
    assert sequences.row[train].tolist() == [0, 1, 8, 9]
    rates = question_rates(sequences, train, n_questions=5, prior=1.0)
    # training answers: q1 right twice (r0, r8), q2 wrong once (r1), q3 right once (r9)
    assert rates.global_rate == pytest.approx(3 / 4)
    assert rates(np.array([1, 2, 3, 4])) == pytest.approx(
        [(2 + 0.75) / 3, (0 + 0.75) / 2, (1 + 0.75) / 2, 0.75]
    )
    assert rates(np.array([99]))[0] == pytest.approx(0.75)  # beyond the table: global

    flipped = list(HAND_CORRECT)
    for row in STREAM_ROWS:  # the stream's outcomes must not move the rates
        flipped[row] = 1 - flipped[row]
    again = question_rates(hand_sequences(flipped)[0], train, n_questions=5, prior=1.0)
    np.testing.assert_array_equal(again.rate, rates.rate)


def test_running_mean_counts_only_earlier_containers():
    sequences, entries = hand_sequences(HAND_CORRECT)
    n, correct = revealed_history(sequences, entries)
    # r3 and r4 share a container: both see r0 (right) and r1 (wrong) only; r5 sees r0,
    # r1, r3, r4; the new student's r6 sees nothing and r7 sees r6.
    assert n.tolist() == [2, 2, 4, 0, 1]
    assert correct.tolist() == [1, 1, 2, 0, 0]
    blend = student_question_blend(n, correct, np.full(5, 0.6), prior=2.0)
    assert blend == pytest.approx([(1 + 1.2) / 4, (1 + 1.2) / 4, (2 + 1.2) / 6, 0.6, 1.2 / 3])
    assert container_sizes(sequences, entries).tolist() == [2, 2, 1, 1, 1]
    assert (entries - sequences.offsets[[0, 0, 0, 1, 1]]).tolist() == [2, 3, 4, 0, 1]


def test_running_mean_ignores_own_container_and_later_rows():
    sequences, entries = hand_sequences(HAND_CORRECT)
    n_before, correct_before = revealed_history(sequences, entries)
    flipped = list(HAND_CORRECT)
    for row in (3, 5, 7):  # r3: r3/r4's own container; r5 and r7: later rows
        flipped[row] = 1 - flipped[row]
    n_after, correct_after = revealed_history(*hand_sequences(flipped))
    np.testing.assert_array_equal(n_after, n_before)
    # r3, r4 (own container flipped), r6 (later r7 flipped) see the same outcomes ...
    assert correct_after[[0, 1, 3]].tolist() == correct_before[[0, 1, 3]].tolist()
    # ... and r5 does see the earlier container's r3
    assert correct_after[2] == correct_before[2] - 1

    # Any relabelling of a row's own container and everything after it leaves the row's
    # value unchanged.
    rng = np.random.default_rng(0)
    first_of_container = {3: 3, 4: 3, 5: 5, 6: 6, 7: 7}
    student_end = {3: 6, 4: 6, 5: 6, 6: 8, 7: 8}
    for i, row in enumerate(STREAM_ROWS):
        for _ in range(5):
            relabelled = list(HAND_CORRECT)
            for later in range(first_of_container[row], student_end[row]):
                relabelled[later] = int(rng.integers(0, 2))
            n, correct = revealed_history(*hand_sequences(relabelled))
            assert (n[i], correct[i]) == (n_before[i], correct_before[i])


# ---------------------------------------------------------------------------------------
# the report of a tiny streamed run


def write_stream_predictions(output_dir: Path, input_dir: Path, fold_index: int, seed: int):
    """Stream the fold through the emulator with a noisy copy of the true probability,
    and write what 04_infer.py writes for 05 (predictions and a history, with 04's trees
    and blend, `stream_with_trees`)."""
    workspace = Workspace(output_dir)
    arrays = TrainArrays.load(workspace.data)
    fold = Fold.load(workspace, fold_index)
    truth = pd.read_csv(input_dir / "demo_truth.csv").set_index("row_id")["p_true"]
    rng = np.random.default_rng(seed)
    env = Emulator.from_fold(arrays, fold)
    for _, sample in env.iter_test():
        p = truth.reindex(sample["row_id"].to_numpy()).to_numpy()
        sample = sample.copy()
        sample["answered_correctly"] = np.clip(p + rng.normal(0, 0.15, len(p)), 0.01, 0.99)
        env.predict(sample)
    results = env.results()
    student = np.searchsorted(arrays.offsets, results["global_row"].to_numpy(), side="right") - 1
    results["new_student"] = fold.user_cut[student] == 0
    folder = workspace.run(RUN).fold(fold_index)
    folder.path.mkdir(parents=True, exist_ok=True)
    summary = {
        "fold_fingerprint": fold_fingerprint(workspace, fold_index),
        "checkpoint": "-",
        "checkpoint_epoch": 3,
    }
    # what 03 writes beside best.pt: the inner split's predictions (a noisier copy)
    data = load_fold_data(workspace, fold_index, inner_share=0.1, seed=0)
    inner_rows = data.sequences.row[data.inner_tails.flat_index(data.sequences)]
    p = truth.reindex(np.asarray(arrays["row_id"])[inner_rows]).to_numpy()
    noisy = np.clip(p + rng.normal(0, 0.3, len(p)), 0.01, 0.99)
    inner = pd.DataFrame({"global_row": inner_rows, "prediction": noisy, "epoch": 3})
    inner.to_parquet(folder.inner_predictions, index=False)
    results, summary = stream_with_trees(workspace, folder, fold, results, summary)
    results.to_parquet(folder.stream_predictions, index=False)
    folder.stream_summary.write_text(json.dumps(summary))
    history = pd.DataFrame(
        {
            "epoch": [1, 2, 3],
            "train_loss": [0.62, 0.58, 0.56],
            "inner_loss": [0.61, 0.58, 0.575],
            "inner_auc": [0.67, 0.70, 0.71],
            "fold_loss": [0.60, 0.57, 0.565],
            "fold_auc": [0.68, 0.71, 0.72],
        }
    )
    history.to_csv(folder.history, index=False)


# the trees these tests fit: 04's settings but fewer rounds (what they check does not
# depend on how good the trees are, and 300 rounds took most of the fixture's time)
TREES = TreesConfig(boost_rounds=40)


def stream_with_trees(
    workspace: Workspace, folder, fold: Fold, results: pd.DataFrame, summary: dict
) -> tuple[pd.DataFrame, dict]:
    """What 04 adds to a fold's stream with its trees (common.model.trees.blending's
    fold_blend_bundle, as 04 calls it): the bundle beside the checkpoint, the model's and
    the trees' own columns, the blend submitted, and the blend record in the summary."""
    data = Dataset.load(workspace)
    epoch = summary["checkpoint_epoch"]
    bundle = blend.fold_blend_bundle(inner_predictions(folder), fold, data, epoch, TREES)
    bundle.save(folder)
    entries = np.searchsorted(data.sequences.row, results["global_row"].to_numpy())
    features = past_features(data.sequences, entries, bundle.skill, bundle.rates)
    model, trees = results["prediction"].to_numpy(), bundle.trees.probability(features)
    results["model_prediction"], results["trees_prediction"] = model, trees
    results["prediction"] = bundle.blend(model, trees)
    summary |= {
        "submitted": "blend",
        "blend": bundle.record | {"weight": bundle.weight},
        "trees_config": json_values(asdict(TREES)),
    }
    return results, summary


@pytest.fixture(scope="module")
def tiny_run(demo_input: Path, demo_output: Path, tmp_path_factory) -> Path:
    """The session's 150-student demo (through 01) with its own folds (02) and stream
    predictions for folds 0 and 1; demo_input holds demo_truth.csv."""
    output_dir = tmp_path_factory.mktemp("evaluate") / "output"
    workspace = Workspace(output_dir)
    shutil.copytree(Workspace(demo_output).data.path, workspace.data.path)
    make_folds(workspace, FoldConfig(n_folds=5, seed=0))
    for k in (0, 1):
        write_stream_predictions(output_dir, demo_input, k, seed=k)
    return output_dir


@pytest.fixture(scope="module")
def tiny_report(tiny_run: Path, demo_input: Path, run_script) -> tuple[Path, str]:
    loads = []  # the folds 05 reads from disk (each read hashes the file)
    load = Fold.load.__func__
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            Fold, "load", classmethod(lambda cls, ws, k: loads.append(k) or load(cls, ws, k))
        )
        result = run_script(
            "05_evaluate.py",
            "--output-dir",
            tiny_run,
            "--input-dir",
            demo_input,
            "--bootstrap",
            "50",
            "--no-progress",
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    assert loads == [0, 1]  # each fold read once, for its rows and its blend alike
    return tiny_run, result.stdout


@pytest.mark.slow
def test_report_has_tables_and_headline(tiny_report):
    output_dir, stdout = tiny_report
    run = run_of(output_dir)
    report = run.report_file.read_text()
    for heading in ("## Headline", "## Metrics", "## Slices", "## Figures", "## How measured"):
        assert heading in report
    assert report.index("## Headline") < report.index("## Metrics")
    assert "Oracle AUC" in report and "oracle AUC" in report
    assert "model AUC" in stdout and "oracle AUC" in stdout and "report.md" in stdout
    assert "Checkpoints: fold 0: - (epoch 3), named by hand; fold 1:" in report
    assert "**Blend AUC" in report and "No blend" not in report
    # the trees' permutation importance on the inner splits: named, largest first, plotted
    summary = json.loads(run.report.summary.read_text())
    importance = summary["tree_importance"]  # (summary.json's keys are sorted by name)
    top = max(importance, key=lambda name: importance[name][0])
    assert len(importance) > 10 and importance[top][0] > 0
    assert f"The trees lean most on {top} ({importance[top][0]:.4f})" in report

    metrics = pd.read_csv(run.report.table("metrics", "csv"))
    assert set(metrics["fold"].astype(str)) == {"0", "1", "pooled"}
    assert set(metrics["scorer"]) == {
        "model",
        "blend: model + trees",
        "question rate",
        "student + question",
        "trees",
        "oracle",
    }
    pooled = metrics[(metrics["fold"].astype(str) == "pooled")].set_index("scorer")
    model = pooled.loc["model"]
    assert model["auc_ci_low"] < model["auc"] < model["auc_ci_high"]
    per_fold = metrics[metrics["scorer"] == "model"]["rows"].to_numpy()
    assert per_fold[-1] == per_fold[:-1].sum()  # pooled = folds together
    # the oracle scores the true probability: the baselines must not beat it
    assert pooled.loc["oracle", "auc"] > pooled.loc["question rate", "auc"]
    # the trees learn the students: above both simple baselines
    assert pooled.loc["trees", "auc"] > pooled.loc["student + question", "auc"]
    summary = json.loads(run.report.summary.read_text())
    assert set(summary["blend"]) == {"0", "1"}
    assert summary["blend_auc"] == pytest.approx(pooled.loc["blend: model + trees", "auc"])

    slices = pd.read_csv(run.report.table("slices", "csv"), keep_default_na=False)
    # new and continuing rows counted from the folds themselves (cut 0: new)
    arrays = TrainArrays.load(run.workspace.data)
    expected = {"new": 0, "continuing": 0}
    for k in (0, 1):
        fold = Fold.load(run.workspace, k)
        stream = fold.stream_index[np.asarray(arrays["content_type_id"])[fold.stream_index] == 0]
        student = np.searchsorted(arrays.offsets, stream, side="right") - 1
        expected["new"] += int((fold.user_cut[student] == 0).sum())
        expected["continuing"] += int((fold.user_cut[student] > 0).sum())
    by_value = slices[slices["slice"] == "student"].set_index("value")["rows"].to_dict()
    assert by_value == expected and min(expected.values()) > 100
    kinds = set(slices["slice"])
    assert {"all", "student", "part", "history length", "container size"} <= kinds
    assert slices[slices["slice"] == "student"]["rows"].sum() == model["rows"]
    assert slices[slices["slice"] == "history length"]["rows"].sum() == model["rows"]
    assert slices[slices["slice"] == "container size"]["rows"].sum() == model["rows"]


@pytest.mark.slow
def test_report_figures_are_png(tiny_report):
    output_dir, _ = tiny_report
    run = run_of(output_dir)
    report = run.report_file.read_text()
    for name in ("roc.png", "reliability.png", "training_curves.png", "tree_importance.png"):
        path = run.report.path / name
        assert f"](report/{name})" in report
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        image = plt.imread(path)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


@pytest.mark.slow
def test_labels_in_predictions_are_checked(tiny_run: Path, tmp_path: Path):
    output_dir = tmp_path / "output"
    shutil.copytree(tiny_run, output_dir, ignore=shutil.ignore_patterns("report*"))
    path = fold0_folder(output_dir).stream_predictions
    predictions = pd.read_parquet(path)
    predictions.loc[0, "answered_correctly"] = 1 - predictions.loc[0, "answered_correctly"]
    predictions.to_parquet(path, index=False)
    config = EvaluateConfig(folds=[0], bootstrap=0, progress=False)
    with pytest.raises(ValueError, match="answered_correctly"):
        evaluate(run_of(output_dir), tmp_path / "no_input", config)

    predictions.loc[0, "answered_correctly"] = 1 - predictions.loc[0, "answered_correctly"]
    pd.concat([predictions, predictions.iloc[:1]]).to_parquet(path, index=False)
    with pytest.raises(ValueError, match="once"):
        evaluate(run_of(output_dir), tmp_path / "no_input", config)


@pytest.mark.slow
def test_predictions_of_other_folds_are_refused(tiny_run: Path, tmp_path: Path):
    """Folds made again with another seed: the stream predictions (and the model behind
    them) belong to the old folds, whose training rows the new folds validate on."""
    output_dir = tmp_path / "output"
    shutil.copytree(tiny_run, output_dir, ignore=shutil.ignore_patterns("report*"))
    config = EvaluateConfig(folds=[0], bootstrap=0, progress=False)
    evaluate(run_of(output_dir), tmp_path / "no_input", config)  # the folds it was made with
    old = fold_fingerprint(Workspace(output_dir), 0)["sha256"]
    kept = tmp_path / "kept_folds"
    shutil.copytree(Workspace(output_dir).folds.path, kept)
    make_folds(Workspace(output_dir), FoldConfig(n_folds=5, seed=1))
    new = fold_fingerprint(Workspace(output_dir), 0)["sha256"]
    with pytest.raises(FoldMismatchError, match=f"fingerprint {old}.*fingerprint {new}"):
        evaluate(run_of(output_dir), tmp_path / "no_input", config)
    # the old fold config with another split's cuts (folds of other data, say): refused too
    manifest = Workspace(output_dir).folds.manifest
    shutil.copyfile(FoldsFolder(kept).manifest, manifest)
    with pytest.raises(FoldMismatchError, match=f"fingerprint {old}"):
        evaluate(run_of(output_dir), tmp_path / "no_input", config)


@pytest.mark.slow  # the tiny_run fixture streams two folds
def test_05_reads_the_trees_and_the_blend_04_streamed_and_fits_none(
    tiny_run, tmp_path, monkeypatch
):
    """One owner: 04 fits the trees and chooses the blend's weight; 05 reports the trees'
    and the blend's columns 04 streamed and the weight its summary records, and fits no
    tree nor chooses a weight of its own."""

    def refuse(*args, **kwargs):
        raise AssertionError("05 fitted trees or chose a blend weight: 04 owns them")

    monkeypatch.setattr(HistGradientBoostingClassifier, "fit", refuse)
    monkeypatch.setattr(blend, "fit_trees", refuse)
    monkeypatch.setattr(blend, "choose_weight", refuse)
    output_dir = tmp_path / "output"
    shutil.copytree(tiny_run, output_dir)  # the module's report stays tiny_report's
    run = run_of(output_dir)
    config = EvaluateConfig(bootstrap=0, progress=False)
    head = evaluate(run, tmp_path / "no_input", config)
    for k in (0, 1):
        streamed = pd.read_parquet(run.fold(k).stream_predictions)
        summary = json.loads(run.fold(k).stream_summary.read_text())
        assert head.blend[k]["weight"] == summary["blend"]["weight"]
        auc = score_metrics(streamed["answered_correctly"], streamed["trees_prediction"])["auc"]
        metrics = pd.read_csv(run.report.table("metrics", "csv"))
        rows = metrics[metrics["fold"].astype(str) == str(k)].set_index("scorer")
        assert rows.loc["trees", "auc"] == pytest.approx(auc)
        blend_auc = score_metrics(streamed["answered_correctly"], streamed["prediction"])["auc"]
        assert rows.loc["blend: model + trees", "auc"] == pytest.approx(blend_auc)
    assert head.submitted == "blend: model + trees" and not head.no_blend


@pytest.mark.slow  # the tiny_run fixture streams two folds
def test_a_stream_without_trees_has_no_trees_or_blend_in_the_report(tiny_run, tmp_path):
    """Where 04 ran with --no-trees, 05's report has no trees or blend rows, and says why."""
    output_dir = tmp_path / "output"
    shutil.copytree(tiny_run, output_dir)
    run = run_of(output_dir)
    folder = run.fold(0)
    streamed = pd.read_parquet(folder.stream_predictions)
    streamed["prediction"] = streamed.pop("model_prediction")
    streamed.drop(columns=["trees_prediction"]).to_parquet(folder.stream_predictions)
    summary = json.loads(folder.stream_summary.read_text())
    summary |= {"submitted": "model", "blend": None, "trees_config": None}
    folder.stream_summary.write_text(json.dumps(summary))
    for name in ModelFolder.BLEND_FILES:
        folder.file(name).unlink()
    config = EvaluateConfig(folds=[0], bootstrap=0, progress=False)
    head = evaluate(run, tmp_path / "no_input", config)
    metrics = pd.read_csv(run.report.table("metrics", "csv"))
    assert set(metrics["scorer"]) == {"model", "question rate", "student + question"}
    assert head.blend_auc is None and "trees" not in head.baselines
    report = run.report_file.read_text()
    assert "No blend for fold 0: 04 streamed it without trees (04_infer.py --no-trees)" in report
    assert "Trees and blend: none (04_infer.py streamed the folds with --no-trees)" in report


def test_selection_note_says_what_chose_each_checkpoint():
    note = selection_note(
        {
            0: {"checkpoint": "out/fold0/best.pt", "checkpoint_epoch": 4,
                "checkpoint_selected_on": "inner"},
            1: {"checkpoint": "best.pt", "checkpoint_epoch": 3, "checkpoint_selected_on": "fold"},
            2: {"checkpoint": "epoch_06.pt", "checkpoint_epoch": 6},
        }
    )  # fmt: skip
    assert note == (
        "Checkpoints: fold 0: best.pt (epoch 4), chosen on an inner split of the fold's "
        "training students (neither trained nor selected on the scored rows); fold 1: best.pt "
        "(epoch 3), chosen on these very rows (--select-on fold: optimistic); fold 2: "
        "epoch_06.pt (epoch 6), named by hand."
    )


def test_blend_weight_follows_the_better_scorer():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 4000)
    good = np.clip(0.5 + 0.3 * (labels - 0.5) + rng.normal(0, 0.1, 4000), 0.01, 0.99)
    noise = rng.uniform(0.01, 0.99, 4000)
    assert blend.choose_weight(labels, good, noise) == 1.0
    assert blend.choose_weight(labels, noise, good) == 0.0
    other = np.clip(0.5 + 0.3 * (labels - 0.5) + rng.normal(0, 0.1, 4000), 0.01, 0.99)
    assert 0.0 < blend.choose_weight(labels, good, other) < 1.0  # two views: both count
    np.testing.assert_allclose(blend.logit_blend(good, noise, 1.0), good, rtol=1e-9)


@pytest.mark.slow  # the tiny_run fixture streams two folds
def test_blend_is_chosen_on_the_inner_split_only(tiny_run, monkeypatch):
    """The weight comes from the inner predictions and a baseline fitted without the
    inner rows: the scored rows play no part, and other inner predictions move it."""
    run = run_of(tiny_run)
    data = Dataset.load(run.workspace)
    fold = Fold.load(run.workspace, 0)
    cut_row = data.arrays.offsets[:-1] + fold.user_cut
    fitted_on = []
    real_fit = blend.fit_trees

    def spy(sequences, train, *args, **kwargs):
        fitted_on.append(train.copy())
        return real_fit(sequences, train, *args, **kwargs)

    monkeypatch.setattr(blend, "fit_trees", spy)
    choose = lambda epoch: blend.choose_fold_blend(  # noqa: E731
        inner_predictions(run.fold(0)), fold, data, epoch, TreesConfig()
    )
    choice, reason = choose(3)
    assert reason == "" and choice.inner_rows > 100
    # the trees' permutation importance on those inner rows, largest first
    drops = [mean for mean, _ in choice.importance.values()]
    assert len(drops) > 10 and drops == sorted(drops, reverse=True) and drops[0] > 0
    inner = pd.read_parquet(run.fold(0).inner_predictions)
    entries = np.searchsorted(data.sequences.row, inner["global_row"].to_numpy())
    train = fitted_on[0]
    assert not train[entries].any()  # the baseline never saw the rows that choose
    assert (
        train.sum() > 0
        and not train[
            np.searchsorted(
                data.sequences.row, cut_row[fold.user_cut < np.diff(data.arrays.offsets)]
            )
        ].any()
    )  # nor a scored row

    # the inner predictions decide: replaced by coin flips, the blend leans on the trees
    saved = inner.copy()
    try:
        inner["prediction"] = np.random.default_rng(1).uniform(0.01, 0.99, len(inner))
        inner.to_parquet(run.fold(0).inner_predictions, index=False)
        flipped, _ = choose(3)
    finally:
        saved.to_parquet(run.fold(0).inner_predictions, index=False)
    assert flipped.weight < choice.weight

    none, reason = choose(4)  # another checkpoint streamed: its weight is unknown
    assert none is None and "epoch [3]" in reason and "epoch 4" in reason
