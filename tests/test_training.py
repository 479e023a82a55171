"""03_train.py: windows, checkpoints, early stopping, micro-batches, DistributedDataParallel."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from threadpoolctl import threadpool_info, threadpool_limits

from common.data.features import window_inputs
from common.data.fold_data import load_fold_data, load_full_data
from common.device import autocast_dtype, use_threads
from common.metrics import auc_or_nan
from common.model.checkpoint import load_model, save_checkpoint
from common.model.predict import to_tensors
from common.model.saint import ModelConfig
from common.model.trees.blend_bundle import BlendBundle
from common.train.plan import (
    PartPlan,
    activation_bytes,
    batch_bounds,
    epoch_spans,
    micro_batch_groups,
)
from common.train.trainer import Trainer
from common.workspace import Bundle, KaggleFolder, Workspace
from tests.helpers import (
    RUN,
    fold0_folder,
    make_tiny_demo,
    run_numbered_script,
    run_of,
    train_config,
)

TINY = [
    "--batch-size", "32", "--warmup", "10", "--d-model", "16", "--heads", "2",
    "--layers", "1", "--window", "20", "--no-progress", "--seed", "0",
]  # fmt: skip


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return make_tiny_demo(tmp_path_factory.mktemp("train"), users=60)


def fresh_run(demo: Path, tmp: Path) -> Path:
    """An output dir sharing the demo's data and folds, with no training outputs yet."""
    out = tmp / "run"
    out.mkdir()
    shared, fresh = Workspace(demo), Workspace(out)
    os.symlink(shared.data.path, fresh.data.path)
    os.symlink(shared.folds.path, fresh.folds.path)
    return out


def train(output_dir: Path, *flags: str, launcher: list[str] | None = None) -> str:
    """03_train.py in this process, or under `launcher` (torchrun) in its own."""
    args = ["--output-dir", str(output_dir), "--run", RUN, *TINY, *flags]
    done = run_numbered_script("03_train.py", *args, launcher=launcher, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_epoch_spans_train_every_question_once_after_a_whole_context():
    lengths = np.array([0, 1, 5, 20, 21, 57, 200])
    for seed in range(5):
        spans = epoch_spans(lengths, 20, 7, np.random.default_rng(seed))
        covered = [set() for _ in lengths]
        for s, start, begin, stop in zip(*spans, strict=True):
            assert 1 <= stop - begin <= 20
            assert start == max(0, begin - 7)  # the whole context, or the whole history
            positions = set(range(begin, stop))
            assert not positions & covered[s]
            covered[s] |= positions
        assert [len(c) for c in covered] == lengths.tolist()
        assert all(c == set(range(n)) for c, n in zip(covered, lengths, strict=True))


def test_batches_close_at_the_budget_with_enough_items():
    weight = np.array([3, 1, 1, 4, 1, 1, 1, 2])
    assert batch_bounds(weight, 4) == [slice(0, 2), slice(2, 4), slice(4, 8)]
    assert batch_bounds(weight, 4, least=3) == [slice(0, 3), slice(3, 6), slice(6, 8)]
    assert batch_bounds(weight, 100) == [slice(0, 8)]


@pytest.mark.slow
def test_resume_reads_a_checkpoint_from_before_a_model_option_existed(demo, tmp_path):
    """A model-config field added later (question_embedding) is absent from older
    checkpoints; resuming them must read it as its default, not as a changed config."""
    out = fresh_run(demo, tmp_path)
    train(out, "--epochs", "1")
    path = fold0_folder(out).epoch_checkpoint(1)
    checkpoint = torch.load(path, weights_only=False)
    del checkpoint["model_config"]["question_embedding"]
    save_checkpoint(path, checkpoint)
    printed = train(out, "--epochs", "2", "--resume")
    assert "resumed after epoch 1" in printed


@pytest.fixture
def threads_put_back(monkeypatch):
    """This worker's threads (conftest: one) put back after a test that changes them."""
    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", str(before)))
    yield
    torch.set_num_threads(before)
    threadpool_limits(before, user_api="openmp")


def test_threads_set_torch_and_the_trees_openmp(threads_put_back):
    """--threads n: torch's threads and every OpenMP runtime loaded (scikit-learn's, which
    the trees' fit uses), and OMP_NUM_THREADS for one loaded later."""
    import sklearn.ensemble  # noqa: F401  (loads scikit-learn's OpenMP runtime)

    use_threads(3)
    assert torch.get_num_threads() == 3 and os.environ["OMP_NUM_THREADS"] == "3"
    openmp = [p for p in threadpool_info() if p["user_api"] == "openmp"]
    assert any("scikit_learn" in p["filepath"] for p in openmp)
    assert [p["num_threads"] for p in openmp] == [3] * len(openmp)
    use_threads(0)  # 0: left as they are
    assert torch.get_num_threads() == 3


def test_03_and_04_run_on_the_threads_asked(demo, tmp_path, threads_put_back):
    """Each script runs on the threads --threads asks for, not those it found (two here;
    asking for one keeps the test from spinning a second thread beside the other worker)."""
    out = fresh_run(demo, tmp_path)
    torch.set_num_threads(2)
    assert "device cpu (1 thread)" in train(out, "--epochs", "1", "--threads", "1")
    record = json.loads(fold0_folder(out).record("train").read_text())
    assert record["environment"]["torch_threads"] == "1"
    torch.set_num_threads(2)
    flags = ["--output-dir", out, "--run", RUN, "--no-export", "--no-trees", "--no-progress"]
    done = run_numbered_script("04_infer.py", *flags, "--threads", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(fold0_folder(out).stream_summary.read_text())["torch_threads"] == 1


@pytest.mark.slow
def test_checkpoints_are_self_describing(demo, tmp_path):
    out = fresh_run(demo, tmp_path)
    printed = train(out, "--epochs", "2")
    folder = fold0_folder(out)
    written = (folder.epoch_checkpoint(1), folder.epoch_checkpoint(2), folder.checkpoint())
    for path in (*written, folder.history, folder.config):
        assert path.exists(), path.name
    assert folder.record("train").exists()
    assert not [p for p in folder.path.iterdir() if p.name.startswith(".")]
    history = pd.read_csv(folder.history)
    assert list(history.columns) == [
        "epoch", "train_loss", "inner_loss", "inner_auc", "fold_loss", "fold_auc",
        "interactions_per_s", "train_seconds", "valid_seconds", "lr",
    ]  # fmt: skip
    assert history["epoch"].tolist() == [1, 2]
    checkpoint = torch.load(folder.epoch_checkpoint(2), weights_only=False)
    for key in (
        "model_config", "model_state", "optimizer_state", "scheduler_state", "scaler_state",
        "epoch", "step", "best_auc", "fold", "rng_state", "train_config", "history",
        "fold_fingerprint", "selected_on", "resolved",
    ):  # fmt: skip
        assert key in checkpoint, key
    # the flags gave batch 32 and warm-up 10; the span and context came from the model
    assert checkpoint["resolved"]["batch_size"] == 32 and checkpoint["resolved"]["warmup"] == 10
    assert checkpoint["resolved"]["span"] == 4 * 2 * 20 and checkpoint["resolved"]["context"] == 40
    assert checkpoint["epoch"] == 2 and checkpoint["fold"] == 0
    assert checkpoint["selected_on"] == "inner"
    assert checkpoint["best_auc"] == history["inner_auc"].max()
    assert "best inner validation AUC" in printed
    # best.pt's predictions of the inner split, for 05's blend: the inner questions, each
    # once, with the selected epoch, and the AUC the history records for that epoch
    best = torch.load(folder.checkpoint(), weights_only=False)["best_epoch"]
    inner = pd.read_parquet(folder.inner_predictions)
    split = load_fold_data(Workspace(out), 0, inner_share=0.1, seed=0)
    seq = split.sequences
    expected_rows = seq.row[split.inner_tails.flat_index(seq)]
    np.testing.assert_array_equal(inner["global_row"].to_numpy(), expected_rows)
    assert set(inner["epoch"]) == {best}
    labels = seq.response[np.searchsorted(seq.row, expected_rows)]
    recorded = history.set_index("epoch").loc[best, "inner_auc"]
    assert auc_or_nan(labels, inner["prediction"].to_numpy()) == pytest.approx(recorded)
    # inference rebuilds the model from the checkpoint alone
    model, _ = load_model(folder.checkpoint())
    data = load_fold_data(Workspace(out), 0)
    one = (np.array([0]), np.array([0]), np.array([10]))
    inputs = window_inputs(data.sequences, *one, model.config.n_questions)
    with torch.no_grad():
        assert torch.isfinite(model(to_tensors(inputs, torch.device("cpu")))).all()


@pytest.mark.slow
def test_early_stopping_after_patience(demo, tmp_path):
    out = fresh_run(demo, tmp_path)
    # lr 1e-30 leaves float32 weights unchanged: the validation AUC never improves after epoch 1
    train(out, "--epochs", "6", "--lr", "1e-30", "--patience", "1")
    history = pd.read_csv(fold0_folder(out).history)
    assert history["epoch"].tolist() == [1, 2, 3]


@pytest.mark.slow
def test_full_data_trains_every_student_for_the_cv_epochs_and_exports_it(demo, tmp_path):
    """The submission's model: --full-data trains on every question (no validation, no
    selection) for the CV folds' median best epoch (--epochs 0), into the run's full/, and
    04 --full bundles that checkpoint."""
    out = fresh_run(demo, tmp_path)
    refused = run_numbered_script(
        "03_train.py", "--output-dir", out, "--run", RUN, "--full-data", "--epochs", 0
    )
    assert refused.returncode == 2 and "no fold*/best.pt" in refused.stderr
    # lr 1e-30: the weights stay as they are, epoch 1 stays best
    train(out, "--epochs", "3", "--lr", "1e-30", "--patience", "5")
    cv_best = torch.load(fold0_folder(out).checkpoint(), weights_only=False)["best_epoch"]
    assert cv_best == 1
    stdout = train(out, "--full-data", "--epochs", "0")
    assert "epochs from CV: best epochs {'fold0': 1}, median 1" in stdout
    lengths = load_full_data(Workspace(out)).sequences.lengths()
    assert f"full data: {len(lengths):,} students' {lengths.sum():,} questions all train" in stdout
    full = run_of(out).full
    best = torch.load(full.checkpoint(), weights_only=False)
    assert best["epoch"] == best["best_epoch"] == 1 and best["fold"] is None
    assert best["fold_fingerprint"] is None
    assert pd.read_csv(full.history)["epoch"].tolist() == [1]
    data = load_full_data(Workspace(out))  # every question of every student is a training question
    assert np.array_equal(data.fit_length, data.sequences.lengths())
    assert len(data.fold_tails.students) == 0 and len(data.inner_tails.students) == 0
    streamed = run_numbered_script(
        "04_infer.py", "--output-dir", out, "--fold", 0, "--no-export", "--no-progress"
    )  # fold 0's blend weight, chosen on its inner split
    assert streamed.returncode == 0, streamed.stderr
    fold_weight = json.loads(fold0_folder(out).blend.read_text())["weight"]
    bundle = tmp_path / "bundle"
    flags = ("--output-dir", out, "--full", "--kaggle-dir", bundle, "--no-progress")
    exported = run_numbered_script("04_infer.py", *flags)
    assert exported.returncode == 0, exported.stderr
    kaggle = KaggleFolder(bundle)
    dataset = Bundle(kaggle.dataset)
    bundled = torch.load(dataset.model("full").checkpoint(), weights_only=False)
    assert bundled["model_digest"] == best["model_digest"]
    notebook = kaggle.kernel / KaggleFolder.NOTEBOOK
    cell = json.loads(notebook.read_text())["cells"][0]
    assert 'run_submission(BUNDLE, model="full")' in "".join(cell["source"])
    assert dataset.snapshot.exists() and not dataset.model("fold0").path.exists()
    # the full-data trees, fitted on every question row, with the folds' median weight
    blend = BlendBundle.load(dataset.model("full"))
    assert blend.weight == fold_weight and blend.record["fold_weights"] == {"0": fold_weight}
    assert blend.record["trees"]["train_rows"] == int(lengths.sum())
    assert dataset.features.exists()
    assert f"blend weight {fold_weight:g}" in exported.stdout


def test_micro_batch_parts_by_hand():
    """Sequences sorted longest first are cut where positions computed plus a cost per
    part are fewest, within the budget of positions, the part cost halved until the
    padding is at most 10%; with a size, plain slices."""
    length = torch.tensor([12, 100, 10, 90])  # sorted: 100, 90, 12, 10 (212 positions)
    # two parts: 200 + 24 positions + 2 x 20, against 400 + 20 in one
    assert [p.tolist() for p in micro_batch_groups(length, 0, 1000, 20.0)] == [[1, 3], [0, 2]]
    # a part costing 1,000 would keep one part (400 positions: 89% padding); the cost is
    # halved (to 125) until the padding is within 10%
    assert len(micro_batch_groups(length, 0, 1000, 1000.0, padding=10.0)) == 1
    assert [p.tolist() for p in micro_batch_groups(length, 0, 1000, 1000.0)] == [[1, 3], [0, 2]]
    # a budget of 150 positions: 100 and 90 each alone (2 x 100 > 150), 12 and 10 together
    parts = [p.tolist() for p in micro_batch_groups(length, 0, 150, 5.0)]
    assert parts == [[1], [3], [0, 2]]
    assert micro_batch_groups(length, 3, 0, 0.0) == [slice(0, 3), slice(3, 6)]


def test_each_device_has_its_part_plan():
    """A CPU part holds at most 64 windows of positions and costs a window; a CUDA part
    holds a quarter of the free memory's worth of activations (at least a window) and
    costs 32 windows; --micro-batch gives plain slices on both."""
    config = ModelConfig(n_questions=50, d_model=32, n_heads=4, window=20)
    cpu = PartPlan.for_device(config, torch.device("cpu"))
    assert (cpu.budget, cpu.cost, cpu.size) == (64 * 20, 20.0, 0)
    free = 10**9
    cuda = PartPlan.for_device(config, torch.device("cuda"), free_bytes=free)
    assert cuda.budget == free // 4 // activation_bytes(config) and cuda.cost == 32 * 20.0
    assert PartPlan.for_device(config, torch.device("cuda"), free_bytes=1).budget == 20
    assert PartPlan.for_device(config, torch.device("cuda"), 8, free).size == 8
    length = torch.tensor([50, 40, 5, 3, 2, 1])  # the CUDA plan: fewer parts, within 10%
    assert len(cuda.groups(length)) <= len(cpu.groups(length))
    for plan in (cpu, cuda):
        groups = plan.groups(length)
        padded = plan.positions(length, groups)
        assert padded == sum(len(g) * int(length[g].max()) for g in groups)
        assert padded <= 1.1 * int(length.sum())


def _cost(parts: list[list[int]], cost: float) -> float:
    return sum(len(p) * max(p) for p in parts) + cost * len(parts)


def test_micro_batch_parts_are_the_cheapest_cut():
    """Against every cut of sorted random lengths into consecutive parts: the plan's
    cost (positions plus the cost per part) is the least within the budget."""
    rng = np.random.default_rng(0)
    for _ in range(30):
        lengths = sorted(rng.integers(1, 200, size=int(rng.integers(1, 9))).tolist())[::-1]
        cost, budget = float(rng.integers(1, 300)), int(rng.integers(150, 800))
        parts = micro_batch_groups(torch.tensor(lengths), 0, budget, cost, padding=100.0)
        chosen = [[lengths[i] for i in p.tolist()] for p in parts]
        best = math.inf
        for mask in range(2 ** (len(lengths) - 1)):
            cuts = [i + 1 for i in range(len(lengths) - 1) if mask >> i & 1]
            cut = [lengths[a:b] for a, b in zip([0, *cuts], [*cuts, len(lengths)], strict=True)]
            if all(len(p) == 1 or len(p) * p[0] <= budget for p in cut):
                best = min(best, _cost(cut, cost))
        assert all(len(p) == 1 or len(p) * p[0] <= budget for p in chosen)
        assert _cost(chosen, cost) == pytest.approx(best)


@pytest.mark.parametrize("amp", ["bf16", "off"])
def test_a_train_step_runs_in_bf16_on_the_cpu(demo, amp):
    """03 --amp bf16 on a CPU (emulated there, as bench/gpu_check.py no longer runs it by
    default): a train step's forward runs in bf16 (its logits), its loss is finite and
    every trained weight moves."""
    data = load_fold_data(Workspace(demo), 0)
    config = train_config(
        d_model=16, heads=2, layers=1, window=10, batch_size=8, progress=False,
        select_on="fold", amp=amp,
    )  # fmt: skip
    trainer = Trainer(config, Workspace(demo).run(f"amp-{amp}"), data, torch.device("cpu"))
    spans = epoch_spans(data.train_length, 10, 10, np.random.default_rng(0))
    batch = to_tensors(trainer.batch_inputs(*spans, np.arange(8)), torch.device("cpu"))
    seen = []
    hook = trainer.model.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    loss, _ = trainer.train_step(batch)
    hook.remove()
    assert set(seen) == {torch.bfloat16 if amp == "bf16" else torch.float32}
    assert np.isfinite(float(loss))
    moved = [not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters(), strict=True)]
    assert sum(moved) > len(moved) // 2


def test_activation_estimate_bounds_what_backward_keeps(demo):
    """activation_bytes (what sizes a CUDA part) is at least what a training forward
    saves for backward per position computed (torch's saved-tensor hooks, each storage
    counted once, weights not), and within 3x of it."""
    data = load_fold_data(Workspace(demo), 0)
    config = train_config(
        d_model=64, heads=4, layers=2, window=10, batch_size=48, progress=False, select_on="fold"
    )
    trainer = Trainer(config, Workspace(demo).run("activations"), data, torch.device("cpu"))
    spans = epoch_spans(data.train_length, 40, 40, np.random.default_rng(0))
    batch = to_tensors(trainer.batch_inputs(*spans, np.arange(48)), torch.device("cpu"))
    weights = {p.untyped_storage().data_ptr() for p in trainer.model.parameters()}
    saved: dict[int, int] = {}

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        trainer.model.train()(batch)
    per_position = sum(saved.values()) / batch["valid"].numel()
    estimate = activation_bytes(trainer.setup.model_config)
    assert per_position <= estimate <= 3 * per_position, (per_position, estimate)


def test_micro_batches_give_the_whole_batch_gradient(demo):
    data = load_fold_data(Workspace(demo), 0)
    spans = epoch_spans(data.train_length, 30, 20, np.random.default_rng(0))
    weights = []
    for micro in (48, 7, 0):  # 0: the CPU default, parts of similar-length windows
        config = train_config(
            d_model=16,
            heads=2,
            layers=1,
            window=20,
            dropout=0.0,
            micro_batch=micro,
            batch_size=48,
            progress=False,
            select_on="fold",
        )
        trainer = Trainer(config, Workspace(demo).run("micro"), data, torch.device("cpu"))
        batch = to_tensors(trainer.batch_inputs(*spans, np.arange(48)), torch.device("cpu"))
        trainer.train_step(batch)
        weights.append(trainer.model.state_dict())
        if micro == 0:
            parts = trainer.micro_batches(batch)
            sizes = [p["valid"].sum(1) for p in parts]
            assert len(parts) > 1 and sum(len(x) for x in sizes) == 48
            assert sum(int(x.sum()) for x in sizes) == int(batch["valid"].sum())
            trained = sum(int(p["trained"].sum()) for p in parts)
            assert 0 < trained == int(batch["trained"].sum()) < int(batch["valid"].sum())
            for part, size in zip(parts, sizes, strict=True):
                assert part["valid"].shape[1] == size.max()  # trimmed to its longest
            computed = sum(p["valid"].numel() for p in parts)
            assert computed <= 1.1 * int(batch["valid"].sum())  # padding within 10%
    for other in weights[1:]:
        for name, value in weights[0].items():
            torch.testing.assert_close(other[name], value, atol=1e-6, rtol=1e-5)


@pytest.mark.slow
def test_distributed_training_with_two_processes(demo, tmp_path):
    """torchrun with 2 CPU processes (gloo): trains two folds in one process group, SAINT
    and a recurrent model (the LSTM's lanes split between the processes, every process
    stepping at every step), one process writes one set of checkpoints and one runs.csv
    row per fold and architecture; a refused fold folder stops both processes with the
    message (no process left waiting)."""
    out = fresh_run(demo, tmp_path)
    # "--": torchrun would read the script's --run as an abbreviation of its --run-path
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--"]
    env_threads = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        lstm = ("--arch", "saint,lstm", "--lstm-d-model", "8", "--lstm-window", "20")
        printed = train(out, "--epochs", "2", "--fold", "0,1", *lstm, launcher=launcher)
        args = ["--output-dir", out, "--run", RUN, *TINY, "--epochs", "2", "--fold", "1", *lstm]
        refused = run_numbered_script("03_train.py", *args, launcher=launcher, timeout=300)
    finally:
        if env_threads is None:
            os.environ.pop("OMP_NUM_THREADS")
        else:
            os.environ["OMP_NUM_THREADS"] = env_threads
    assert refused.returncode != 0 and "already holds this config's run" in refused.stderr
    for k in (0, 1):
        for folder in (run_of(out).fold(k), run_of(out).fold(k).member("lstm")):
            written = sorted(p.name for p in folder.path.glob("*.pt"))
            assert written == ["best.pt", "epoch_01.pt", "epoch_02.pt"], (k, folder.path)
    assert printed.count("epoch 2:") == 4  # only rank 0 reports, once per fold and model
    runs = pd.read_csv(Workspace(out).runs_table)
    assert runs["folds"].tolist() == [0, 0, 1, 1] and (runs["stage"] == "train").all()
    assert runs["model"].tolist()[:2] == ["saint+", "lstm"]
    folder = fold0_folder(out)
    history = pd.read_csv(folder.history)
    assert history["epoch"].tolist() == [1, 2]
    assert history["inner_auc"].notna().all() and history["fold_auc"].notna().all()
    checkpoint = torch.load(folder.checkpoint(), weights_only=False)
    assert not any(k.startswith("module.") for k in checkpoint["model_state"])


@pytest.mark.parametrize(
    ("amp", "capability", "expected"),
    [
        ("auto", (9, 0), torch.bfloat16),  # H100/H200
        ("auto", (8, 0), torch.bfloat16),  # A100
        ("auto", (7, 5), torch.float16),  # T4: bf16 only emulated
        ("auto", (6, 0), torch.float16),  # P100
        ("fp16", (9, 0), torch.float16),
        ("bf16", (8, 6), torch.bfloat16),
        ("off", (9, 0), None),
    ],
)
def test_autocast_uses_bf16_only_where_the_gpu_has_it(amp, capability, expected, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert autocast_dtype(amp, torch.device("cuda")) == expected


def test_autocast_refuses_emulated_bf16_and_is_off_on_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    with pytest.raises(ValueError, match="no native bf16"):
        autocast_dtype("bf16", torch.device("cuda"))
    assert autocast_dtype("auto", torch.device("cpu")) is None
    assert autocast_dtype("bf16", torch.device("cpu")) == torch.bfloat16
