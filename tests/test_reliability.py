# ruff: noqa: E501 (the case tables keep one case per line)
"""Reliability (RELIABILITY.md): a killed training run resumes to the weights of an
uninterrupted one; every writer, interrupted, leaves the previous output or none and no
temp files; 04_infer.py refuses bad checkpoints and memory budgets with one line and
predicts unknown students and questions; 01 refuses input over its memory budget before
writing; the same seed gives the same data, folds, weights and predictions; every stage
records its run."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import matplotlib.figure
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from common.data.arrays import TrainArrays, load_questions, question_parts
from common.data.fold_data import Fold, load_fold_data
from common.data.folds import FoldConfig, make_folds
from common.data.memory import check_memory, estimate_peak_memory
from common.data.preprocess import PreprocessConfig, preprocess
from common.files import remove_stale_temp_files
from common.model.checkpoint import CheckpointError, save_model, state_digest
from common.model.saint import SAINT, ModelConfig
from common.report.evaluate import EvaluateConfig, evaluate
from common.runs.table import append_run_row
from common.stream import online
from common.stream.api_loop import stream_loop
from common.stream.emulator import Emulator, EmulatorConfig, stream_frame
from common.stream.fold_stream import write_outputs
from common.stream.online import OnlineState, Snapshot, StateMemoryError, build_snapshot
from common.train.trainer import Trainer
from common.workspace import Bundle, KaggleFolder, ModelFolder, Workspace
from tests.helpers import (
    REPO,
    RUN,
    fold0_folder,
    make_tiny_demo,
    run_numbered_script,
    run_of,
    train_config,
)

CPU = torch.device("cpu")
# One thread: the same seed then gives bit-identical weights whatever the machine's load.
CPU_ENV = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
EPOCHS = 3
TRAIN_FLAGS = [
    "--run", RUN, "--fold", "0", "--epochs", str(EPOCHS), "--batch-size", "16", "--warmup", "10",
    "--d-model", "16", "--heads", "2", "--layers", "1", "--window", "20",
    "--no-progress", "--seed", "0", "--device", "cpu",
]  # fmt: skip
INFER_FLAGS = ["--fold", "0", "--no-progress", "--no-export", "--device", "cpu"]
HISTORY_VALUES = ["epoch", "train_loss", "inner_loss", "inner_auc", "fold_loss", "fold_auc", "lr"]


@pytest.fixture(autouse=True)
def one_torch_thread():
    """In-process model code on one thread: these models are tiny, and on a loaded machine
    a second thread only waits (a stream of 200 groups takes 5 s, not 30)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Interrupted(Exception):
    """Stands for whatever stops a writer half-way (an error, Ctrl-C, a full disk)."""


# ---------------------------------------------------------------------------------------
# runs shared by the tests: a demo, an uninterrupted training run, its streamed fold


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """40 simulated students through 01 and 02 (in-process)."""
    return make_tiny_demo(tmp_path_factory.mktemp("reliability"), users=40)


def fresh_run(demo: Path, dest: Path, folder: ModelFolder | None = None) -> Path:
    """An output dir sharing the demo's data and folds; a copy of `folder` (as its run's
    fold0/), if given."""
    dest.mkdir(parents=True, exist_ok=True)
    shared, fresh = Workspace(demo), Workspace(dest)
    os.symlink(shared.data.path, fresh.data.path)
    os.symlink(shared.folds.path, fresh.folds.path)
    if folder is not None:
        shutil.copytree(folder.path, fold0_folder(dest).path)
    return dest


def run(script: str, *args: object, process: bool = False) -> subprocess.CompletedProcess:
    """A numbered script in this process (one torch thread: see one_torch_thread), or in
    its own process with one thread where the process boundary is the point."""
    return run_numbered_script(script, *args, process=process, env=CPU_ENV)


@pytest.fixture(scope="module")
def trained(demo, tmp_path_factory) -> Path:
    """An uninterrupted 3-epoch training run of fold 0 (03_train.py), in a process of its
    own: the reference that killed and resumed processes must reproduce bit for bit."""
    out = fresh_run(demo, tmp_path_factory.mktemp("trained") / "run")
    done = run("03_train.py", "--output-dir", out, *TRAIN_FLAGS, process=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def streamed(demo, trained, tmp_path_factory) -> Path:
    """A copy of the trained run, streamed through 04_infer.py."""
    out = fresh_run(demo, tmp_path_factory.mktemp("streamed") / "run", fold0_folder(trained))
    done = run("04_infer.py", "--output-dir", out, *INFER_FLAGS)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def hidden(folder: Path) -> list[str]:
    """Temp files and folders (common.files names them '.<name>.tmp-<pid>')."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*"))


def tree_bytes(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def model_state(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=False)["model_state"]


def assert_same_weights(path: Path, reference: Path) -> None:
    got, want = model_state(path), model_state(reference)
    assert got.keys() == want.keys()
    unequal = [name for name in want if not torch.equal(got[name], want[name])]
    assert not unequal, f"{path} differs from {reference} in {unequal}"


# ---------------------------------------------------------------------------------------
# 1. kill and resume


def wait_until(done: Callable[[], bool], process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 240
    while not done():
        if process.poll() is not None:
            raise AssertionError(f"training ended early ({process.returncode}):\n{log.read_text()}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"timed out waiting:\n{log.read_text()}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def interrupted(demo, tmp_path_factory) -> dict:
    """03_train.py killed (SIGKILL) in the middle of epoch 2, then run again with --resume.
    Returns the run dir, what the kill left, and the resumed run's output."""
    out = fresh_run(demo, tmp_path_factory.mktemp("interrupted") / "run")
    folder, log = fold0_folder(out), out / "train.log"
    with open(log, "w") as sink:
        process = subprocess.Popen(
            [sys.executable, "03_train.py", "--output-dir", str(out), *TRAIN_FLAGS],
            cwd=REPO,
            env=CPU_ENV,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        # config.json is the last file an epoch writes: epoch 1 is complete and epoch 2's
        # training has begun. A third of epoch 1's training time later is mid-epoch.
        wait_until(lambda: folder.config.exists(), process, log)
        epoch_seconds = float(pd.read_csv(folder.history)["train_seconds"].iloc[0])
        time.sleep(epoch_seconds / 3)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    left = {
        "returncode": process.returncode,
        "files": sorted(p.name for p in folder.path.iterdir()),
        "epoch_01": folder.epoch_checkpoint(1).read_bytes(),
    }
    resumed = run("03_train.py", "--output-dir", out, *TRAIN_FLAGS, "--resume", process=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    return {"out": out, "left": left, "stdout": resumed.stdout, "stderr": resumed.stderr}


@pytest.mark.slow
def test_kill_lands_mid_epoch_and_leaves_only_whole_files(interrupted):
    left = interrupted["left"]
    assert left["returncode"] == -signal.SIGKILL
    visible = [name for name in left["files"] if not name.startswith(".")]
    assert visible == [
        "best.pt",
        "config.json",
        "epoch_01.pt",
        "history.csv",
        "inner_predictions.parquet",
        "train_run.json",
    ]
    # a kill inside torch.save could leave only epoch 2's temp file, never a partial file;
    # and the killed process's lock record, which the resume takes over and says so
    hidden = [name for name in left["files"] if name[0] == "." and name != ModelFolder.LOCK]
    assert all(name.startswith(".epoch_02.pt.tmp-") for name in hidden)
    assert ModelFolder.LOCK in left["files"]
    assert "note: took over the lock of" in interrupted["stderr"]


@pytest.mark.slow
def test_resumed_run_ends_with_the_uninterrupted_weights(interrupted, trained):
    out, reference = fold0_folder(interrupted["out"]), fold0_folder(trained)
    assert "resumed after epoch 1" in interrupted["stdout"]
    assert "epoch 1:" not in interrupted["stdout"]  # epoch 1 was not redone
    assert_same_weights(out.epoch_checkpoint(EPOCHS), reference.epoch_checkpoint(EPOCHS))
    assert_same_weights(out.checkpoint(), reference.checkpoint())
    history = pd.read_csv(out.history)
    pd.testing.assert_frame_equal(
        history[HISTORY_VALUES], pd.read_csv(reference.history)[HISTORY_VALUES]
    )
    assert history["epoch"].tolist() == list(range(1, EPOCHS + 1))
    assert not hidden(out.path)


@pytest.mark.slow
def test_same_seed_same_weights(interrupted, trained):
    """Two processes, one seed: epoch 1 of the interrupted run is the reference's."""
    copy = interrupted["out"] / "epoch_01_at_kill.pt"
    copy.write_bytes(interrupted["left"]["epoch_01"])
    assert_same_weights(copy, fold0_folder(trained).epoch_checkpoint(1))


@pytest.mark.slow
def test_resume_restores_what_a_kill_after_the_checkpoint_cut_short(demo, trained, tmp_path):
    """Killed between epoch_02.pt and the files written after it: resume rewrites best.pt
    and history.csv from the checkpoint, and removes the dead process's temp files."""
    out = fresh_run(demo, tmp_path / "run")
    folder, reference = fold0_folder(out), fold0_folder(trained)
    folder.path.mkdir(parents=True)
    for epoch in (1, 2):
        shutil.copyfile(reference.epoch_checkpoint(epoch), folder.epoch_checkpoint(epoch))
    shutil.copyfile(reference.epoch_checkpoint(1), folder.checkpoint())
    # a pid above Linux's largest pid_max
    stale = folder.file(f".{folder.epoch_checkpoint(3).name}.tmp-4194305")
    stale.write_bytes(b"half a checkpoint")
    config = train_config(
        d_model=16, heads=2, layers=1, window=20, epochs=2, progress=False, device="cpu"
    )
    data = load_fold_data(Workspace(out), 0, config.inner_share)
    trainer = Trainer(config, run_of(out), data, CPU)
    assert trainer.resume() and trainer.progress.epoch == 2
    best_epoch = torch.load(folder.checkpoint(), weights_only=False)["best_epoch"]
    assert torch.load(folder.checkpoint(), weights_only=False)["epoch"] == best_epoch
    assert pd.read_csv(folder.history)["epoch"].tolist() == [1, 2]
    assert not stale.exists()


@dataclass
class ResumeCase:
    name: str
    change: Callable[[ModelFolder], None]  # damages the fold folder's latest checkpoint
    config: dict  # TrainConfig fields of the resuming run
    expected: tuple[str, ...]

    def __repr__(self) -> str:
        return self.name


def edit_checkpoint(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        checkpoint = torch.load(path, weights_only=False)
        edit(checkpoint)
        torch.save(checkpoint, path)

    return change


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


# fmt: off
RESUME_CASES = [
    ResumeCase("truncated latest checkpoint", lambda d: truncate(d.epoch_checkpoint(2)), {}, ("epoch_02.pt: not a readable checkpoint", "truncated or corrupted")),
    ResumeCase("other model flags", lambda d: None, {"d_model": 32}, ("epoch_02.pt was trained with another model config", "d_model: 16 vs 32", "d_ff: 64 vs 128")),
    ResumeCase("other folds", lambda d: edit_checkpoint(lambda c: c["fold_fingerprint"].update(sha256="0123456789abcdef"))(d.epoch_checkpoint(2)), {}, ("epoch_02.pt was trained on other folds (fingerprint 0123456789abcdef) than those on disk now",)),
]
# fmt: on


@pytest.mark.parametrize("case", RESUME_CASES, ids=repr)
def test_resume_refuses_a_bad_checkpoint_by_name(case, demo, trained, tmp_path):
    out = fresh_run(demo, tmp_path / "run")
    folder, reference = fold0_folder(out), fold0_folder(trained)
    folder.path.mkdir(parents=True)
    for epoch in (1, 2):
        shutil.copyfile(reference.epoch_checkpoint(epoch), folder.epoch_checkpoint(epoch))
    case.change(folder)
    fields = dict(d_model=16, heads=2, layers=1, window=20, progress=False, device="cpu")
    config = train_config(**(fields | case.config))
    data = load_fold_data(Workspace(out), 0, config.inner_share)
    trainer = Trainer(config, run_of(out), data, CPU)
    with pytest.raises(CheckpointError) as error:
        trainer.resume()
    for part in case.expected:
        assert part in str(error.value), f"{part!r} not in {error.value}"


# ---------------------------------------------------------------------------------------
# 1. every writer, interrupted half-way


@contextlib.contextmanager
def interrupt(owner: object, name: str, when: Callable[..., bool] = lambda *a, **k: True):
    """Patch owner.name so that the first call for which `when(*args)` holds writes a few
    bytes to its destination (when it has one), then raises Interrupted."""
    original = getattr(owner, name)
    fired = []

    def broken(*args, **kwargs):
        if fired or not when(*args, **kwargs):
            return original(*args, **kwargs)
        fired.append(name)
        for target in args[:2] if owner is not os else ():  # a rename never half-writes
            if isinstance(target, os.PathLike) and in_temp_location(Path(target)):
                Path(target).write_bytes(b"half-written")
        raise Interrupted(f"{getattr(owner, '__name__', owner)}.{name}")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(owner, name, broken)
        yield fired


def in_temp_location(path: Path) -> bool:
    """A temp file of common.files, or a file in one of its temp folders."""
    return not path.is_dir() and any(part.startswith(".") for part in path.parts[-3:])


def renaming(prefix: str) -> Callable[..., bool]:
    """os.replace(src, dst) calls whose source's name starts with `prefix`."""
    return lambda src, *args, **kwargs: Path(src).name.startswith(prefix)


def named(prefix: str) -> Callable[..., bool]:
    """Path method calls on a path whose name starts with `prefix`."""
    return lambda path, *args, **kwargs: Path(path).name.startswith(prefix)


def run_preprocess(work: Path, demo: Path, demo_input: Path) -> Path:
    config = PreprocessConfig(demo_input, work, block_size=64 << 10, progress=False)
    workspace = Workspace(work)
    preprocess(config, workspace)
    return workspace.data.path


def run_folds(work: Path, demo: Path, demo_input: Path) -> Path:
    workspace = Workspace(work)
    if not workspace.data.path.exists():
        os.symlink(Workspace(demo).data.path, workspace.data.path)
    make_folds(workspace, FoldConfig(n_folds=3, seed=0))
    return workspace.folds.path


def run_checkpoint(work: Path, demo: Path, demo_input: Path) -> Path:
    model = SAINT(ModelConfig(n_questions=50, d_model=16, n_heads=2, window=20))
    folder = fold0_folder(work)
    save_model(folder.epoch_checkpoint(1), model)
    return folder.path


def run_write_outputs(work: Path, demo: Path, streamed: Path) -> Path:
    source = fold0_folder(streamed)
    results = pd.read_parquet(source.stream_predictions)
    table = pd.read_csv(source.stream_metrics_csv)
    summary = json.loads(source.stream_summary.read_text())
    write_outputs(fold0_folder(work), results, table, summary)
    return fold0_folder(work).path


def run_evaluate(work: Path, demo: Path, streamed: Path) -> Path:
    if not fold0_folder(work).path.exists():
        fresh_run(demo, work, fold0_folder(streamed))
    evaluate(
        run_of(work),
        demo.parent / "input",
        EvaluateConfig(bootstrap=0, progress=False),
    )
    return work


def run_append_row(work: Path, demo: Path, demo_input: Path) -> Path:
    append_run_row(
        Workspace(work), {"run": RUN, "stage": "evaluate", "folds": "0", "stream_auc": 0.7}
    )
    return work


@dataclass
class WriterCase:
    name: str
    stage: Callable[[Path, Path, Path], Path]  # (work dir, demo, source) -> what it writes
    owner: object  # the function that is interrupted: owner.attribute
    attribute: str
    when: Callable[..., bool] = lambda *args, **kwargs: True

    def __repr__(self) -> str:
        return self.name


# One line per writer: the stage, and the call that is interrupted half-way.
# fmt: off
WRITER_CASES = [
    WriterCase("01 train.parquet", run_preprocess, pq.ParquetWriter, "write_batch"),
    WriterCase("01 arrays manifest", run_preprocess, Path, "write_text", named("manifest.json")),
    WriterCase("01 questions.parquet", run_preprocess, pd.DataFrame, "to_parquet"),
    WriterCase("01 folder swap", run_preprocess, os, "replace", renaming(".data.tmp-")),
    WriterCase("02 fold npz", run_folds, np, "savez"),
    WriterCase("02 folder swap", run_folds, os, "replace", renaming(".folds.tmp-")),
    WriterCase("03 checkpoint", run_checkpoint, torch, "save"),
    WriterCase("03 checkpoint rename", run_checkpoint, os, "replace", renaming(".epoch_01.pt.tmp-")),
    WriterCase("04 validation_predictions.csv", run_write_outputs, pd.DataFrame, "to_csv"),
    WriterCase("04 stream_predictions.parquet", run_write_outputs, pd.DataFrame, "to_parquet"),
    WriterCase("05 figure", run_evaluate, matplotlib.figure.Figure, "savefig"),
    WriterCase("05 report.md", run_evaluate, Path, "write_text", named(".report.md.tmp-")),
    WriterCase("runs.csv row", run_append_row, os, "replace", renaming(".runs.csv.tmp-")),
]
# fmt: on


@pytest.mark.parametrize("case", WRITER_CASES, ids=repr)
def test_interrupted_writer_keeps_the_previous_output(case, demo, demo_input, request, tmp_path):
    """Run the stage, run it again interrupted, then once more whole: every file after
    the interruption is the first run's or the last run's (none half-written; the one
    being written, and a whole folder, the first run's), and no temp file is left."""
    source = request.getfixturevalue("streamed") if case.name[:2] in ("04", "05") else demo_input
    work = tmp_path / "out"
    work.mkdir()
    written = case.stage(work, demo, source)
    before = tree_bytes(written)
    with interrupt(case.owner, case.attribute, case.when) as fired, pytest.raises(Interrupted):
        case.stage(work, demo, source)
    assert fired, "the interrupted call was never made"
    after = tree_bytes(written)
    assert not hidden(work), f"temp files left behind: {hidden(work)}"
    assert after.keys() == before.keys(), (
        f"files lost or added: {sorted(after.keys() ^ before.keys())}"
        + (
            " (a folder swap needs atomic_dir to restore the old folder)"
            if "swap" in case.name
            else ""
        )
    )
    complete = tree_bytes(case.stage(work, demo, source))
    torn = [name for name, data in after.items() if data not in (before[name], complete.get(name))]
    assert not torn, f"half-written: {torn}"


@pytest.mark.slow
def test_a_stopped_report_leaves_the_previous_report_whole(demo, streamed, tmp_path):
    """05, run again with other settings, stopped at its second figure: report.md and
    every file of report/ are the previous report's, none of the new run's (the folder is
    swapped in whole, after its tables and figures are written)."""
    work = tmp_path / "out"
    work.mkdir()
    run_evaluate(work, demo, streamed)
    before = tree_bytes(run_of(work).path)
    calls = []

    def second(*args, **kwargs) -> bool:
        calls.append(1)
        return len(calls) == 2

    other = EvaluateConfig(bootstrap=20, progress=False)
    with interrupt(matplotlib.figure.Figure, "savefig", second), pytest.raises(Interrupted):
        evaluate(run_of(work), demo.parent / "input", other)  # other tables than the first's
    after = tree_bytes(run_of(work).path)
    report = {k for k in before if k.startswith("report")}
    assert {k: after.get(k) for k in report} == {k: before[k] for k in report}
    assert not hidden(work)


def test_snapshot_writer_keeps_the_previous_file(tmp_path):
    """The Kaggle bundle's state/snapshot.npz (np.savez_compressed into an atomic file)."""
    fields = {"question": np.zeros((2, 3), dtype=np.int16)}
    snapshot = Snapshot(
        np.arange(2), np.ones(2, dtype=np.int64), np.zeros(2, dtype=np.int64), fields
    )
    path = tmp_path / "state" / "snapshot.npz"
    snapshot.save(path)
    before = path.read_bytes()
    with interrupt(np, "savez_compressed"), pytest.raises(Interrupted):
        snapshot.save(path)
    assert path.read_bytes() == before and not hidden(tmp_path)


SLOW_WRITER = """
import sys, time
from common.files import atomic_file
with atomic_file(sys.argv[1]) as tmp, open(tmp, "wb") as out:
    for _ in range(200):
        out.write(b"new" * 100_000)
        out.flush()
        time.sleep(0.05)
"""


def test_sigkill_while_writing_leaves_the_old_file(tmp_path):
    """SIGKILL skips every cleanup: the destination keeps its old bytes, the half-written
    temp file stays hidden beside it until remove_stale_temp_files (run on --resume)."""
    path = tmp_path / "submission.csv"
    path.write_bytes(b"old")
    process = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(path)], cwd=REPO)
    temp = tmp_path / f".submission.csv.tmp-{process.pid}"
    deadline = time.monotonic() + 60
    while not (temp.exists() and temp.stat().st_size > 0):
        assert process.poll() is None and time.monotonic() < deadline, "the writer never wrote"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert path.read_bytes() == b"old"
    assert temp.exists() and hidden(tmp_path) == [temp.name]
    assert remove_stale_temp_files(tmp_path) == [temp] and not hidden(tmp_path)


# ---------------------------------------------------------------------------------------
# 2. bad input to 04_infer.py: refused in one line, nothing written


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"script_{name[:2]}", REPO / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def perturbed_after_digest(checkpoint: dict) -> None:
    """Record the weights' digest, then change one weight: damage inside tensor data."""
    checkpoint["model_digest"] = state_digest(checkpoint["model_state"])
    checkpoint["model_state"]["question_embed.weight"][3, 0] += 1.0


@dataclass
class InferCase:
    name: str
    change: Callable[[Path], None]  # applied to fold0/best.pt
    flags: tuple[str, ...]
    expected: tuple[str, ...]  # parts of the one-line message

    def __repr__(self) -> str:
        return self.name


def no_change(path: Path) -> None:
    pass


# One line per case: what is done to best.pt, extra flags, the message's parts.
# fmt: off
INFER_CASES = [
    InferCase("missing checkpoint", no_change, ("--checkpoint", "epoch_09.pt"), ("epoch_09.pt: checkpoint not found",)),
    InferCase("empty checkpoint", lambda p: p.write_bytes(b""), (), ("best.pt: not a readable checkpoint (0 bytes; truncated or corrupted?): EOFError",)),
    InferCase("truncated checkpoint", truncate, (), ("best.pt: not a readable checkpoint", "truncated or corrupted?", "RuntimeError")),
    InferCase("text file", lambda p: p.write_text("not a model\n"), (), ("best.pt: not a readable checkpoint", "UnpicklingError")),
    InferCase("no model_config", edit_checkpoint(lambda c: c.pop("model_config")), (), ("best.pt: not a checkpoint of this project (no 'model_config')",)),
    InferCase("weights of another config", edit_checkpoint(lambda c: c["model_config"].update(d_model=32, d_ff=128)), (), ("best.pt: its weights are of another model config", ": (16, 16) vs (32, 32)", "more)")),
    InferCase("config of another code version", edit_checkpoint(lambda c: c["model_config"].update(rope_scale=2.0)), (), ("best.pt: its model_config does not fit this code", "unknown ModelConfig keys ['rope_scale']")),
    InferCase("damaged tensor data", edit_checkpoint(perturbed_after_digest), (), ("best.pt: its weights do not match their recorded digest",)),
    InferCase("checkpoint of another fold", edit_checkpoint(lambda c: c["fold_fingerprint"].update(fold=1)), (), ("best.pt was made for fold 1, asked for fold 0",)),
    InferCase("checkpoint of other folds", edit_checkpoint(lambda c: c["fold_fingerprint"].update(sha256="0123456789abcdef")), (), ("best.pt was made for fold 0 of other folds (fingerprint 0123456789abcdef", "than", "fold0.npz on disk (fingerprint ")),
    InferCase("checkpoint without a fold fingerprint", edit_checkpoint(lambda c: c.pop("fold_fingerprint")), (), ("best.pt records no fold fingerprint",)),
    InferCase("state over its memory budget", no_change, ("--max-state-memory", "0.0001"), ("a state budget of 0.0001 GB (", "feature state and any other architecture's state) leaves room for", "caches of", "raise the budget (--max-state-memory)")),
]
# fmt: on


@pytest.mark.parametrize("case", INFER_CASES, ids=repr)
def test_infer_refuses_bad_input(case, demo, trained, tmp_path, monkeypatch, capsys):
    out = fresh_run(demo, tmp_path / "run", fold0_folder(trained))
    folder = fold0_folder(out)
    case.change(folder.checkpoint())
    before = sorted(p.name for p in folder.path.iterdir())
    argv = [
        "04_infer.py",
        "--output-dir",
        str(out),
        "--no-progress",
        "--no-export",
        "--device",
        "cpu",
    ]
    monkeypatch.setattr(sys, "argv", argv + list(case.flags))
    assert load_script("04_infer.py").main() == 2
    message = capsys.readouterr().err.strip()
    assert message.startswith("error: ") and "\n" not in message, message
    for part in case.expected:
        assert part in message, f"{part!r} not in {message!r}"
    assert sorted(p.name for p in folder.path.iterdir()) == before, "something was written"


@pytest.mark.slow
def test_infer_refusal_from_the_shell_has_no_traceback(demo, trained, tmp_path):
    out = fresh_run(demo, tmp_path / "run", fold0_folder(trained))
    truncate(fold0_folder(out).checkpoint())
    done = run("04_infer.py", "--output-dir", out, "--no-progress", "--no-export", process=True)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr


def unknown_stream(demo: Path, n_questions: int) -> tuple[pd.DataFrame, list[int]]:
    """The first 300 rows of fold 0's stream, two students renamed to ids never seen, and
    some question rows pointing at ids outside the model's 0..n_questions-1 (the int16
    maximum and a negative id among them)."""
    workspace = Workspace(demo)
    arrays = TrainArrays.load(workspace.data)
    frame = stream_frame(arrays, Fold.load(workspace, 0).stream_index[:300])
    new_users = [2_000_000_001, 2_000_000_002]
    for new, old in zip(new_users, frame["user_id"].unique()[:2], strict=True):
        frame.loc[frame["user_id"] == old, "user_id"] = new
    questions = np.flatnonzero(frame["content_type_id"].to_numpy() == 0)
    content = frame["content_id"].to_numpy().copy()
    content[questions[::7]] = n_questions + 3
    content[questions[3::7]] = np.iinfo(np.int16).max
    content[questions[5::7]] = -1
    frame["content_id"] = content
    return frame, new_users


def demo_state(demo: Path, model: SAINT, **options) -> OnlineState:
    workspace = Workspace(demo)
    data = load_fold_data(workspace, 0)
    arrays = TrainArrays.load(workspace.data)
    parts = question_parts(load_questions(workspace.data))
    snapshot = build_snapshot(
        data.sequences, arrays.users, data.train_length, model.config.receptive_field
    )
    return OnlineState(model, parts, CPU, snapshot, **options)


def tiny_model(n_questions: int) -> SAINT:
    torch.manual_seed(0)
    return SAINT(ModelConfig(n_questions=n_questions, d_model=16, n_heads=2, window=20)).eval()


def test_unknown_students_and_questions_are_predicted(demo):
    n_questions = load_fold_data(Workspace(demo), 0).n_questions
    frame, new_users = unknown_stream(demo, n_questions)
    model = tiny_model(n_questions)
    state = demo_state(demo, model)
    env = Emulator(frame, EmulatorConfig(seed=2, max_group_students=5))
    stream_loop(env, state, progress=False)
    results = env.results()
    assert len(results) == int((frame["content_type_id"] == 0).sum())
    prediction = results["prediction"].to_numpy()
    assert np.isfinite(prediction).all() and ((prediction > 0) & (prediction < 1)).all()
    unknown = (results["content_id"] >= n_questions) | (results["content_id"] < 0)
    assert unknown.sum() > 10 and (results["content_id"] < 0).any()
    assert results["user_id"].isin(new_users).sum() > 0
    assert all(user in state.slot_of for user in new_users)


def test_state_memory_budget_sizes_the_cache_pool(demo, monkeypatch):
    """A budget shrinks the cache pool to what it leaves beside the rings of the known
    students and NEW_STUDENT_SHARE more, to no more caches than those students (at least
    MIN_POOL_STUDENTS) and to no more than cache_students; it allocates the rings and the
    pool at once; one too small for MIN_POOL_STUDENTS caches is refused before streaming,
    saying what it would need."""
    model = tiny_model(load_fold_data(Workspace(demo), 0).n_questions)
    unbounded = demo_state(demo, model, cache_students=4096)
    known, ring, cache = (
        len(unbounded.slot_of),
        unbounded.student_bytes(),
        unbounded.pool.bytes_per_student(),
    )
    planned = known + int(known * online.NEW_STUDENT_SHARE)
    assert planned < online.MIN_POOL_STUDENTS  # this demo's few students: the floor
    small = demo_state(demo, model, cache_students=4096, max_bytes=planned * ring + 300 * cache)
    assert small.pool.size == online.MIN_POOL_STUDENTS and small.capacity >= planned
    with pytest.raises(
        StateMemoryError,
        match=f"room for 255 model caches beside the rings of {planned:,} students",
    ):
        demo_state(demo, model, max_bytes=planned * ring + 255 * cache + cache // 2)
    monkeypatch.setattr(online, "NEW_STUDENT_SHARE", 40)  # planned past the floor and 1,024
    many = known + known * 40
    budget = many * ring + 300 * cache
    fitted = demo_state(demo, model, cache_students=4096, max_bytes=budget)
    assert fitted.pool.size == 300 and fitted.state_bytes()["cache_students"] == 300
    assert fitted.capacity == many > 1024  # the rings planned at once, never grown by copying
    fitted.pool.acquire(np.arange(3), fitted.cache_index)
    assert fitted.pool.capacity == 300  # the pool allocated whole at its first use
    roomy = demo_state(demo, model, cache_students=100, max_bytes=budget)
    assert roomy.pool.size == 100  # never above cache_students
    few = demo_state(demo, model, cache_students=4096, max_bytes=many * ring + 5000 * cache)
    assert few.pool.size == many  # no more caches than the students planned


def test_state_memory_budget_stops_growth_at_the_budget(demo, monkeypatch):
    """The rings grow to the budget and not past it, and the first
    student who does not fit raises StateMemoryError mid-stream (here the budget leaves
    no room for new students beyond one)."""
    monkeypatch.setattr(online, "NEW_STUDENT_SHARE", 0)
    n_questions = load_fold_data(Workspace(demo), 0).n_questions
    frame, _ = unknown_stream(demo, n_questions)
    model = tiny_model(n_questions)
    unbounded = demo_state(demo, model, cache_students=8)
    known = len(unbounded.slot_of)
    budget = unbounded.pool.planned_bytes() + (known + 1) * unbounded.student_bytes()
    state = demo_state(demo, model, cache_students=8, max_bytes=budget)
    assert state.capacity == known + 1 and state.state_bytes()["total"] <= budget
    env = Emulator(frame, EmulatorConfig(seed=2, max_group_students=5))
    with pytest.raises(StateMemoryError, match=f"for {known + 2:,} students"):
        stream_loop(env, state, progress=False)
    assert len(state.slot_of) == known + 1


# ---------------------------------------------------------------------------------------
# 4. 01_preprocess.py's memory budget


def big_sparse_copy(demo_input: Path, dest: Path, size: int) -> Path:
    """demo_input with train.csv grown to `size` bytes (sparse: the demo's rows, then a
    hole). Only the estimate reads it: the budget check comes before everything else."""
    shutil.copytree(demo_input, dest)
    with open(dest / "train.csv", "r+b") as handle:
        handle.truncate(size)
    return dest


def test_memory_estimate_covers_the_measured_peak(demo_input, tmp_path):
    """bench/results/preprocess.txt projects the real train.csv (5.7 GB, 101M rows) at
    0.62 GB peak with increasing row_ids and at most 2.34 GB without: the estimate is
    above both, and --assign-row-ids (rows numbered, no duplicate check) lowers it."""
    real_size = 5_700_000_000
    input_dir = big_sparse_copy(demo_input, tmp_path / "input", real_size)
    config = PreprocessConfig(input_dir, tmp_path / "out", progress=False)
    estimate = estimate_peak_memory(input_dir / "train.csv", config)
    assert 80e6 < estimate.rows < 130e6 and estimate.students < estimate.rows / 100
    assert 2.34e9 < estimate.peak_bytes < 4e9
    numbered = PreprocessConfig(input_dir, tmp_path / "out", assign_row_ids=True)
    assert 0.62e9 < estimate_peak_memory(input_dir / "train.csv", numbered).peak_bytes < 1.5e9


def test_input_over_the_memory_budget_is_refused_before_anything_is_written(
    demo_input, tmp_path, run_script
):
    # 600 MB, not the real 5.7 GB: were the check to let it through, 01 would read the
    # hole as one line of that size
    input_dir = big_sparse_copy(demo_input, tmp_path / "input", 600_000_000)
    output_dir = tmp_path / "out"
    done = run_script(
        "01_preprocess.py",
        "--input-dir",
        input_dir,
        "--output-dir",
        output_dir,
        "--max-memory",
        "0.5",
        "--no-progress",
    )
    assert done.returncode == 2, done.stderr
    message = done.stderr.strip()
    assert message.startswith("error: ") and "\n" not in message and "Traceback" not in message
    for part in (
        "train.csv: found '0.60 GB of CSV, ~",
        "rows, ~",
        "estimated peak",
        "expected an estimated peak within 0.50 GB (--max-memory)",
    ):
        assert part in message, message
    assert not output_dir.exists()
    budget = PreprocessConfig(input_dir, output_dir, max_memory=2)
    assert check_memory(input_dir / "train.csv", budget).peak_bytes < 2e9
    assert check_memory(input_dir / "train.csv", replace(budget, max_memory=0)) is None


# ---------------------------------------------------------------------------------------
# 3. reproducibility and run records


def test_same_input_same_data_and_folds(demo_input, tmp_path):
    """01 and 02 twice on the same input and seed: byte-identical outputs, run records
    aside. (The demo generator: tests/test_demo.py::test_same_seed_same_bytes_other_seed_differs;
    the fold artifact alone: tests/test_folds.py::test_seed_fixes_the_artifact.)"""
    trees = []
    for name in ("a", "b"):
        out = tmp_path / name
        preprocess(PreprocessConfig(demo_input, out, progress=False), Workspace(out))
        make_folds(Workspace(out), FoldConfig(n_folds=3, seed=4))
        tree = tree_bytes(out)  # run records and 01's summary (it has timings) aside
        trees.append(
            {k: v for k, v in tree.items() if not k.endswith(("_run.json", "_summary.json"))}
        )
    assert trees[0] == trees[1]
    assert any(k.endswith(".npz") for k in trees[0]) and any(
        k.endswith(".parquet") for k in trees[0]
    )


@pytest.mark.slow
def test_same_checkpoint_same_predictions(demo, trained, streamed, tmp_path, monkeypatch):
    loads = []  # the folds read from disk (each read hashes the file for its fingerprint)
    load = Fold.load.__func__
    monkeypatch.setattr(
        Fold, "load", classmethod(lambda cls, ws, k: loads.append(k) or load(cls, ws, k))
    )
    again = fresh_run(demo, tmp_path / "run", fold0_folder(trained))
    done = run("04_infer.py", "--output-dir", again, *INFER_FLAGS)
    assert done.returncode == 0, done.stderr
    assert loads == [0]  # the stream reads and fingerprints its fold once
    ours, theirs = fold0_folder(again), fold0_folder(streamed)
    for name in ("validation_predictions", "stream_predictions"):
        assert getattr(ours, name).read_bytes() == getattr(theirs, name).read_bytes()


@pytest.mark.slow
def test_the_bundle_holds_the_checkpoint_that_was_streamed(demo, trained, tmp_path):
    """04 --checkpoint epoch_NN.pt streams that epoch, and the bundle it exports carries
    that very checkpoint (as <fold>/best.pt), not the fold's best.pt."""
    reference = fold0_folder(trained)
    best_epoch = torch.load(reference.checkpoint(), weights_only=False)["best_epoch"]
    other = next(e for e in range(1, EPOCHS + 1) if e != best_epoch)
    streamed_path = reference.epoch_checkpoint(other)
    out, bundle = fresh_run(demo, tmp_path / "run", reference), tmp_path / "bundle"
    flags = ("--checkpoint", streamed_path.name, "--kaggle-dir", bundle)
    done = run("04_infer.py", "--output-dir", out, "--fold", 0, "--no-progress", *flags)
    assert done.returncode == 0, done.stderr

    def digest(path: Path) -> str:
        return torch.load(path, weights_only=False)["model_digest"]

    bundled = Bundle(KaggleFolder(bundle).dataset).model("fold0").checkpoint()
    assert digest(bundled) == digest(streamed_path)
    assert digest(streamed_path) != digest(reference.checkpoint())


@pytest.mark.slow
def test_every_stage_records_its_run(demo, streamed, tmp_path):
    evaluated = tmp_path / "evaluated"
    evaluated.mkdir()
    run_evaluate(evaluated, demo, streamed)
    records = {
        "01": Workspace(demo).data.record("preprocess"),
        "02": Workspace(demo).record("folds"),
        "03": fold0_folder(streamed).record("train"),
        "04": fold0_folder(streamed).record("infer"),
        "05": run_of(evaluated).report.record("evaluate"),
    }
    for stage, path in records.items():
        record = json.loads(path.read_text())
        assert {"argv", "config", "environment", "started"} <= record.keys(), stage
        versions = record["environment"]
        for key in ("python", "numpy", "pandas", "pyarrow", "torch", "device"):
            assert versions.get(key), f"{stage}: no {key} in {path}"
    summary = json.loads(fold0_folder(streamed).stream_summary.read_text())
    state = summary["state_bytes"]
    features = state.get("feature_state", 0)  # 04 streams the trees' features too
    assert features > 0
    assert state["total"] == state["student_state"] + state["cache_pool"] + features


@pytest.mark.slow
@pytest.mark.parametrize("column", ["trees_prediction", "prediction"])
def test_a_stream_whose_blend_parts_disagree_with_the_batch_is_refused(
    demo, streamed, tmp_path, column
):
    """05 scores 04's trees again from the batch past-event features (not the online
    state 04 streamed with) and blends them with the streamed model: a streamed tree or
    blend probability 1e-4 away from that refuses the file, naming the column."""
    out = fresh_run(demo, tmp_path / "run", fold0_folder(streamed))
    path = fold0_folder(out).stream_predictions
    rows = pd.read_parquet(path)
    assert {"model_prediction", "trees_prediction"} <= set(rows.columns)
    run_evaluate(tmp_path / "as_streamed", demo, out)  # agrees as 04 wrote it
    rows.loc[7, column] += 1e-4
    rows.to_parquet(path, index=False)
    with pytest.raises(ValueError, match=f"column '{column}' is 0.0001 from 05's batch"):
        run_evaluate(out, demo, out)
