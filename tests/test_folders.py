"""Files where the pipeline keeps folders are refused before any work, naming the path,
and a stage that refuses or fails leaves nothing behind: no temporary or half-swapped
folder, no empty output or run folder for later stages to take for a run."""

from __future__ import annotations

import shutil

import pytest

from common.errors import UserError
from common.files import atomic_dir, no_new_empty_folders
from tests.helpers import make_tiny_demo, run_numbered_script

TINY = ("--d-model", 16, "--heads", 2, "--layers", 1, "--window", 20, "--batch-size", 16)
TINY += ("--epochs", 1, "--no-progress", "--device", "cpu")


def everything(root) -> list[str]:
    """Every path under root (hidden ones too), relative."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def refused(script: str, *args: object) -> str:
    done = run_numbered_script(script, *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-800:]
    return done.stderr.strip().splitlines()[-1]


# (the path made a file, relative to the workspace; the script; its flags)
CASES = [
    ("", "02_make_folds.py", ()),
    ("", "03_train.py", ("--run", "r", *TINY)),
    ("", "04_infer.py", ("--run", "r")),
    ("", "05_evaluate.py", ("--run", "r")),
    ("data", "02_make_folds.py", ()),
    ("folds", "02_make_folds.py", ()),  # was swapped aside as .folds.old-PID
    ("folds", "03_train.py", ("--run", "r", *TINY)),
    ("runs", "03_train.py", ("--run", "r", *TINY)),
    ("runs", "05_evaluate.py", ("--runs",)),
    ("runs/r", "03_train.py", ("--run", "r", *TINY)),
    ("runs/r/fold1", "03_train.py", ("--run", "r", "--fold", 1, *TINY)),
    ("runs/r/report", "05_evaluate.py", ("--run", "r")),
    ("runs/r/kaggle", "04_infer.py", ("--run", "r")),
]


@pytest.mark.parametrize(
    ("where", "script", "flags"), CASES, ids=[f"{c[1][:2]} {c[0] or 'output'}" for c in CASES]
)
def test_a_file_where_a_folder_belongs_is_refused_before_work(tmp_path, where, script, flags):
    out = make_tiny_demo(tmp_path, users=40)
    if where == "":
        shutil.rmtree(out)
    target = out / where
    if target.is_dir():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("not a folder")
    before = everything(tmp_path)
    message = refused(script, "--output-dir", out, *flags)
    assert f"{target} is a file where the pipeline keeps a folder" in message, message
    assert everything(tmp_path) == before  # nothing written, swapped or left beside it


def test_a_kaggle_dir_that_is_a_file_is_refused_before_streaming(tmp_path):
    out = make_tiny_demo(tmp_path, users=40)
    kaggle = tmp_path / "kaggle"
    kaggle.write_text("not a folder")
    message = refused("04_infer.py", "--output-dir", out, "--kaggle-dir", kaggle)
    assert f"{kaggle} is a file where the pipeline keeps a folder" in message
    kaggle.unlink()
    (kaggle / "dataset").parent.mkdir()
    (kaggle / "dataset").write_text("not a folder")
    assert f"{kaggle / 'dataset'} is a file" in refused(
        "04_infer.py", "--output-dir", out, "--kaggle-dir", kaggle
    )


def test_a_folder_swap_onto_a_file_is_refused_and_leaves_nothing(tmp_path):
    target = tmp_path / "folds"
    target.write_text("a file")
    refusal = pytest.raises(UserError, match="is a file where the pipeline keeps a folder")
    with refusal, atomic_dir(target) as tmp:
        (tmp / "fold0.npz").write_text("never")
    assert everything(tmp_path) == ["folds"] and target.read_text() == "a file"


def test_a_failed_block_removes_the_empty_folders_it_made_and_keeps_the_rest(tmp_path):
    (tmp_path / "old").mkdir()
    with pytest.raises(KeyboardInterrupt), no_new_empty_folders(tmp_path):
        (tmp_path / "runs" / "new" / "fold0").mkdir(parents=True)
        (tmp_path / "runs" / "kept").mkdir()
        (tmp_path / "runs" / "kept" / "epoch_01.pt").write_text("a finished epoch")
        raise KeyboardInterrupt
    assert everything(tmp_path) == ["old", "runs", "runs/kept", "runs/kept/epoch_01.pt"]
    with no_new_empty_folders(tmp_path):  # a block that ends well keeps its folders
        (tmp_path / "made").mkdir()
    assert (tmp_path / "made").is_dir()


def test_refused_stages_leave_no_empty_output_or_run_folder(tmp_path):
    new = tmp_path / "new_output"
    refused("01_preprocess.py", "--input-dir", tmp_path / "nowhere", "--output-dir", new)
    assert not new.exists()
    out = make_tiny_demo(tmp_path, users=40)
    before = everything(out)
    message = refused(
        "03_train.py", "--output-dir", out, "--run", "t", "--teacher", "nosuch", *TINY
    )
    assert "nosuch" in message
    assert everything(out) == before  # no runs/t/ that 04 and 05 would list


def test_05_on_a_missing_output_folder_says_so(tmp_path):
    for flags in (("--runs",), ()):
        message = refused("05_evaluate.py", "--output-dir", tmp_path / "nope", *flags)
        assert f"--output-dir {tmp_path / 'nope'}: no such folder" in message
    assert not (tmp_path / "nope").exists()


def test_the_converter_refuses_a_folder_given_as_an_input_file(tmp_path):
    (tmp_path / "a_folder").mkdir()
    done = run_numbered_script(
        "00_convert_kt_dataset.py", "--format", "4line", "--inputs", tmp_path / "a_folder",
        "--name", "mine", "--output-dir", tmp_path / "out",
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{tmp_path / 'a_folder'} is a folder; expected a file" in done.stderr
    assert not (tmp_path / "out").exists()


def test_00_onto_a_file_is_refused_before_it_simulates(tmp_path):
    target = tmp_path / "input"
    target.write_text("not a folder")
    message = refused("00_make_demo_input.py", "--output-dir", target)  # was "[Errno 17]"
    assert (
        message == f"error: {target} is a file where the pipeline keeps a folder: move or delete it"
    )
    assert everything(tmp_path) == ["input"]
