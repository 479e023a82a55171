"""The Kaggle export: a valid notebook and kernel metadata, inference code that runs where
the competition's API runs (Python 3.7, torch 1.7: checked statically with vermin and by
running the exported cell in that environment), and the cell alone, in a fresh process
whose path holds only the exported dataset, against a stand-in `riiideducation` that
serves the real example test and checks the API's contract."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
import torch

from common.data.dataset import Dataset
from common.data.fold_data import Fold, load_fold_data
from common.data.past_features import attach_model_features, question_skills
from common.data.past_state import build_feature_snapshot
from common.model.checkpoint import load_model, save_model
from common.model.registry import ARCH_NAMES
from common.model.trees.blend_bundle import BlendBundle
from common.model.trees.blending import BLEND
from common.model.trees.boosting import TREES, TreesConfig, fit_trees
from common.model.trees.forest import stacked_blend
from common.report.baselines import BaselineConfig
from common.report.scored_rows import MODEL, load_fold_rows
from common.stream.blend_state import BlendState
from common.stream.emulator import Emulator, EmulatorConfig
from common.stream.kaggle_export import KaggleIds, bundle_modules, export_kaggle, kernel_metadata
from common.stream.kaggle_notebook import COMPETITION, ApiNotFound, bundle_state, import_api
from common.stream.online import model_snapshot
from common.workspace import Bundle, KaggleFolder, ModelFolder, Workspace
from tests.helpers import (
    REPO,
    RUN,
    make_tiny_demo,
    preprocess_real_rows,
    run_numbered_script,
    run_of,
    shared_file,
)
from tests.test_stream import random_model

CPU = torch.device("cpu")
DATASET_ID = "someone/riiid-saint"
# the competition's environment, built by scripts/setup_kaggle2020_env.sh
KAGGLE2020_PYTHON = REPO / ".venv-kaggle2020" / "bin" / "python"
VERMIN = str(Path(sys.executable).parent / "vermin")  # requirements-dev.txt
# CI sets it: there the 2020 environment must exist, a skip would hide a failure
REQUIRE_KAGGLE2020 = os.environ.get("RIIID_REQUIRE_KAGGLE2020") == "1"

# The stand-in for the competition's module: the API's rules as its organisers' starter
# notebook and error messages state them.
STAND_IN_API = """
import os
import pandas as pd

_made = False


class _Env:
    def __init__(self):
        stream = pd.read_csv(os.environ["STAND_IN_STREAM"])
        self.groups = [group for _, group in stream.groupby("group_num")]
        self.iterated = False
        self.waiting = None
        self.predicted = []

    def iter_test(self):
        if self.iterated:
            raise Exception("You can only iterate over `iter_test()` once.")
        self.iterated = True
        for frame in self.groups:
            test_df = frame.set_index("group_num")
            question = test_df[test_df["content_type_id"] == 0]
            # listed in another order, with a row that is not one of the group's questions
            sample = pd.DataFrame({"row_id": list(question["row_id"][::-1]) + [10 ** 9],
                                   "answered_correctly": 0.5})
            self.waiting = set(question["row_id"])
            yield test_df, sample
            if self.waiting is not None:
                raise Exception("You must call `predict()` successfully before you can "
                                "continue with `iter_test()`")
        pd.concat(self.predicted).to_csv("submission.csv", index=False)

    def predict(self, df):
        if self.waiting is None:
            raise Exception("You must get the next test sample from `iter_test()` first.")
        if not isinstance(df, pd.DataFrame) or list(df.columns) != ["row_id", "answered_correctly"]:
            raise Exception("predict() takes a DataFrame of row_id and answered_correctly")
        if set(df["row_id"]) != self.waiting or len(df) != len(self.waiting):
            raise Exception("predict(): not the group's question rows")
        values = df["answered_correctly"]
        if values.isna().any() or not values.between(0, 1).all():
            raise Exception("predict(): answered_correctly must be probabilities")
        self.predicted.append(df.copy())
        self.waiting = None


def make_env():
    global _made
    if _made:
        raise Exception("You can only call `make_env()` once.")
    _made = True
    return _Env()
"""

# Runs the notebook's cell as a Kaggle kernel would, after making sure this checkout is
# not importable (the editable install's finder removed); with HIDE_NEWER_TORCH, torch
# loses the APIs the competition's torch 1.7 lacks.
LAUNCHER = """
import importlib.util, json, os, sys
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
assert importlib.util.find_spec("common") is None, importlib.util.find_spec("common")
if os.environ.get("HIDE_NEWER_TORCH") == "1":
    import torch
    import torch.nn.functional as F
    del F.scaled_dot_product_attention  # torch 2.0
    for name in ("nan_to_num", "inference_mode", "compile"):  # 1.8, 1.9, 2.0
        delattr(torch, name)
    _load = torch.load
    def load(f, map_location=None, pickle_module=None, **pickle_load_args):  # torch 1.7's
        if "weights_only" in pickle_load_args:  # torch 1.13
            raise TypeError("load() got an unexpected keyword argument 'weights_only'")
        return _load(f, map_location=map_location, weights_only=False, **pickle_load_args)
    torch.load = load
cell = open(sys.argv[1]).read()
exec(compile(cell, "submission.ipynb", "exec"), {"__name__": "__main__"})
loaded = {n: m.__file__ for n, m in sys.modules.items() if n.split(".")[0] == "common"}
print("LOADED " + json.dumps(loaded))
"""


def example_stream(train: pd.DataFrame) -> pd.DataFrame:
    """The real example test, with its first five users renamed to the five real students
    of `train` (their timestamps moved past their train.csv histories), so that the stream
    continues known students as well as starting new ones; and one lecture row, which the
    API serves but does not score, added as group 1's first row: it carries the group's
    prior_group_* lists, as the API's first row does whatever its type (and its -1 goes
    into group 2's lists)."""
    example = pd.read_csv(shared_file("riiid_example_test", "example_test_reconstructed.csv"))
    last = train.groupby("user_id")["timestamp"].max()
    renamed = dict(zip(example["user_id"].unique()[:5], last.index, strict=True))
    for old, new in renamed.items():
        rows = example["user_id"] == old
        example.loc[rows, "timestamp"] += int(last[new]) + 60_000
        example.loc[rows, "user_id"] = new
    first = example.index[example["group_num"] == 1][0]
    lecture = example.loc[[first]].assign(
        row_id=10_000, content_id=89, content_type_id=1, timestamp=lambda f: f.timestamp - 1
    )
    lists = ["prior_group_answers_correct", "prior_group_responses"]
    example.loc[first, lists] = np.nan  # moved to the lecture, the group's new first row
    example = pd.concat([example.loc[: first - 1], lecture, example.loc[first:]])
    head = example.index[example["group_num"] == 2][0]
    for column in ("prior_group_answers_correct", "prior_group_responses"):
        values = json.loads(example.at[head, column])
        at = list(example.loc[example["group_num"] == 1, "row_id"]).index(10_000)
        example.at[head, column] = json.dumps([*values[:at], -1, *values[at:]])
    return example.reset_index(drop=True)


def fit_blend(output_dir: Path, folder: ModelFolder, weight: float) -> BlendBundle:
    """Trees fitted on every question row of output_dir's data, with the model's `weight`
    in the blend, written into `folder` beside a checkpoint (as 04 writes them)."""
    data = Dataset.load(Workspace(output_dir))
    skill = question_skills(data.questions, data.n_questions)
    every = np.ones(len(data.sequences.row), dtype=bool)
    fitted = fit_trees(data.sequences, every, skill, data.n_questions, 20.0, TreesConfig())
    bundle = BlendBundle(fitted.trees, fitted.rates, skill, weight, {"chosen_on": "a test"})
    bundle.save(folder)
    return bundle


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A random model over real students' rows, and trees fitted on them, exported; with
    the stream it will see."""
    tmp = tmp_path_factory.mktemp("kaggle")
    output_dir, _, _ = preprocess_real_rows(tmp, "train_strict_format_5users.csv")
    model = random_model(13523)
    source = ModelFolder(tmp / ModelFolder.name_of(0))
    source.path.mkdir()
    save_model(source.checkpoint(), model, epoch=3)
    fit_blend(output_dir, source, weight=0.5)
    dataset, kernel = export_kaggle(
        Workspace(output_dir),
        source,
        ModelFolder.BEST,
        KaggleFolder(tmp / "kaggle"),
        KaggleIds(DATASET_ID),
    )
    train = pd.read_csv(shared_file("riiid_train_sample", "train_strict_format_5users.csv"))
    stream = tmp / "stream.csv"
    example_stream(train).to_csv(stream, index=False)
    return {"dataset": dataset, "kernel": kernel, "model": model, "stream": stream}


def local_predictions(exported, stream: pd.DataFrame | None = None) -> pd.Series:
    """The stream through this repository's state for the bundle (the model's and the
    trees' features side by side), from the exported state."""
    bundle = Bundle(exported["dataset"])
    state = bundle_state(bundle, "fold0", exported["model"], CPU, 4096, 10**12)
    assert isinstance(state, BlendState)
    predicted = {}
    stream = pd.read_csv(exported["stream"]) if stream is None else stream
    for _, frame in stream.groupby("group_num"):
        test_df = frame.set_index("group_num")
        rows = test_df["row_id"][test_df["content_type_id"] == 0]
        predicted.update(zip(rows, state.predict(test_df), strict=True))
    return pd.Series(predicted)


def test_notebook_and_metadata(exported):
    nb = nbformat.read(exported["kernel"] / KaggleFolder.NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert [c.cell_type for c in nb.cells] == ["code"]
    assert 'run_submission(BUNDLE, model="fold0")' in nb.cells[0].source
    kernel = json.loads((exported["kernel"] / KaggleFolder.KERNEL_METADATA).read_text())
    assert kernel["id"] == "someone/riiid-saint-submission"
    assert kernel["code_file"] == KaggleFolder.NOTEBOOK
    assert kernel["competition_sources"] == [COMPETITION]
    assert kernel["dataset_sources"] == [DATASET_ID]
    assert kernel["enable_internet"] is False and kernel["enable_gpu"] is True
    assert "docker_image" not in kernel  # no image pinned unless one is named
    pinned = kernel_metadata(KaggleIds(DATASET_ID, docker_image="gcr.io/kaggle-gpu-images/x"))
    assert pinned["docker_image"] == "gcr.io/kaggle-gpu-images/x"
    assert pinned["docker_image_pinning_type"] == "original"
    dataset = json.loads(Bundle(exported["dataset"]).metadata.read_text())
    assert dataset["id"] == DATASET_ID and dataset["title"] == "riiid-saint"


def test_the_bundle_ships_the_inference_modules_only(exported):
    code = Bundle(exported["dataset"]).code
    shipped = {
        ".".join(p.relative_to(code).with_suffix("").parts).removesuffix(".__init__")
        for p in code.rglob("*.py")
    }
    assert shipped == set(bundle_modules())
    assert {"common", "common.stream", "common.stream.kaggle_notebook"} <= shipped
    not_inference = ("cli", "data.dataset", "data.folds", "stream.emulator", "stream.kaggle_export")
    assert not shipped & {f"common.{name}" for name in not_inference}
    assert {m.split(".")[1] for m in shipped if m.count(".") > 1} == {"data", "model", "stream"}


def test_bundle_code_needs_nothing_newer_than_python_37(exported):
    """vermin, a static minimum-version checker, over the shipped code: it fails on
    syntax and standard-library use newer than 3.7 (zip(strict=), walrus, ...)."""
    code = Bundle(exported["dataset"]).code
    checked = subprocess.run(
        [VERMIN, "-t=3.7-", "--violations", "--no-tips", str(code)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def run_cell(
    exported, tmp_path: Path, python: str, hide_newer_torch: bool, groups: int = 4
) -> pd.Series:
    """The notebook's cell in a fresh process: /kaggle/input holds the dataset and the
    competition's folder (with the stand-in API serving exported["stream"], a test file of
    `groups` groups), the working directory is empty. Returns submission.csv."""
    kaggle_input = tmp_path / "kaggle" / "input"
    shutil.copytree(exported["dataset"], kaggle_input / "riiid-saint")
    api = kaggle_input / COMPETITION / "riiideducation"
    api.mkdir(parents=True)
    (api / "__init__.py").write_text(STAND_IN_API)
    nb = nbformat.read(exported["kernel"] / KaggleFolder.NOTEBOOK, as_version=4)
    cell = tmp_path / "cell.py"
    cell.write_text(nb.cells[0].source.replace("/kaggle/input", str(kaggle_input)))
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER)
    working = tmp_path / "kaggle" / "working"
    working.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "STAND_IN_STREAM": str(exported["stream"]),
        "HIDE_NEWER_TORCH": "1" if hide_newer_torch else "0",
    }
    if "OMP_NUM_THREADS" in os.environ:  # a test worker's one thread (conftest): a second
        env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]  # would wait for a core
    done = subprocess.run(
        [python, "-I", str(launcher), str(cell)],
        cwd=working,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    loaded = json.loads(done.stdout.split("LOADED ")[-1])
    bundle_code = str(Bundle(kaggle_input / "riiid-saint").code)
    assert loaded and all(path.startswith(bundle_code) for path in loaded.values()), loaded
    summary = json.loads(done.stdout.splitlines()[-2])
    assert summary["groups"] == groups and summary["state_bytes"]["max_bytes"] == 9e9
    assert summary["submits"] == "blend" and summary["state_bytes"]["feature_state"] > 0
    submission = pd.read_csv(working / "submission.csv")
    return submission.set_index("row_id")["answered_correctly"]


def compare_with_local(exported, submitted: pd.Series) -> None:
    local = local_predictions(exported)
    assert len(local) == 104 and 10_000 not in local.index  # the lecture is not scored
    assert sorted(submitted.index) == sorted(local.index)
    assert local.nunique() > 20  # predictions that differ from row to row
    np.testing.assert_allclose(submitted[local.index].to_numpy(), local.to_numpy(), atol=2e-6)


@pytest.mark.slow
def test_the_cell_runs_alone_with_newer_torch_apis_hidden(exported, tmp_path):
    submitted = run_cell(exported, tmp_path, sys.executable, hide_newer_torch=True)
    compare_with_local(exported, submitted)


@pytest.mark.slow
def test_the_cell_runs_in_the_competitions_2020_environment(exported, tmp_path):
    """Python 3.7, torch 1.7.0, pandas 1.1.5, numpy 1.19.5: the Kaggle image of the
    competition, where its compiled riiideducation imports."""
    version = subprocess.run(
        [
            require_kaggle2020(),
            "-c",
            "import sys, torch; print(sys.version[:3], torch.__version__)",
        ],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert version == ["3.7", "1.7.0"], version
    submitted = run_cell(exported, tmp_path, str(KAGGLE2020_PYTHON), hide_newer_torch=False)
    compare_with_local(exported, submitted)


def require_kaggle2020() -> str:
    """The competition's Python 3.7 / torch 1.7 interpreter (skipped without it, except
    in CI)."""
    if not KAGGLE2020_PYTHON.exists():
        message = f"{KAGGLE2020_PYTHON} is missing: run scripts/setup_kaggle2020_env.sh"
        if REQUIRE_KAGGLE2020:
            pytest.fail(message)
        pytest.skip(message)
    return str(KAGGLE2020_PYTHON)


@pytest.fixture(scope="module")
def fold_export(tmp_path_factory):
    """Tiny models of every architecture (SAINT reading the past-event features through
    its head, the LSTM, the LQ-RNN reading them with its query and its head: 03 --arch),
    trained on a demo's fold 0 (03), the fold streamed by 04 with the trees and the
    stacked blend it fits (and its Kaggle export), the fold's stream as a test file of
    the competition's format, and 05's scored rows of the fold (its blend
    and every member included)."""
    tmp = tmp_path_factory.mktemp("fold-export")
    out = make_tiny_demo(tmp, users=120, questions=100)
    tiny = ("--d-model", 16, "--heads", 2, "--layers", 1, "--window", 20, "--batch-size", 16)
    tiny += ("--arch", ",".join(ARCH_NAMES), "--lstm-d-model", 8, "--lstm-window", 20)
    tiny += ("--lqrnn-d-model", 8, "--lqrnn-heads", 2, "--lqrnn-window", 20)
    tiny += ("--lqrnn-past-features", "both")
    flags = ("--output-dir", out, "--run", RUN, "--fold", 0, "--no-progress", "--device", "cpu")
    for script, *extra in (
        ("03_train.py", *tiny, "--epochs", 2, "--warmup", 5, "--past-features", "head"),
        (
            "04_infer.py",
            *("--boost-rounds", 40),  # what is checked does not depend on the trees' rounds
            "--kaggle-dir",
            tmp / "kaggle",
            "--kaggle-dataset-id",
            DATASET_ID,
            "--test-csv",
            shared_file("riiid_example_test", "example_test_reconstructed.csv"),
        ),
    ):
        done = run_numbered_script(script, *flags, *extra)
        assert done.returncode == 0, done.stdout + done.stderr
    kaggle = KaggleFolder(tmp / "kaggle")
    dataset = kaggle.dataset
    fold_start_state(out, dataset)
    workspace = Workspace(out)
    data, fold = Dataset.load(workspace), Fold.load(workspace, 0)
    rows = load_fold_rows(fold, run_of(out).fold(0), data, BaselineConfig())
    stream = tmp / "fold_stream.csv"
    served_stream(data, fold).to_csv(stream, index=False)
    kernel = kaggle.kernel
    trial = kaggle.trial / "working" / "submission.csv"
    return {"dataset": dataset, "kernel": kernel, "stream": stream, "rows": rows, "trial": trial}


def fold_start_state(out: Path, dataset: Path) -> None:
    """The bundle's state as it stands where fold 0's stream starts (every student's
    training questions), not after every row of the data as for the hidden test."""
    workspace, bundle = Workspace(out), Bundle(dataset)
    data = load_fold_data(workspace, 0)
    users = Dataset.load(workspace).arrays.users
    model, _ = load_model(bundle.model("fold0").checkpoint())
    if model.config.past_features != "none":  # the model's snapshot carries them
        attach_model_features(data.sequences, np.load(bundle.skills))
    snapshot = model_snapshot(model, data.sequences, users, data.train_length, CPU)
    snapshot.save(bundle.snapshot)
    for arch in ARCH_NAMES[1:]:  # every other architecture the bundle ships
        member, _ = load_model(bundle.model("fold0").member(arch).checkpoint())
        snapshot = model_snapshot(member, data.sequences, users, data.train_length, CPU)
        snapshot.save(bundle.member_snapshot(arch))
    build_feature_snapshot(data.sequences, users, data.train_length).save(bundle.features)


def served_stream(data: Dataset, fold: Fold) -> pd.DataFrame:
    """Fold `fold`'s stream as 04 served it (the same groups), as a test file: the
    groups' rows with group_num and the prior_group_* lists on each group's first row."""
    env = Emulator.from_fold(data.arrays, fold, EmulatorConfig())
    frames = []
    for test_df, sample in env.iter_test():
        frames.append(test_df.reset_index())
        env.predict(sample)
    return pd.concat(frames, ignore_index=True)


@pytest.mark.slow
def test_the_cell_submits_05s_blend_on_a_folds_stream(fold_export, tmp_path):
    """In the competition's 2020 stack, the notebook streams fold 0's rows through the
    API with the exported model, trees and weight, its features kept online; what it
    submits equals 05's blend of those rows (trees scored from the batch features, the
    weight 04 chose on the inner split) to 1e-6."""
    groups = pd.read_csv(fold_export["stream"])["group_num"].nunique()
    submitted = run_cell(fold_export, tmp_path, require_kaggle2020(), False, groups)
    blend = fold_export["rows"].set_index("row_id")[BLEND]
    assert sorted(submitted.index) == sorted(blend.index) and len(blend) > 1_000
    np.testing.assert_allclose(submitted[blend.index].to_numpy(), blend.to_numpy(), atol=1e-6)
    rows = fold_export["rows"].set_index("row_id")
    assert np.abs(submitted[rows.index].to_numpy() - rows[MODEL].to_numpy()).max() > 1e-3
    # the weights 04 chose on the inner split, each member's probabilities and the trees'
    blend_file = Bundle(fold_export["dataset"]).model("fold0").blend
    record = json.loads(blend_file.read_text())
    scores = {ARCH_NAMES[0]: rows[MODEL], "trees": rows[TREES]}
    scores.update({arch: rows[arch] for arch in ARCH_NAMES[1:]})
    assert set(record["weights"]) == {*ARCH_NAMES, "trees"} and record["weight"] is None
    columns = [(w, scores[name].to_numpy()) for name, w in record["weights"].items()]
    expected = stacked_blend(columns, record["intercept"])
    np.testing.assert_allclose(submitted[rows.index].to_numpy(), expected, atol=1e-6)


@pytest.mark.slow  # the fold_export fixture trains and streams
def test_04_tries_the_exported_notebook_on_a_test_file(fold_export):
    """04 --test-csv: the exported notebook's cell ran on the real example test through
    the local stand-in API and wrote submission.csv: a probability for each question row,
    once (the example's lectures are not predicted)."""
    example = pd.read_csv(shared_file("riiid_example_test", "example_test_reconstructed.csv"))
    questions = example.loc[example["content_type_id"] == 0, "row_id"]
    submitted = pd.read_csv(fold_export["trial"])
    assert list(submitted.columns) == ["row_id", "answered_correctly"]
    assert sorted(submitted["row_id"]) == sorted(questions)
    assert submitted["answered_correctly"].between(0, 1).all()
    assert submitted["answered_correctly"].nunique() > 20


def test_the_api_is_looked_for_in_the_competitions_folder(tmp_path, monkeypatch):
    """Not importable and not in the competition's folder: what to add. There but built
    for another Python (the real module is compiled for 3.7): what to pin."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    folder = tmp_path / COMPETITION
    with pytest.raises(ApiNotFound, match="add the competition's data to the notebook"):
        import_api(folder)
    (folder / "riiideducation").mkdir(parents=True)
    (folder / "riiideducation" / "__init__.py").write_text(
        "raise ImportError('competition.cpython-37m-x86_64-linux-gnu.so: undefined symbol')"
    )
    with pytest.raises(ApiNotFound, match=r"compiled for Python 3\.7, so pin the notebook"):
        import_api(folder)
    assert "riiideducation" not in sys.modules


def test_04_competition_runs_the_dataset_against_the_api(exported, tmp_path, monkeypatch):
    """04_infer.py --competition: the same run_submission, from this checkout, with the
    stand-in API importable as in a competition notebook; --max-state-memory passes on."""
    api = tmp_path / "api" / "riiideducation"
    api.mkdir(parents=True)
    (api / "__init__.py").write_text(STAND_IN_API)
    monkeypatch.syspath_prepend(str(api.parent))
    monkeypatch.setenv("STAND_IN_STREAM", str(exported["stream"]))
    monkeypatch.chdir(tmp_path)
    flags = ("--model-dir", exported["dataset"], "--max-state-memory", 2, "--no-progress")
    try:
        done = run_numbered_script("04_infer.py", "--competition", *flags)
    finally:  # later tests in this process must not find the API (04 would switch to it)
        sys.modules.pop("riiideducation", None)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["rows"] == 104 and summary["state_bytes"]["max_bytes"] == 2e9
    submitted = pd.read_csv(tmp_path / "submission.csv").set_index("row_id")
    local = local_predictions(exported)
    np.testing.assert_allclose(submitted["answered_correctly"][local.index], local, atol=1e-6)


def test_the_outcomes_on_a_lecture_first_row_reach_the_state(exported):
    """Group 1 opens with a lecture carrying group 0's outcomes: flipping them moves the
    later groups' predictions (they would not move if the lists were lost)."""
    stream = pd.read_csv(exported["stream"])
    first = stream.index[stream["group_num"] == 1][0]
    assert stream.at[first, "content_type_id"] == 1  # the lecture, with the lists
    flipped = stream.copy()
    outcomes = json.loads(stream.at[first, "prior_group_answers_correct"])
    flipped.at[first, "prior_group_answers_correct"] = json.dumps([1 - v for v in outcomes])
    later = stream.loc[stream["group_num"] >= 1, "row_id"]
    later = later[stream["content_type_id"] == 0]
    as_given, as_flipped = local_predictions(exported), local_predictions(exported, flipped)
    assert not np.allclose(as_given[later], as_flipped[later], atol=1e-4)
