"""The boosted-features baseline as arrays (common/model/trees/forest.py): its predictions equal
scikit-learn's on real rows (missing values, unknown parts, values on a threshold), a
hand-worked categorical case, the .npz round trip, and the predictor in the competition's
2020 stack, where it ships without scikit-learn."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier

from common.data.dataset import Dataset
from common.data.features import build_sequences
from common.data.past_features import FEATURE_NAMES, past_features, question_skills
from common.model.trees.boosting import (
    TreesConfig,
    fit_trees,
    score_trees,
    to_trees,
)
from common.model.trees.forest import Trees
from common.workspace import Workspace
from tests.helpers import REPO, preprocess_real_rows

KAGGLE2020_PYTHON = REPO / ".venv-kaggle2020" / "bin" / "python"
REQUIRE_KAGGLE2020 = os.environ.get("RIIID_REQUIRE_KAGGLE2020") == "1"
VERMIN = str(Path(sys.executable).parent / "vermin")
PART = FEATURE_NAMES.index("part")
ANSWERED = FEATURE_NAMES.index("answered")


@pytest.fixture(scope="module")
def fitted_on_real_rows(tmp_path_factory):
    """(fitted baseline, sequences, scored entries, skill): the project's baseline fitted
    on the first two thirds of 420 real students' question rows."""
    tmp = tmp_path_factory.mktemp("trees420")
    output_dir, arrays, parts = preprocess_real_rows(
        tmp, "train_prefix_histories_420users.csv", assign_row_ids=True
    )
    data = Dataset.load(Workspace(output_dir))
    sequences = build_sequences(arrays, parts)
    skill = question_skills(data.questions, data.n_questions)
    train = np.zeros(len(sequences.row), dtype=bool)
    train[: 2 * len(train) // 3] = True
    fitted = fit_trees(sequences, train, skill, data.n_questions, 20.0, TreesConfig())
    return fitted, sequences, np.flatnonzero(~train), skill


def edge_rows(trees: Trees, features: np.ndarray) -> np.ndarray:
    """Rows that reach the predictor's edge cases: every tree's root value exactly on its
    threshold (every row meets the root), deeper thresholds, NaN in each column, and
    parts that are missing, negative or never seen in training."""
    rng = np.random.default_rng(0)
    base = features[rng.integers(0, len(features), 400)]
    input_column = trees.columns[trees.order]  # the FEATURE_NAMES column of each input
    numeric = np.flatnonzero(~trees.node_is_leaf & ~trees.node_categorical)
    deeper = rng.choice(numeric, 200, replace=False)
    splits = np.concatenate([trees.tree_root[~trees.node_categorical[trees.tree_root]], deeper])
    on_threshold = base[rng.integers(0, len(base), len(splits))].copy()
    on_threshold[np.arange(len(splits)), input_column[trees.node_feature[splits]]] = (
        trees.node_threshold[splits]
    )
    missing = np.repeat(base[:50], len(FEATURE_NAMES), axis=0)
    missing[np.arange(len(missing)), np.tile(np.arange(len(FEATURE_NAMES)), 50)] = np.nan
    odd_parts = np.repeat(base[:50], 4, axis=0)
    odd_parts[:, PART] = np.tile([-1.0, 99.0, np.nan, 2.5], 50)
    return np.concatenate([base, on_threshold, missing, odd_parts])


def test_trees_predict_as_scikit_learn_on_real_rows(fitted_on_real_rows):
    fitted, sequences, entries, skill = fitted_on_real_rows
    trees, model, columns = fitted.trees, fitted.model, fitted.columns
    assert trees.node_categorical.any()  # the part column's splits are exercised
    assert np.array_equal(trees.columns, columns)
    features = past_features(sequences, entries, skill, fitted.rates)
    rows = np.concatenate([features, edge_rows(trees, features)])
    assert len(np.unique(rows[:, PART][~np.isnan(rows[:, PART])])) > 7  # unseen parts
    np.testing.assert_array_equal(
        trees.preprocess(rows), model._preprocessor.transform(rows[:, columns])
    )
    expected_raw = model.decision_function(rows[:, columns])
    np.testing.assert_allclose(trees.raw(rows), expected_raw, rtol=0, atol=1e-12)
    expected = model.predict_proba(rows[:, columns])[:, 1]
    np.testing.assert_allclose(trees.probability(rows), expected, rtol=0, atol=1e-12)
    # the project's scoring path is the predictor
    scored = score_trees(fitted, sequences, entries, skill)
    np.testing.assert_allclose(scored, expected[: len(entries)], rtol=0, atol=1e-12)


def hand_made_trees() -> Trees:
    """Three stumps over fit inputs (answered, part), which the preprocessing reorders to
    (part, answered). Parts 1, 2, 3, 5 are the known categories (codes 0..3); the fit
    "knew" codes 0..2 only; code 0 (part 1) goes left at both categorical splits.

    tree 0: part, missing left:      left 1,   right 2
    tree 1: answered <= 0.5, missing right: left 10,  right 20
    tree 2: part, missing right:     left 100, right 200
    """
    leaf, split = [False, True, True], [True, False, False]
    return Trees(
        columns=np.array([ANSWERED, PART]),
        order=np.array([1, 0]),
        categorical=np.array([True, False]),
        categories=np.array([1.0, 2.0, 3.0, 5.0]),
        category_offsets=np.array([0, 4]),
        baseline=np.array(-3.0),
        tree_root=np.array([0, 3, 6]),
        tree_bitset=np.array([0, 1, 1]),
        node_feature=np.array([0, 0, 0, 1, 0, 0, 0, 0, 0]),
        node_threshold=np.array([0.0, 0, 0, 0.5, 0, 0, 0, 0, 0]),
        node_left=np.array([1, -1, -1, 4, -1, -1, 7, -1, -1]),
        node_right=np.array([2, -1, -1, 5, -1, -1, 8, -1, -1]),
        node_missing_left=np.array([True, False, False, False, False, False, False, False, False]),
        node_is_leaf=np.array(leaf * 3),
        node_value=np.array([0.0, 1, 2, 0, 10, 20, 0, 100, 200]),
        node_categorical=np.array(split + [False] * 3 + split),
        node_bitset=np.array([0, -1, -1, -1, -1, -1, 1, -1, -1]),
        left_bitsets=np.array([[0b1] + [0] * 7, [0b1] + [0] * 7], dtype=np.uint32),
        known_bitsets=np.array([[0b111] + [0] * 7], dtype=np.uint32),
        known_row=np.array([0, 0]),
    )


def test_hand_made_categorical_splits_follow_scikit_learns_rules():
    trees = hand_made_trees()
    part_answered = [
        (1, 0.5),  # left at both part splits; 0.5 is on the threshold: left
        (2, 0.7),  # known, not left: right at both
        (3, 0.4),  # likewise
        (5, np.nan),  # encoded, but not a category the fit knew: missing at both
        (4, 0.0),  # unknown part: missing at both
        (-1, 1.0),  # likewise
        (np.nan, 0.6),  # missing
    ]
    features = np.zeros((len(part_answered), len(FEATURE_NAMES)))
    features[:, [PART, ANSWERED]] = part_answered
    expected = [
        -3 + 1 + 10 + 100,
        -3 + 2 + 20 + 200,
        -3 + 2 + 10 + 200,
        -3 + 1 + 20 + 200,
        -3 + 1 + 10 + 200,
        -3 + 1 + 20 + 200,
        -3 + 1 + 20 + 200,
    ]
    np.testing.assert_array_equal(trees.raw(features), expected)
    np.testing.assert_allclose(trees.probability(features), 1 / (1 + np.exp(-np.array(expected))))
    # a negative code takes the missing branch (only a preprocessed input can hold one)
    np.testing.assert_array_equal(trees.leaves(np.array([[-1.0, 0.0]])), [[1], [4], [8]])


def test_a_model_without_categorical_features_converts():
    """No categorical feature: scikit-learn keeps no preprocessor, the inputs go in as
    they are; NaN in training gives splits with a missing branch either way."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3000, 3))
    y = (x[:, 0] + np.nan_to_num(x[:, 1]) * x[:, 2] + rng.normal(size=3000) > 0).astype(int)
    x[rng.random(x.shape) < 0.1] = np.nan
    model = HistGradientBoostingClassifier(max_iter=30, random_state=0).fit(x, y)
    columns = np.array([3, 0, 5])
    trees = to_trees(model, columns)
    assert model._preprocessor is None and not trees.categorical.any()
    features = np.full((len(x), len(FEATURE_NAMES)), 7.0)
    features[:, columns] = x
    expected = model.predict_proba(x)[:, 1]
    np.testing.assert_allclose(trees.probability(features), expected, rtol=0, atol=1e-12)


def test_a_model_of_more_than_two_classes_is_refused():
    x = np.arange(30, dtype=np.float64).reshape(-1, 1)
    model = HistGradientBoostingClassifier(max_iter=2).fit(x, np.arange(30) % 3)
    with pytest.raises(ValueError, match="expected a binary model"):
        to_trees(model, np.array([0]))


def test_trees_save_and_load_as_they_were(fitted_on_real_rows, tmp_path):
    trees = fitted_on_real_rows[0].trees
    path = tmp_path / "trees" / "boosted.npz"
    trees.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["boosted.npz"]  # no temp file left
    loaded = Trees.load(path)
    for field in fields(Trees):
        saved, read = getattr(trees, field.name), getattr(loaded, field.name)
        assert saved.dtype == read.dtype and saved.shape == read.shape, field.name
        assert saved.tobytes() == read.tobytes(), field.name
    features = edge_rows(trees, np.zeros((10, len(FEATURE_NAMES))))
    np.testing.assert_array_equal(loaded.raw(features), trees.raw(features))
    # a file of other arrays says what it holds and what was expected
    np.savez(tmp_path / "other.npz", baseline=np.array(0.0))
    with pytest.raises(ValueError, match=r"arrays \['baseline'\], expected Trees'"):
        Trees.load(tmp_path / "other.npz")


def test_trees_module_needs_nothing_newer_than_python_37():
    checked = subprocess.run(
        [
            VERMIN,
            "-t=3.7-",
            "--violations",
            "--no-tips",
            str(REPO / "common/model/trees/forest.py"),
        ],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


PREDICT_2020 = """
import sys
import numpy as np
from common.model.trees.forest import Trees

trees = Trees.load(sys.argv[1])
np.save(sys.argv[3], trees.probability(np.load(sys.argv[2])))
assert "sklearn" not in sys.modules and "pandas" not in sys.modules, "imports too much"
print(sys.version_info[:2], np.__version__)
"""


def test_trees_predict_alike_in_the_competitions_2020_stack(fitted_on_real_rows, tmp_path):
    """Python 3.7 and numpy 1.19 without scikit-learn: a copy of just the predictor's
    modules loads the saved trees and predicts what scikit-learn predicts today."""
    if not KAGGLE2020_PYTHON.exists():
        message = f"{KAGGLE2020_PYTHON} is missing: run scripts/setup_kaggle2020_env.sh"
        if REQUIRE_KAGGLE2020:
            pytest.fail(message)
        pytest.skip(message)
    fitted, sequences, entries, skill = fitted_on_real_rows
    code = tmp_path / "code"
    for module in (
        "__init__.py", "errors.py", "files.py", "model/__init__.py", "model/trees/__init__.py",
        "model/trees/forest.py",
    ):  # fmt: skip
        (code / "common" / module).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / "common" / module, code / "common" / module)
    features = past_features(sequences, entries, skill, fitted.rates)
    features = np.concatenate([features, edge_rows(fitted.trees, features)])
    np.save(tmp_path / "features.npy", features)
    fitted.trees.save(tmp_path / "trees.npz")
    (tmp_path / "predict.py").write_text(PREDICT_2020)
    done = subprocess.run(  # -W error: a warning there (numpy 1.19 on NaN, say) is the notebook's
        [str(KAGGLE2020_PYTHON), "-W", "error", str(tmp_path / "predict.py")]
        + [str(tmp_path / name) for name in ("trees.npz", "features.npy", "predicted.npy")],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(code)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("(3, 7) 1.19"), done.stdout
    predicted = np.load(tmp_path / "predicted.npy")
    expected = fitted.model.predict_proba(features[:, fitted.columns])[:, 1]
    np.testing.assert_allclose(predicted, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(predicted, fitted.trees.probability(features), rtol=0, atol=1e-12)
