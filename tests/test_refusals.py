"""What a new user gets wrong, refused before any work with the cause named (exit 2, one
line, nothing written): rules between flags and data (folds and students, the inner
split), stale stages (folds made from other data, a stage not run yet), a corrupt
predictions file, a device that is not there, Kaggle ids; and the help, Ctrl-C, the
schedule a resume recomputes, 00 then 01 with the default folders, the export's owner."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from common.stream.kaggle_export import KaggleConfig, kaggle_owner
from common.workspace import Bundle, KaggleFolder, ModelFolder, Workspace
from tests.helpers import REPO, RUN, fold0_folder, make_tiny_demo, run_folder, run_numbered_script

TINY = ("--d-model", 16, "--heads", 2, "--layers", 1, "--window", 20, "--batch-size", 16)
TINY += ("--warmup", 5, "--no-progress", "--device", "cpu", "--run", RUN)
CPU_ENV = os.environ | {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """A tiny demo through 01 and 02 (read-only: copy it to change anything)."""
    return make_tiny_demo(tmp_path_factory.mktemp("refusals"), users=60)


@pytest.fixture(scope="module")
def streamed(demo, tmp_path_factory) -> Path:
    """A copy of the demo with fold 0 trained (1 epoch) and streamed."""
    out = tmp_path_factory.mktemp("streamed") / "out"
    shutil.copytree(demo, out)
    for script, extra in (("03_train.py", (*TINY, "--epochs", 1)), ("04_infer.py", ())):
        done = run_numbered_script(script, "--output-dir", out, "--fold", 0, *extra, "--no-export"
                                   if script == "04_infer.py" else "--no-progress")  # fmt: skip
        assert done.returncode == 0, done.stderr
    return out


def refused(script: str, *args: object) -> str:
    """The one-line error of a refused run (exit 2, no traceback)."""
    done = run_numbered_script(script, *args)
    assert done.returncode == 2, (done.returncode, done.stdout[-300:], done.stderr[-800:])
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


def test_more_folds_than_students_are_refused_before_writing(demo, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(Workspace(demo).data.path, Workspace(out).data.path)
    message = refused("02_make_folds.py", "--output-dir", out, "--n-folds", 1000)
    assert "--n-folds 1000: only 60 students" in message and "at most 60" in message
    assert not Workspace(out).folds.path.exists()


@pytest.mark.parametrize(
    ("share", "expected"),
    [(0.001, "no student in the inner split"), (0.999, "no student to train on")],
)
def test_an_inner_split_that_leaves_no_student_on_a_side_is_refused(
    demo, tmp_path, share, expected
):
    out = tmp_path / "out"
    shutil.copytree(demo, out)
    message = refused("03_train.py", "--output-dir", out, *TINY, "--inner-share", share)
    assert f"--inner-share {share:g}" in message and expected in message
    assert not run_folder(out).exists(), "a run folder was made"


def test_cross_field_rules_are_refused_as_flags(demo, tmp_path):
    out = tmp_path / "out"
    message = refused("03_train.py", "--output-dir", out, *TINY, "--inner-share", 0)
    assert "--inner-share 0 leaves no inner split" in message
    message = refused("03_train.py", "--output-dir", out, "--d-model", 30, "--heads", 4)
    assert "d_model 30 must split into 4 heads" in message
    if not torch.cuda.is_available():
        message = refused("03_train.py", "--output-dir", out, "--device", "cuda")
        assert "--device cuda: torch sees no CUDA device here" in message
    assert not out.exists()


def test_a_stage_not_run_yet_is_named(tmp_path):
    assert "run 01_preprocess.py first" in refused("02_make_folds.py", "--output-dir", tmp_path)
    assert "run 02_make_folds.py first" in refused("03_train.py", "--output-dir", tmp_path)


def test_folds_made_from_other_data_are_refused(streamed, demo, tmp_path):
    """01 run again on other data: the folds (and the run) belong to the old data."""
    out = tmp_path / "out"
    shutil.copytree(streamed, out)
    other = make_tiny_demo(tmp_path / "other", users=60, seed=5)
    shutil.rmtree(Workspace(out).data.path)
    shutil.copytree(Workspace(other).data.path, Workspace(out).data.path)
    for script, extra in (
        ("03_train.py", (*TINY, "--run", "again")),
        ("04_infer.py", ("--no-export", "--run", RUN)),
        ("05_evaluate.py", ("--run", RUN, "--bootstrap", 0)),
    ):
        message = refused(script, "--output-dir", out, *extra)
        assert "were made from other data" in message and "run 02_make_folds.py again" in message
    assert not run_folder(out, "again").exists()


def test_a_corrupt_predictions_file_is_named(streamed, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(streamed, out)
    path = fold0_folder(out).stream_predictions
    path.write_bytes(path.read_bytes()[:100])
    message = refused("05_evaluate.py", "--output-dir", out, "--bootstrap", 0)
    assert (
        str(path) in message and "cannot be read" in message and "04_infer.py --fold 0" in message
    )


def test_help_texts_say_what_the_flags_do():
    def help_of(script: str) -> str:
        return " ".join(run_numbered_script(script, "--help").stdout.split())

    evaluate = help_of("05_evaluate.py")
    options = evaluate[evaluate.index("options:") :]
    folds = options[options.index("--folds FOLDS") : options.index("--bootstrap BOOTSTRAP")]
    assert folds.count("default") == 1 and "default: every fold{k}/ of the run" in folds
    assert "--trees, --no-trees" not in evaluate  # 05 reads the trees 04 streamed, fits none
    infer = help_of("04_infer.py")
    assert "--trees, --no-trees fit the trees (boosted trees over past-event features)" in infer
    demo_help = help_of("00_make_demo_input.py")
    assert (
        "where train.csv, questions.csv, lectures.csv and demo_truth.csv are written" in demo_help
    )
    assert "(default: input, where 01_preprocess.py reads" in demo_help


def test_kaggle_ids_and_owner(tmp_path, monkeypatch):
    """An id Kaggle would refuse is refused as a flag; the owner comes from
    $KAGGLE_USERNAME, else kaggle.json; without either the export says so."""
    message = refused("04_infer.py", "--kaggle-dataset-id", "my dataset")
    assert "--kaggle-dataset-id 'my dataset'" in message and "owner/slug" in message
    with pytest.raises(ValueError, match="--kaggle-kernel-id 'x/ab'"):
        KaggleConfig(kaggle_kernel_id="x/ab")
    monkeypatch.delenv("KAGGLE_USERNAME", raising=False)
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path))
    assert kaggle_owner() is None and not KaggleConfig().ids().owner_found
    (tmp_path / "kaggle.json").write_text(json.dumps({"username": "someone", "key": "k"}))
    assert KaggleConfig().ids().dataset == "someone/riiid-saint"
    monkeypatch.setenv("KAGGLE_USERNAME", "another")
    assert KaggleConfig().ids().dataset == "another/riiid-saint"


def test_an_export_without_an_owner_says_so(streamed, tmp_path, monkeypatch):
    monkeypatch.delenv("KAGGLE_USERNAME", raising=False)
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path / "none"))
    out = tmp_path / "out"
    shutil.copytree(streamed, out)
    flags = ("--output-dir", out, "--fold", 0, "--no-progress", "--kaggle-dir", tmp_path / "k")
    done = run_numbered_script("04_infer.py", *flags, "--no-trees")
    assert done.returncode == 0, done.stderr
    assert "no Kaggle user name was found" in done.stdout
    metadata = json.loads(Bundle(KaggleFolder(tmp_path / "k").dataset).metadata.read_text())
    assert metadata["id"] == "YOUR-KAGGLE-USERNAME/riiid-saint"


def test_00_then_01_with_the_default_folders(tmp_path, monkeypatch):
    """The README's order: 00 writes into input/, where 01 reads; a train.csv that is not
    a demo's is never replaced."""
    monkeypatch.chdir(tmp_path)
    done = run_numbered_script("00_make_demo_input.py", "--users", 30, "--max-events", 300)
    assert done.returncode == 0, done.stderr
    done = run_numbered_script("01_preprocess.py", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert Workspace(tmp_path / "output").data.fingerprint.exists()
    (tmp_path / "input" / "demo_run.json").unlink()  # as if the Kaggle files were there
    message = refused("00_make_demo_input.py", "--users", 30)
    assert "is not a demo's" in message and "choose another --output-dir" in message


def test_resume_with_other_epochs_says_which_schedule_it_recomputed(streamed, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(streamed, out)
    flags = ("--output-dir", out, "--fold", 0, *TINY, "--resume", "--epochs", 2)
    done = run_numbered_script("03_train.py", *flags)
    assert done.returncode == 0, done.stderr
    assert "--epochs 2 (the checkpoint's run: 1): the noam schedule is recomputed over" in (
        done.stdout
    )


@pytest.mark.slow
def test_ctrl_c_prints_one_line(demo, tmp_path):
    """SIGINT while 03 trains: one line that says what was kept and how to go on, the
    shell's status 130, no traceback."""
    out = tmp_path / "out"
    shutil.copytree(demo, out)
    command = [sys.executable, str(REPO / "03_train.py"), "--output-dir", str(out), "--fold", "0"]
    # no early stopping: the run must still be training when the signal comes, however
    # slowly this test is scheduled beside others
    command += [str(a) for a in (*TINY, "--epochs", 50, "--patience", 50)]

    # a runner that starts the suite in the background ignores SIGINT, and a child
    # inherits that: 03 would then never see the signal; give it the default disposition
    def default_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    process = subprocess.Popen(command, cwd=REPO, env=CPU_ENV, preexec_fn=default_sigint, **pipes)
    deadline = time.monotonic() + 120
    while fold0_folder(out).latest_epoch_checkpoint() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert process.poll() is None, "03 ended before it could be interrupted"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert (
        last.startswith("interrupted: the epochs finished so far are kept") and "--resume" in last
    )


def test_04_full_without_a_full_data_model_names_03_before_fitting_trees(streamed):
    """The precondition comes first: no trees are fitted or written beside a model that
    is not there (full/ would then hold trees alone, which 03 --full-data refuses)."""
    message = refused("04_infer.py", "--output-dir", streamed, "--full")
    assert f"03_train.py --run {RUN} --full-data" in message, message
    assert not Workspace(streamed).run(RUN).full.path.exists()


def test_a_stream_without_trees_leaves_no_earlier_trees_to_ship(streamed, tmp_path):
    """--no-trees after a stream with trees: the earlier trees and weight are removed
    with the stream they belonged to, so no export ships them with this model."""
    out = tmp_path / "out"
    shutil.copytree(streamed, out)
    folder = fold0_folder(out)
    assert all(folder.file(name).exists() for name in ModelFolder.BLEND_FILES)
    done = run_numbered_script("04_infer.py", "--output-dir", out, "--no-trees", "--no-export")
    assert done.returncode == 0, done.stderr
    assert not any(folder.file(name).exists() for name in ModelFolder.BLEND_FILES)


def test_03_refuses_a_damaged_runs_table_before_training(demo, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(demo, out)
    table = Workspace(out).runs_table
    table.write_bytes(b"run,stage\n\xff\xfe not a table\n")
    message = refused("03_train.py", "--output-dir", out, "--fold", 0, *TINY, "--epochs", 1)
    assert str(table) in message, message
    assert not Workspace(out).runs.exists()  # refused before the run's folder was made
