"""The output folder's names (common/workspace.py) are an interface: README, the Kaggle
notebook cell and users' scripts name these paths, so a rename must fail here first. (That
no other module spells them: tests/test_workspace_flow.py.)"""

from __future__ import annotations

from pathlib import Path

from common.workspace import (
    Bundle,
    DataFolder,
    FoldsFolder,
    KaggleFolder,
    ModelFolder,
    ReportFolder,
    Workspace,
    record_file,
)


def test_the_documented_paths():
    out = Workspace(Path("output"))
    assert out.data.path == Path("output/data")
    assert out.data.arrays == Path("output/data/arrays")
    assert out.data.array("user_id") == Path("output/data/arrays/user_id.bin")
    assert out.data.arrays_manifest == Path("output/data/arrays/manifest.json")
    assert out.data.questions == Path("output/data/questions.parquet")
    assert out.data.lectures == Path("output/data/lectures.parquet")
    assert out.data.record("preprocess") == Path("output/data/preprocess_run.json")
    assert out.folds.path == Path("output/folds")
    assert out.folds.fold(3) == Path("output/folds/fold3.npz")
    assert out.folds.manifest == Path("output/folds/folds.json")
    assert out.folds.row_folds == Path("output/folds/row_folds.csv")
    assert out.runs == Path("output/runs")
    assert out.runs_table == Path("output/runs.csv")
    run = out.run("base")
    assert run.path == Path("output/runs/base")
    assert run.name == "base" and run.workspace is out
    assert run.fold(3).path == Path("output/runs/base/fold3")
    assert run.fold(3).name == "fold3" == ModelFolder.name_of(3)
    assert run.full.path == Path("output/runs/base/full")
    assert run.full.name == "full" == ModelFolder.name_of(3, full=True)
    assert run.model(2).path == run.fold(2).path
    assert run.model(2, full=True).path == run.full.path
    assert run.report.path == Path("output/runs/base/report")
    assert run.report_file == Path("output/runs/base/report.md")
    assert run.oof == Path("output/runs/base/oof.parquet")
    assert run.report.table("metrics", "csv") == Path("output/runs/base/report/metrics.csv")
    assert run.report.figure("roc") == Path("output/runs/base/report/roc.png")
    assert ReportFolder.link("roc") == "report/roc.png"
    fold = run.fold(0)
    assert fold.checkpoint() == Path("output/runs/base/fold0/best.pt")
    assert fold.epoch_checkpoint(3) == Path("output/runs/base/fold0/epoch_03.pt")
    assert fold.stream_predictions == Path("output/runs/base/fold0/stream_predictions.parquet")
    assert fold.validation_predictions == Path("output/runs/base/fold0/validation_predictions.csv")
    assert fold.config == Path("output/runs/base/fold0/config.json")
    assert fold.history == Path("output/runs/base/fold0/history.csv")
    assert fold.stream_summary == Path("output/runs/base/fold0/stream_summary.json")
    assert fold.stream_summary.name == "stream_summary.json"
    assert fold.record("train") == Path("output/runs/base/fold0/train_run.json")
    assert fold.file(ModelFolder.TREES) == fold.trees
    assert (fold.trees.name, fold.tree_inputs.name, fold.blend.name) == ModelFolder.BLEND_FILES
    kaggle = run.kaggle
    assert kaggle.dataset == Path("output/runs/base/kaggle/dataset")
    assert kaggle.kernel == Path("output/runs/base/kaggle/kernel")
    bundle = Bundle(Path("bundle"))
    assert bundle.state == Path("bundle/state")
    assert bundle.snapshot == Path("bundle/state/snapshot.npz")
    assert bundle.parts == Path("bundle/state/parts.npy")
    assert bundle.model("fold0").checkpoint() == Path("bundle/fold0/best.pt")
    assert record_file("x", "evaluate") == Path("x/evaluate_run.json")


def test_the_folder_objects_wrap_any_path():
    """A stage writing a temp folder names its files as in the real one."""
    assert DataFolder("tmp").questions.name == Workspace("o").data.questions.name
    assert FoldsFolder("tmp").fold(1).name == Workspace("o").folds.fold(1).name
    assert (
        ModelFolder("tmp").stream_summary.name
        == Workspace("o").run("r").fold(0).stream_summary.name
    )
    assert KaggleFolder("tmp").dataset == Path("tmp/dataset")


def test_folds_holding_a_file_are_numbered_fold_folders_only(tmp_path):
    run = Workspace(tmp_path).run("base")
    for folder in ("fold0", "fold10", "fold2x", "folds", "fold3"):
        (run.path / folder).mkdir(parents=True)
    for folder in ("fold0", "fold10", "fold2x", "folds"):
        (run.path / folder / "best.pt").write_bytes(b"")
    assert run.folds_holding("best.pt") == [0, 10]  # fold3 has none


def test_run_names_are_the_run_folders(tmp_path):
    out = Workspace(tmp_path)
    assert out.run_names() == []
    for name in ("b", "a"):
        out.run(name).path.mkdir(parents=True)
    out.runs_table.write_text("")
    assert out.run_names() == ["a", "b"]
    assert out.run("a").exists() and not out.run("c").exists()
