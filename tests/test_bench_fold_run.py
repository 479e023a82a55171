"""bench/fold_run.py, the benchmarks' one way to train and stream a fold, and what
bench_defaults reads back from the files 03 writes (tests/test_bench_kt.py runs it end to
end)."""

from __future__ import annotations

from pathlib import Path

from bench.bench_defaults import schedule_text
from bench.fold_run import FoldRun
from common.workspace import Workspace
from tests.helpers import REPO


def test_commands_point_03_and_04_at_the_fold():
    fold = FoldRun(Workspace(Path("out")), "variant", 2)
    assert fold.folder.path == Path("out/runs/variant/fold2")
    where = ["--output-dir", "out", "--run", "variant", "--fold", "2"]
    train = fold.train_command(["--epochs", 3])
    assert train[1:] == [str(REPO / "03_train.py"), *where, "--epochs", "3", "--resume",
                         "--no-progress"]  # fmt: skip
    stream = fold.stream_command(["--checkpoint", "best.pt"], code=Path("/old"))
    assert stream[1:] == ["/old/04_infer.py", *where, "--checkpoint", "best.pt",
                          "--no-export", "--no-progress"]  # fmt: skip


def test_the_layout_before_runs_has_no_run_flag():
    fold = FoldRun(Workspace(Path("out")), None)
    assert fold.folder.path == Path("out/fold0")
    assert fold.where() == ["--output-dir", "out", "--fold", "0"]


def test_resumes_are_kept_in_the_fold_folder(tmp_path: Path):
    fold = FoldRun(Workspace(tmp_path))
    assert fold.resumed_after() == [] and fold.trained_epochs() == 0
    fold.folder.path.mkdir(parents=True)
    fold.note_resumed_after(6)
    fold.note_resumed_after(8)
    assert FoldRun(Workspace(tmp_path)).resumed_after() == [6, 8]


def test_schedule_reads_as_the_recorded_defaults_table():
    """The two rows of bench/results/defaults.txt, from what best.pt records."""
    recipe = schedule_text(
        {"schedule": "noam", "lr": 2e-3, "warmup": 100, "epochs": 5},
        {"warmup": 100, "total_steps": 595},
    )
    assert recipe == "noam, lr 0.002 after a warm-up of 100 of 595 steps (119 per epoch)"
    automatic = schedule_text(
        {"schedule": "noam", "lr": 1e-3, "warmup": 0, "epochs": 10},
        {"warmup": 63, "total_steps": 630},
    )
    assert automatic == (
        "noam, lr 0.001 after a warm-up of 63 (automatic: a tenth of the run, at most 4,000) "
        "of 630 steps (63 per epoch)"
    )
    table = (REPO / "bench" / "results" / "defaults.txt").read_text()
    assert f"| {recipe} |" in table and f"| {automatic} |" in table
