"""Nothing lost (RELIABILITY.md, "Nothing lost"): a stage replaces only what it wrote in
its folder and follows a symbolic link to it; what a killed or stopped stage left is
removed by the next run (or by the stage itself, on SIGTERM and Ctrl-C); one process
writes a run's fold at a time; and the operating system's write errors (a full disk, a
read-only folder, a name too long, no permission, a folder that vanished) are one line
naming the path and what to do, with nothing half-written left."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from common.errors import UserError
from common.files import WriteError, atomic_dir, atomic_file
from common.model.checkpoint import save_checkpoint
from common.runs.folders import fold_lock
from common.workspace import DataFolder, Workspace
from tests.helpers import REPO, make_tiny_demo, run_numbered_script

TINY = ("--d-model", 16, "--heads", 2, "--layers", 1, "--window", 20, "--batch-size", 16)
TINY += ("--epochs", 1, "--no-progress", "--device", "cpu")


def everything(root: Path) -> list[str]:
    """Every path under root (hidden ones too), relative."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def temp_names(root: Path) -> list[str]:
    """What common.files leaves only when stopped: temp files and folders, swapped folders."""
    return [p for p in everything(root) if ".tmp-" in p or ".old-" in p]


def refused(script: str, *args: object) -> str:
    """The one line of a refused run (exit 2, no traceback)."""
    done = run_numbered_script(script, *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-800:]
    return done.stderr.strip().splitlines()[-1]


def dead_pid() -> int:
    """The id of a process that has ended (what a killed stage's temp names carry)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


# ---------------------------------------------------------------------------------------
# a stage replaces only what it wrote; a link to its folder is followed


def test_a_stage_replaces_only_what_it_wrote_in_its_folder(tmp_path):
    out = make_tiny_demo(tmp_path, users=40)
    workspace = Workspace(out)
    data, folds = workspace.data.path, workspace.folds.path
    (data / "notes.txt").write_text("mine")
    (data / "mine").mkdir()
    (data / "mine" / "a.bin").write_bytes(b"1")
    (data / "link").symlink_to("notes.txt")
    (folds / "README").write_text("about these folds")
    summary = DataFolder(data).summary
    summary.write_text("an earlier run's")
    assert run_numbered_script("01_preprocess.py", "--input-dir", tmp_path / "input",
                               "--output-dir", out, "--no-progress").returncode == 0  # fmt: skip
    assert run_numbered_script("02_make_folds.py", "--output-dir", out).returncode == 0
    assert summary.read_text() != "an earlier run's"  # 01's own files: replaced
    assert (data / "notes.txt").read_text() == "mine" and (data / "mine" / "a.bin").exists()
    assert os.readlink(data / "link") == "notes.txt"
    assert (folds / "README").read_text() == "about these folds"
    assert temp_names(out) == []


def test_what_cannot_be_kept_is_refused_before_the_work(tmp_path, monkeypatch):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    (folder / "arrays").write_text("the stage's")

    def no_links(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)  # a file system without hard links
    worked = []
    cannot = pytest.raises(UserError, match=r"holds notes\.txt, which this stage does not write")
    with cannot, atomic_dir(folder, owns=DataFolder.WRITES):
        worked.append(True)
    assert not worked and everything(tmp_path) == ["data", "data/arrays", "data/notes.txt"]


def test_a_linked_data_or_folds_folder_is_followed(tmp_path):
    out = make_tiny_demo(tmp_path, users=40)
    disk = tmp_path / "big_disk"
    disk.mkdir()
    for name in ("data", "folds"):
        shutil.move(out / name, disk / name)
        (out / name).symlink_to(disk / name)
    assert run_numbered_script("01_preprocess.py", "--input-dir", tmp_path / "input",
                               "--output-dir", out, "--no-progress").returncode == 0  # fmt: skip
    assert run_numbered_script("02_make_folds.py", "--output-dir", out).returncode == 0
    for name in ("data", "folds"):  # the links stay; the new folders are where they point
        assert (out / name).is_symlink() and (out / name).resolve() == disk / name
    assert (disk / "data" / "fingerprint.json").exists() and (
        disk / "folds" / "folds.json"
    ).exists()
    assert temp_names(tmp_path) == []
    (out / "folds").unlink()  # a link into a folder that is not there: refused, named
    (out / "folds").symlink_to(tmp_path / "gone" / "folds")
    message = refused("02_make_folds.py", "--output-dir", out)
    assert f"{out / 'folds'} is a link to {tmp_path / 'gone' / 'folds'}, whose folder" in message
    assert not (tmp_path / "gone").exists()


# ---------------------------------------------------------------------------------------
# what a stopped stage leaves: removed by the next run, or by the stage itself


def test_what_a_killed_stage_left_is_removed_by_the_next_run(tmp_path):
    out = make_tiny_demo(tmp_path, users=40)
    pid = dead_pid()
    (out / f".data.tmp-{pid}" / "arrays").mkdir(parents=True)  # 01 killed while writing
    (out / f".folds_run.json.tmp-{pid}").write_text("half")  # 02 killed writing its record
    os.replace(out / "folds", out / f".folds.old-{pid}")  # 02 killed between its renames
    running = out / f".data.tmp-{os.getppid()}"  # a live process's: not this run's to remove
    running.mkdir()
    assert run_numbered_script("01_preprocess.py", "--input-dir", tmp_path / "input",
                               "--output-dir", out, "--no-progress").returncode == 0  # fmt: skip
    done = run_numbered_script("02_make_folds.py", "--output-dir", out)
    assert done.returncode == 0 and f".folds.old-{pid}, left by a stopped run" in done.stderr
    assert temp_names(out) == [running.name]


STOPPED = """
import sys, time
from pathlib import Path
from common import cli
from common.files import atomic_dir, atomic_file

def body():
    out = Path(sys.argv[1])
    with atomic_dir(out / "data") as folder, atomic_file(out / "runs.csv") as table:
        (folder / "half.bin").write_bytes(bytes(1000))
        table.write_text("half")
        print("writing", flush=True)
        time.sleep(60)

sys.exit(cli.guarded(body, "nothing was written", Path(sys.argv[1])))
"""


def signals_as_in_a_shell() -> None:
    """A child's signals as a terminal's shell leaves them: a runner that starts the suite
    in the background ignores SIGINT (and a test worker may block signals), and a child
    inherits both."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    ("signum", "status", "word"),
    [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")],
    ids=["SIGTERM", "Ctrl-C"],
)
def test_a_stopped_stage_says_so_in_one_line_and_leaves_no_temp(tmp_path, signum, status, word):
    out = tmp_path / "out"
    stage = subprocess.Popen(
        [sys.executable, "-c", STOPPED, str(out)], cwd=REPO, preexec_fn=signals_as_in_a_shell,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert stage.stdout.readline() == "writing\n", stage.communicate()
    stage.send_signal(signum)
    try:
        _, stderr = stage.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        stage.kill()
        raise AssertionError(f"no stop on {signum!r}: {stage.communicate()}") from None
    assert stage.returncode == status and stderr.strip() == f"{word}: nothing was written"
    assert everything(tmp_path) == []  # no temp file or folder, no empty output folder


# ---------------------------------------------------------------------------------------
# one writer per run and fold

HOLDER = """
import sys
from common.files import file_lock
from common.workspace import Workspace

folder = Workspace(sys.argv[1]).run("r").fold(0)
folder.path.mkdir(parents=True)
with file_lock(folder.path, holder=folder.lock):  # as common.runs.folders.fold_lock
    print("held", flush=True)
    sys.stdin.read()
"""


def test_one_process_writes_a_runs_fold_at_a_time(tmp_path, capsys):
    out = make_tiny_demo(tmp_path, users=40)
    folder = Workspace(out).run("r").fold(0)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        for script, flags in (("03_train.py", TINY), ("04_infer.py", ("--no-progress",))):
            message = refused(script, "--output-dir", out, "--run", "r", *flags)
            assert message.startswith(f"error: {folder.path} is in use by pid {holder.pid} (")
            assert " -c " in message and "wait for that one to end, or stop it" in message
        assert everything(folder.path) == [folder.LOCK]  # the holder's: untouched
    finally:
        holder.kill()  # SIGKILL: the kernel releases its lock, its record stays
        holder.wait()
    with fold_lock(folder):
        pass
    note = capsys.readouterr().err
    assert f"took over the lock of {folder.path} from pid {holder.pid} (" in note
    assert "which is no longer running" in note and not folder.lock.exists()


# ---------------------------------------------------------------------------------------
# the operating system's write errors


@pytest.fixture
def tmpfs(tmp_path):
    """mount(name, size, read_only=False): a small tmpfs at tmp_path/name (skipped where
    this process may not mount one); unmounted after the test."""
    mounted = []

    def mount(name: str, size: str, read_only: bool = False) -> Path:
        where = tmp_path / name
        where.mkdir()
        options = f"size={size}{',ro' if read_only else ''}"
        try:
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
        except FileNotFoundError:
            done = subprocess.CompletedProcess([], 1, "", "no mount command")
        if done.returncode != 0:
            pytest.skip(f"mounting a small tmpfs is not allowed here: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(tmp_path, tmpfs):
    disk = tmpfs("disk", "256k")
    message = refused("00_make_demo_input.py", "--users", 60, "--output-dir", disk / "in")
    assert message.startswith(f"error: cannot write {disk / 'in'}/") and message.endswith(
        "no space left on the device: free some there, or choose another --output-dir, "
        "and run the command again"
    )
    assert everything(disk) == []  # no questions.csv without a train.csv, no temp file
    # torch hides the ENOSPC (03's checkpoints): the full disk is found all the same
    with pytest.raises(WriteError, match=r"epoch_01\.pt: no space left on the device"):
        save_checkpoint(disk / "epoch_01.pt", {"model_state": {"w": torch.zeros(200_000)}})
    assert everything(disk) == []


def test_a_read_only_folder_is_refused_before_the_work(tmp_path, tmpfs):
    disk = tmpfs("disk", "16m")
    out = make_tiny_demo(tmp_path / "demo", users=40)
    shutil.copytree(out, disk / "out")
    model = Workspace(disk / "out").run("r").fold(0)
    model.path.mkdir(parents=True)
    model.checkpoint().write_bytes(b"not read: the folder is checked first")
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    read_only = "the file system is read-only: choose another --output-dir, or make it writable"
    message = refused("01_preprocess.py", "--input-dir", tmp_path / "demo" / "input",
                      "--output-dir", disk / "out", "--no-progress")  # fmt: skip
    assert message == f"error: cannot write {disk / 'out'}: {read_only}"
    # 04: before the checkpoint is read, the trees fitted or a fold streamed
    message = refused("04_infer.py", "--output-dir", disk / "out", "--run", "r")
    assert message == f"error: cannot write {model.path}: {read_only}"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through a folder's permissions")
def test_a_folder_without_permission_is_one_line(tmp_path):
    out = make_tiny_demo(tmp_path, users=40)
    out.chmod(0o500)
    try:
        message = refused("02_make_folds.py", "--output-dir", out)
    finally:
        out.chmod(0o700)
    assert message.startswith(f"error: cannot write {out}: permission denied: give this user")


def test_a_name_too_long_or_a_folder_that_vanished_is_one_line(tmp_path):
    message = refused("02_make_folds.py", "--output-dir", tmp_path / ("x" * 300))
    assert (
        message.endswith(
            "a name on the path is too long for the file system: choose a shorter --output-dir "
            "or --run NAME"
        )
        and str(tmp_path / ("x" * 300)) in message
    )
    long_name = tmp_path / ("y" * 250)  # fits, its temp name does not
    with pytest.raises(WriteError, match="a name on the path is too long"), atomic_file(long_name):
        pass
    folder = tmp_path / "runs"
    with pytest.raises(WriteError) as vanished, atomic_file(folder / "x.csv") as tmp:
        tmp.write_text("written")
        shutil.rmtree(folder)  # the folder removed while the stage runs
    assert str(vanished.value) == (
        f"cannot write {folder / 'x.csv'}: its folder vanished while the stage ran (moved or "
        "deleted?): put it back, or run the command again"
    )
    vanished = pytest.raises(WriteError, match=r"y\.pt: its folder vanished while the stage")
    with vanished, atomic_file(folder / "y.pt"):
        shutil.rmtree(folder)
        raise RuntimeError("unexpected pos 576 vs 534")  # torch.save's, without an errno
    assert everything(tmp_path) == []
