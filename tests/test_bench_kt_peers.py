"""The KT peers benchmark (bench/kt/peers.py): the fold's steps as the pyKT peers read them
(cut where 03 cuts, one step per container, each scored row mapped to its step), the
windows pykt_peer trains and predicts from (each scored step once, the prediction of
step p read from the output that saw steps before p only), the paired bootstrap, and
the check that a peer predicted exactly the common rows. pyKT itself is not needed:
pykt_peer's window and batch code runs here on a stand-in model."""

from __future__ import annotations

import ast
import functools
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import roc_auc_score

from bench.fold_run import FoldRun
from bench.kt import peer_scores, peers, pykt_peer
from bench.kt.peer_data import concept_ids, fold_splits, peer_fold_dir, student_steps
from bench.kt.plans import DatasetPlan
from common.data.dataset import Dataset
from common.data.fold_data import load_fold_data
from common.errors import UserError
from common.metrics import paired_bootstrap_auc_difference
from common.workspace import Workspace
from tests.helpers import REPO, run_numbered_script

# ---------------------------------------------------------------------------------------
# windows


def test_prediction_windows_keep_each_scored_step_once_with_the_most_history():
    offsets = np.array([0, 7, 8, 11])  # students of 7, 1 and 3 steps
    scored = np.ones(11, dtype=bool)
    scored[[0, 8]] = False  # history: each student's first step
    passes = pykt_peer.prediction_windows(offsets, scored, seq_len=4, stride=2)
    got = [(first, end, kept.tolist()) for first, end, kept in passes]
    # student 0: steps 1-3 from the window at 0; 4 and 5 from the window at 2 (2 and 3
    # earlier steps seen); 6 from the window at 4. Student 1: its only step is its
    # first, which has no prediction even though scored. Student 2: steps 9 and 10
    assert got == [(0, 4, [1, 2, 3]), (2, 6, [4, 5]), (4, 7, [6]), (8, 11, [9, 10])]
    kept = np.concatenate([p[2] for p in passes])
    assert len(np.unique(kept)) == len(kept)
    for first, end, steps in passes:
        assert np.all((steps > first) & (steps < end))


def test_prediction_windows_with_stride_one_give_seq_len_minus_one_earlier_steps():
    offsets = np.array([0, 50])
    passes = pykt_peer.prediction_windows(offsets, np.ones(50, bool), seq_len=10, stride=1)
    for first, _, kept in passes:
        assert np.all(kept - first == np.minimum(kept, 9))


def test_training_windows_cut_consecutively_and_drop_short_ones():
    offsets = np.array([0, 5, 6, 9])
    assert pykt_peer.training_windows(offsets, seq_len=4) == [(0, 4), (6, 9)]


class StandInDKT(torch.nn.Module):
    """pyKT's DKT interface: forward(c, r) -> (B, L-1, num_c), read at the next concept.
    Its output at input position t is (c_t + 1) / 100: the concept of the step it read."""

    num_c = 5

    def forward(self, c, r):
        return ((c.float() + 1) / 100).unsqueeze(-1).expand(*c.shape, self.num_c)


def test_predict_reads_each_step_from_the_output_of_the_step_before_it():
    c = np.array([0, 1, 2, 3, 4, 0, 1, 2, 4, 3])
    split = {
        "offsets": np.array([0, 10]), "q": c, "c": c, "r": np.zeros(10, dtype=np.int64),
        "scored": np.ones(10, dtype=bool),
    }  # fmt: skip
    args = SimpleNamespace(seq_len=4, stride=2, batch_size=2, device="cpu", trim=True)
    steps, probability = pykt_peer.predict(StandInDKT(), "dkt", split, args, torch)
    assert steps.tolist() == list(range(1, 10))
    np.testing.assert_allclose(probability, (c[steps - 1] + 1) / 100, rtol=1e-6)


def test_pykt_batch_shifts_by_one_and_zeroes_padding():
    split = {"q": np.arange(10, 16), "c": np.arange(6), "r": np.array([1, 0, 1, 1, 0, 1])}
    batch = pykt_peer.pykt_batch(split, [(0, 4), (4, 6)], 4, torch)
    assert batch["cseqs"].tolist() == [[0, 1, 2], [4, 0, 0]]
    assert batch["shft_cseqs"].tolist() == [[1, 2, 3], [5, 0, 0]]
    assert batch["shft_qseqs"].tolist() == [[11, 12, 13], [15, 0, 0]]
    assert batch["masks"].tolist() == [[True] * 3, [True, False, False]]
    assert batch["rseqs"].dtype == torch.float32


class TrainableDKT(torch.nn.Module):
    """A tiny trainable model with pyKT's DKT interface (an embedding of (concept,
    response), dropout, a read-out per concept): enough to train and to draw random
    numbers in both streams a run must resume (dropout, the batches' order)."""

    num_c = 5

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(2 * self.num_c, 8)
        self.drop = torch.nn.Dropout(0.3)
        self.out = torch.nn.Linear(8, self.num_c)

    def forward(self, c, r):
        return torch.sigmoid(self.out(self.drop(self.embed(c + self.num_c * r))))


def bce_loss(model, name, batch, torch):
    """pykt's cal_loss for DKT, without pykt: BCE of the next step's response, unpadded."""
    y = pykt_peer.model_outputs(model, name, batch, torch, train=True)[0][0]
    mask = batch["smasks"]
    return torch.nn.functional.binary_cross_entropy(y[mask], batch["shft_rseqs"][mask])


def resume_split(seed: int, students: int = 12) -> dict:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 30, students)
    n = int(lengths.sum())
    c = rng.integers(0, TrainableDKT.num_c, n)
    return {
        "offsets": np.concatenate(([0], np.cumsum(lengths))), "q": c, "c": c,
        "r": rng.integers(0, 2, n), "scored": np.ones(n, dtype=bool), "rows": np.ones(n),
    }  # fmt: skip


def resume_run(**flags) -> tuple[dict, SimpleNamespace]:
    """(train and inner splits, pykt_peer's flags with `flags`) for a stand-in DKT's fit."""
    splits = {"train": resume_split(0), "inner": resume_split(1)}
    args = SimpleNamespace(
        data="fold0.npz", model="dkt", params={}, batch_size=4, seq_len=8, stride=4, seed=0,
        trim=True, device="cpu", **flags,
    )  # fmt: skip
    return splits, args


def test_a_stopped_peer_run_resumes_to_the_weights_of_one_never_stopped(tmp_path, monkeypatch):
    """pykt_peer's fit saves each finished epoch (weights, optimizer, both random streams,
    the best state, the history) and a run that finds the file goes on from it: stopped
    after epoch 2 of 4 and started again, it ends with the weights and the history of a
    run never stopped; a file of other flags is refused."""
    monkeypatch.setattr(pykt_peer, "peer_loss", bce_loss)
    splits, args = resume_run(epochs=4, patience=10, lr=0.05)

    def run(resume, seed=0):
        torch.manual_seed(seed)  # another seed: other initial weights and dropout draws
        model = TrainableDKT()
        best, history = pykt_peer.fit(model, "dkt", splits, args, torch, resume)
        return model, best, history

    whole, whole_best, whole_history = run(None)
    resume = tmp_path / pykt_peer.RESUME
    train_epoch, calls = pykt_peer.train_epoch, []

    def stopped_in_epoch_3(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # the process stops in the middle of its third epoch
        return train_epoch(*a, **k)

    monkeypatch.setattr(pykt_peer, "train_epoch", stopped_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        run(resume)
    monkeypatch.setattr(pykt_peer, "train_epoch", train_epoch)
    assert resume.exists()
    # a new process, with streams of its own: the resume must restore the run's
    again, again_best, history = run(resume, seed=7)
    assert [h["epoch"] for h in history] == [1, 2, 3, 4]
    for key in ("train_loss", "inner_auc"):
        assert [h[key] for h in history] == [h[key] for h in whole_history], key
    for name, tensor in whole.state_dict().items():
        assert torch.equal(tensor, again.state_dict()[name]), name
    for name, tensor in whole_best.items():
        assert torch.equal(tensor, again_best[name]), name

    args.lr = 0.01
    with pytest.raises(SystemExit, match="other lr: delete it"):
        run(resume)


def test_a_peer_stops_after_patience_epochs_without_a_gain(monkeypatch):
    """At lr 0 no epoch after the first gains: with patience 2 the run ends at epoch 3."""
    monkeypatch.setattr(pykt_peer, "peer_loss", bce_loss)
    splits, args = resume_run(epochs=6, patience=2, lr=0.0)
    _, history = pykt_peer.fit(TrainableDKT(), "dkt", splits, args, torch)
    assert [h["epoch"] for h in history] == [1, 2, 3]


def test_the_peer_script_imports_nothing_of_the_project():
    """It runs in pyKT's venv, where neither `common` nor `bench` is installed."""
    tree = ast.parse((REPO / "bench" / "kt" / "pykt_peer.py").read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    assert not [n for n in names if n.split(".")[0] in ("common", "bench", "tests")]


# ---------------------------------------------------------------------------------------
# the fold's steps

AKT_LINES = (
    # problem 7 has skills 2 and 5 (two rows, one attempt); problems 9 and 11 skill 1; 3 skill 4
    "{i},{sid}\n7,7,9,3,11,7,7\n2,5,1,4,1,2,5\n{a},{a},1,{b},0,1,1\n"
)


@pytest.fixture(scope="module")
def bundled_prep(tmp_path_factory):
    """A small AKT-format data set with multi-skill rows, converted with `bundle`, then
    01 and 02 (5 folds of new students); each script in this process."""
    root = tmp_path_factory.mktemp("peers")
    source = root / "students.csv"
    source.write_text(
        "".join(AKT_LINES.format(i=i, sid=100 + i, a=i % 2, b=(i // 2) % 2) for i in range(40))
    )
    inputs, prep = root / "input", root / "prep"
    commands = [
        ["00_convert_kt_dataset.py", "--format", "4line", "--inputs", source, "--name", "toy"],
        ["00_convert_kt_dataset.py", "--multi-skill-rows", "bundle", "--output-dir", inputs],
        ["01_preprocess.py", "--input-dir", inputs, "--output-dir", prep, "--no-progress"],
        ["02_make_folds.py", "--input-dir", inputs, "--output-dir", prep, "--strategy", "unseen"],
    ]
    commands = [commands[0] + commands[1][1:], *commands[2:]]
    for script, *args in commands:
        done = run_numbered_script(script, *args)
        assert done.returncode == 0, done.stderr[-2000:]
    return prep


def test_fold_steps_put_an_attempts_rows_in_one_step_and_map_every_scored_row(bundled_prep):
    workspace = Workspace(bundled_prep)
    dataset = Dataset.of(workspace)
    data = load_fold_data(workspace, 0, inner_share=0.25, seed=0)
    splits, meta = fold_splits(dataset, data)
    test, inner, train = splits["test"], splits["inner"], splits["train"]
    # 7 rows per student, 5 attempts: problem 7's two rows share a step, twice
    assert np.all(np.diff(test["offsets"]) == 5) and np.all(np.diff(train["offsets"]) <= 5)
    assert test["rows"].tolist()[:5] == [2, 1, 1, 1, 2]
    # every streamed row once, mapped to the step of its own question and answer
    entries = data.fold_tails.flat_index(data.sequences)
    assert len(test["row_id"]) == len(entries) == meta["scored_rows"]
    rows = pd.Series(np.asarray(dataset.arrays["row_id"])[data.sequences.row[entries]])
    assert rows.is_unique and (test["row_id"] == rows.to_numpy()).all()
    step = test["row_step"]
    assert (test["q"][step] == data.sequences.question[entries]).all()
    assert (test["r"][step] == data.sequences.response[entries]).all()
    assert test["scored"][step].all() and test["scored"].sum() == len(np.unique(step))
    # the inner split is 03's: its scored rows are the inner tails', train stops at fit
    inner_rows = inner["rows"][inner["scored"]].sum()
    assert inner_rows == len(data.inner_tails.flat_index(data.sequences)) > 0
    assert train["rows"].sum() == data.fit_length.sum()
    assert meta["students"]["test"] == len(data.valid_students)
    assert meta["students"]["inner"] == len(data.inner_tails.students)
    assert meta["has_questions"] and meta["num_c"] == 3  # skill sets {2,5}, {1}, {4}


def test_concepts_are_skill_sets_and_skill_level_data_has_no_questions(bundled_prep):
    dataset = Dataset.load(Workspace(bundled_prep))
    concept, has_questions = concept_ids(dataset)
    tags = dataset.questions.set_index("question_id")["tags"]
    for a in range(len(concept)):
        for b in range(len(concept)):
            assert (concept[a] == concept[b]) == (tags[a] == tags[b])
    assert has_questions
    skill_level = dataset.questions.assign(tags=dataset.questions["question_id"].astype(str))
    alone = SimpleNamespace(questions=skill_level, n_questions=dataset.n_questions)
    assert concept_ids(alone)[1] is False


def test_fold_steps_refuse_a_container_with_two_questions(bundled_prep):
    workspace = Workspace(bundled_prep)
    dataset = Dataset.of(workspace)
    data = load_fold_data(workspace, 0)
    steps = student_steps(data)
    shared = np.flatnonzero(np.bincount(steps.entry_step) == 2)[0]
    second = np.flatnonzero(steps.entry_step == shared)[1]
    data.sequences.question[second] += 1
    with pytest.raises(ValueError, match="holds another question"):
        fold_splits(dataset, data)


# ---------------------------------------------------------------------------------------
# scores


def test_paired_bootstrap_difference_is_the_auc_gap_with_an_interval_around_it():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 2000)
    good = labels + rng.normal(0, 0.8, 2000)
    poor = labels + rng.normal(0, 3.0, 2000)
    students = np.repeat(np.arange(200), 10)
    gap, low, high = paired_bootstrap_auc_difference(labels, good, poor, students, 300, 0)
    assert gap == pytest.approx(roc_auc_score(labels, good) - roc_auc_score(labels, poor))
    assert 0 < low < gap < high
    # a scorer against itself: no gap, and none in any resample
    assert paired_bootstrap_auc_difference(labels, good, good, students, 50, 0) == (0, 0, 0)
    # swapped: the interval mirrors
    back = paired_bootstrap_auc_difference(labels, poor, good, students, 300, 0)
    assert back == pytest.approx((-gap, -high, -low))


def test_fold_rows_refuse_a_peer_that_missed_a_common_row(tmp_path):
    plan = DatasetPlan("toy", "s", (), 1, "")
    ctx = SimpleNamespace(dataset_dir=lambda p: tmp_path / "ds", args=SimpleNamespace())
    model_dir = Workspace(tmp_path / "model")
    folder = peer_fold_dir(ctx, plan, 0)
    folder.mkdir(parents=True)
    # two students of 3 steps; the first step of each has no peer prediction
    np.savez(
        folder / "data.npz", test_offsets=np.array([0, 3, 6]),
        test_row_id=np.arange(10, 16), test_row_step=np.arange(6),
        test_c=np.array([1, 1, 2, 0, 3, 3]),
    )  # fmt: skip
    stream = FoldRun(model_dir, fold=0).folder.stream_predictions
    stream.parent.mkdir(parents=True)
    ours = pd.DataFrame({"row_id": np.arange(10, 16), "answered_correctly": [0, 1, 0, 1, 1, 0]})
    for column in peer_scores.OURS:
        ours[column] = np.linspace(0.1, 0.9, 6)
    ours.to_parquet(stream)
    (folder / "dkt-pykt").mkdir()
    pd.DataFrame({"row_id": [11, 12, 14, 15], "prediction": 0.5}).to_csv(
        folder / "dkt-pykt" / "predictions.csv", index=False
    )
    rows = peer_scores.fold_rows(ctx, plan, model_dir, 0)
    assert rows["first_step"].tolist() == [True, False, False, True, False, False]
    assert rows["dkt-pykt"].isna().tolist() == rows["first_step"].tolist()
    assert rows["student"].tolist() == [0, 0, 0, 1, 1, 1]
    assert rows["position"].tolist() == [0, 1, 2, 0, 1, 2]
    assert rows["repeat"].tolist() == [False, True, False, False, False, True]
    pd.DataFrame({"row_id": [11, 12, 14], "prediction": 0.5}).to_csv(
        folder / "dkt-pykt" / "predictions.csv", index=False
    )
    with pytest.raises(ValueError, match="expected a prediction for each"):
        peer_scores.fold_rows(ctx, plan, model_dir, 0)


def toy_finished_fold(tmp_path):
    """The toy fold of the test above, finished by ours and DKT: (ctx, plan)."""
    plan = DatasetPlan("toy", "s", (), 1, "")
    ctx = SimpleNamespace(
        dataset_dir=lambda p: tmp_path / "ds",
        model_dir=lambda p, m: tmp_path / "model",
        args=SimpleNamespace(work_dir=tmp_path, multi_skill_rows="keep"),
    )
    folder = peer_fold_dir(ctx, plan, 0)
    folder.mkdir(parents=True)
    np.savez(
        folder / "data.npz", test_offsets=np.array([0, 3, 6]),
        test_row_id=np.arange(10, 16), test_row_step=np.arange(6),
        test_c=np.array([1, 1, 2, 0, 3, 3]),
    )  # fmt: skip
    stream = FoldRun(Workspace(tmp_path / "model"), fold=0).folder.stream_predictions
    stream.parent.mkdir(parents=True)
    ours = pd.DataFrame({"row_id": np.arange(10, 16), "answered_correctly": [0, 1, 0, 1, 1, 0]})
    for column in ("model_prediction", "trees_prediction", "prediction"):
        ours[column] = np.linspace(0.1, 0.9, 6)
    ours.to_parquet(stream)
    peer = folder / "dkt-pykt"
    peer.mkdir()
    pd.DataFrame({"row_id": [11, 12, 14, 15], "prediction": [0.2, 0.7, 0.4, 0.6]}).to_csv(
        peer / "predictions.csv", index=False
    )
    result = {
        "best_epoch": 3, "epochs_run": 8, "wall_seconds": 10.0, "seconds_per_epoch": 1.0,
        "size": "d 200", "source": "a test", "pykt_source": "pykt-toolkit (a test)",
    }  # fmt: skip
    (peer / "result.json").write_text(json.dumps(result))
    return ctx, plan


def test_the_tables_never_drop_what_a_finished_run_wrote(tmp_path, monkeypatch):
    """A partial run never overwrites finished results: with nothing finished the tables
    are refused (naming where they were looked for); tables that would lose a row the
    existing ones hold are refused unless --replace, before any bootstrap; a run that
    keeps every row writes."""
    ctx, plan = toy_finished_fold(tmp_path / "work")
    results = tmp_path / "results" / "kt_peers"
    write = functools.partial(peer_scores.write_tables, ctx, [plan], "m", results, 0, 200)
    write()
    table = pd.read_csv(results.with_suffix(".csv"))
    assert set(table["model"]) == {"ours: model", "ours: trees", "ours: blend", "DKT (pyKT's size)"}
    before = results.with_suffix(".csv").read_bytes()
    shutil.rmtree(peer_fold_dir(ctx, plan, 0) / "dkt-pykt")  # a work folder without DKT
    with pytest.raises(UserError, match=r"holds 1 row\(s\) the work folder .* DKT"):
        write()

    def no_bootstrap(labels, first, second, clusters, n_resamples, seed):
        assert n_resamples == 0, "bootstrapped a table that is refused"
        return paired_bootstrap_auc_difference(labels, first, second, clusters, 0, seed)

    with monkeypatch.context() as patch:  # refused before the bootstrap's minutes
        patch.setattr(peer_scores, "paired_bootstrap_auc_difference", no_bootstrap)
        with pytest.raises(UserError, match=r"holds 1 row\(s\)"):
            peer_scores.write_tables(ctx, [plan], "m", results, 50, 200)
    assert results.with_suffix(".csv").read_bytes() == before  # nothing written
    write(replace=True)
    assert "DKT (pyKT's size)" not in set(pd.read_csv(results.with_suffix(".csv"))["model"])
    empty_ctx, empty_plan = SimpleNamespace(**vars(ctx)), plan
    empty_ctx.model_dir = lambda p, m: tmp_path / "nothing"
    with pytest.raises(UserError, match="no finished fold"):
        peer_scores.write_tables(empty_ctx, [empty_plan], "m", tmp_path / "t", 0, 200)
    assert not (tmp_path / "t.csv").exists()


def test_the_peers_bench_refuses_bad_flags_and_a_venv_without_pykt(tmp_path, capsys):
    """Before any work: folds beyond the splits, a work folder that is a file, a missing
    source folder, a pyKT python that does not exist or has no pyKT."""
    a_file = tmp_path / "file"
    a_file.write_text("")
    for flags, words in (
        (["--folds", "9"], "--folds 9: the splits of --grid have folds 0-4"),
        (["--work-dir", str(a_file)], "is a file, not a folder"),
        (["--source-root", str(tmp_path / "none")], "no such folder"),
    ):
        with pytest.raises(SystemExit) as stop:
            peers.parse_args(flags)
        assert stop.value.code == 2 and words in capsys.readouterr().err
    with pytest.raises(UserError, match=r"no such file; run scripts/setup_pykt_env\.sh"):
        peers.check_pykt(tmp_path / "python", ["dkt"])
    with pytest.raises(UserError, match="cannot import the models of --peers dkt"):
        peers.check_pykt(Path(sys.executable), ["dkt"])  # the project's venv: no pyKT
