"""Runs (issue 18): a folder per run, the refusal of a clashing fold folder, the table of
runs, every fold in one resumable command, configs in files (JSON and YAML, round trip),
and --help showing every default."""

from __future__ import annotations

import argparse
import importlib.util
import json
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from common import cli
from common.errors import UserError
from common.runs.folders import RunClashError, claim_fold_dir, identity, run_name
from common.runs.table import append_run_row, read_runs, runs_text, sorted_runs
from common.train.config import TrainConfig
from common.workspace import ModelFolder, Workspace
from tests.helpers import REPO, make_tiny_demo, run_numbered_script, train_config

SCRIPTS = (
    "00_make_demo_input.py",
    "00_convert_kt_dataset.py",
    "01_preprocess.py",
    "02_make_folds.py",
    "03_train.py",
)
SCRIPTS += ("04_infer.py", "05_evaluate.py")
TINY = ("--d-model", 16, "--heads", 2, "--layers", 1, "--window", 20, "--batch-size", 16)
TINY += ("--warmup", 5, "--no-progress", "--device", "cpu")


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), REPO / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parsed(argv: list[str]) -> TrainConfig:
    config, _ = load_script("03_train.py").parse_args(argv)
    return config


# ---------------------------------------------------------------------------------------
# configs in files


def test_a_written_config_reads_back_the_same(tmp_path):
    """config.json as 03 writes it (fields, plus a "recorded" section), in JSON and
    YAML: --config gives back the very config, nested model fields and tuples included."""
    import yaml

    config = train_config(
        d_model=48, heads=4, layers=3, window=40, lr=3e-3, schedule="cosine", tags=True,
        question_embedding="rasch", decoder_features=("elapsed", "answer"), select_on="fold",
        teacher="t.pt", fold=2, epochs=7, progress=False, compile=True,
    )  # fmt: skip
    written = asdict(config) | {"recorded": {"run": "x", "resolved": {"batch_size": 64}}}
    (tmp_path / "config.json").write_text(json.dumps(written))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(json.loads(json.dumps(written))))
    for name in ("config.json", "config.yaml"):
        assert parsed(["--config", str(tmp_path / name)]) == config, name
    # as a person writes YAML: PyYAML reads 3e-3 (no dot) as a string; it is the float
    (tmp_path / "short.yaml").write_text("lr: 3e-3\namp: off\nmodel:\n  d_model: 48\n")
    short = parsed(["--config", str(tmp_path / "short.yaml")])
    assert short.lr == 3e-3 and short.amp == "off" and short.model.d_model == 48
    # fields the data fills (the question count) are accepted and left to the data
    filled = written | {"model": written["model"] | {"n_questions": 13523}}
    (tmp_path / "filled.json").write_text(json.dumps(filled))
    assert parsed(["--config", str(tmp_path / "filled.json")]) == config
    # flags given beside the file win over it; the rest stays the file's
    changed = parsed(["--config", str(tmp_path / "config.json"), "--lr", "1e-4", "--d-model", "8"])
    assert changed == replace(config, lr=1e-4, model=replace(config.model, d_model=8))
    # a switch the file turns on, a flag turns off again (and the other way round)
    switched = parsed(["--config", str(tmp_path / "config.json"), "--no-compile", "--progress"])
    assert switched.compile is False and switched.progress is True
    assert parsed(["--config", str(tmp_path / "config.json")]).progress is False


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"lr": 0.1, "learning_rate": 1}, "unknown key learning_rate"),
        ({"model": {"d_model": 8, "depth": 2}}, "unknown key model.depth"),
        ({"lr": "fast"}, "lr: 'fast', but the field takes a float"),
        ({"epochs": 2.5}, "epochs: 2.5, but the field takes a int"),
        ({"tags": "yes"}, "tags: 'yes', but the field takes a bool"),
        ({"model": {"attention": "dense"}}, "model.attention: 'dense' is not one of mha, mla"),
        ({"model": 3}, "model = 3: model is not one value but the nested config ModelConfig"),
        ([1, 2], "holds a mapping"),
    ],
)
def test_a_bad_config_file_is_refused_naming_file_and_key(tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(SystemExit) as stopped:
        parsed(["--config", str(path)])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert str(path) in error and message in error, error


def test_every_flag_of_every_script_shows_its_default(monkeypatch):
    """--help is the reference: each option's help ends with its default (or says what
    the default does)."""
    for name in SCRIPTS:
        module = load_script(name)
        captured = {}

        def keep(self, args=None, namespace=None, _captured=captured):
            _captured["parser"] = self
            raise SystemExit(0)

        monkeypatch.setattr(argparse.ArgumentParser, "parse_args", keep)
        with pytest.raises(SystemExit):
            module.main([])
        monkeypatch.undo()
        parser = captured["parser"]
        for action in parser._actions:
            if action.dest == "help" or action.help == argparse.SUPPRESS:
                continue  # a switch's hidden opposite (undoes a config file's value)
            assert "default" in (action.help or ""), f"{name} {action.option_strings}"


def test_fold_lists():
    assert cli.fold_spec("3") == (3,)
    assert cli.fold_spec("0-2,4") == (0, 1, 2, 4)
    assert cli.fold_spec("all") == "all"
    for bad in ("x", "1,1", "-1", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.fold_spec(bad)
    assert cli.chosen_folds("all", 3) == [0, 1, 2]
    assert cli.chosen_folds(1, 3) == [1]  # a config file's fold
    with pytest.raises(UserError, match="--fold 5: folds/ holds folds 0-4"):
        cli.chosen_folds((0, 5), 5)


# ---------------------------------------------------------------------------------------
# run folders and the table, without training


def test_the_default_run_name_follows_the_config_not_how_far_it_runs():
    config = TrainConfig()
    assert run_name(config).startswith("saint+-d256-")
    longer = replace(config, epochs=40, fold=3, resume=True, device="cpu", patience=9, threads=1)
    assert run_name(longer) == run_name(config)  # how long and where: the same run
    assert run_name(replace(config, lr=2e-3)) != run_name(config)
    assert run_name(replace(config, model=replace(config.model, window=50))) != run_name(config)


def write_fold(folder: ModelFolder, config: TrainConfig) -> None:
    folder.path.mkdir(parents=True)
    folder.epoch_checkpoint(1).write_bytes(b"weights")
    record = asdict(config) | {"recorded": {"run": folder.path.parent.name}}
    folder.config.write_text(json.dumps(record))


def test_a_fold_folder_is_claimed_only_by_its_own_config(tmp_path):
    config = train_config(d_model=16, heads=2, layers=1, window=20)
    folder = Workspace(tmp_path).run("a").fold(0)
    assert not claim_fold_dir(folder, config, overwrite=False)  # none yet
    write_fold(folder, config)
    with pytest.raises(RunClashError, match="already holds this config's run"):
        claim_fold_dir(folder, config, overwrite=False)
    assert not claim_fold_dir(folder, replace(config, resume=True, epochs=9), overwrite=False)
    other = replace(config, lr=5e-4, resume=True)
    with pytest.raises(RunClashError, match=r"another config \(recorded vs now: lr: 0\.001 vs"):
        claim_fold_dir(folder, other, overwrite=False)
    assert folder.epoch_checkpoint(1).read_bytes() == b"weights"  # refused: nothing touched
    assert claim_fold_dir(folder, other, overwrite=True) and not any(folder.path.iterdir())
    folder.file("notes.txt").write_text("?")
    with pytest.raises(RunClashError, match="records no config"):
        claim_fold_dir(folder, replace(config, resume=True), overwrite=False)


BINARY = b"\x8f\x00" * 40
RESUME_REFUSALS = [  # (what is done to a fold folder holding epoch 1, the refusal's words)
    ("history.csv not text", lambda f: f.history.write_bytes(BINARY), "history.csv is damaged"),
    ("history.csv another", lambda f: f.history.write_text("a,b\n"), "first line: 'a,b', not"),
    ("config.json cut short", lambda f: f.config.write_text('{"lr": '), "(JSONDecodeError: "),
    ("config.json not UTF-8", lambda f: f.config.write_bytes(b"\xff{}"), "(UnicodeDecodeError"),
    ("config.json a list", lambda f: f.config.write_text("[]"), "not a JSON object"),
    (
        "epoch checkpoints removed",
        lambda f: f.epoch_checkpoint(1).unlink(),
        "holds best.pt and history.csv but no epoch_NN.pt to resume from: --resume would "
        "train again from epoch 1 and replace them; --overwrite starts the fold again",
    ),
]


@pytest.mark.parametrize(
    ("change", "words"), [c[1:] for c in RESUME_REFUSALS], ids=[c[0] for c in RESUME_REFUSALS]
)
def test_a_resume_reads_its_files_checked_and_never_starts_over_unasked(tmp_path, change, words):
    config = replace(train_config(d_model=16, heads=2, layers=1, window=20), resume=True)
    folder = Workspace(tmp_path).run("a").fold(0)
    write_fold(folder, config)
    folder.checkpoint().write_bytes(b"the best epoch")
    folder.history.write_text("epoch,train_loss\n1,0.5\n")
    assert not claim_fold_dir(folder, config, overwrite=False)  # whole: resumed
    change(folder)
    before = sorted((p.name, p.read_bytes()) for p in folder.path.iterdir())
    with pytest.raises(RunClashError) as refused:
        claim_fold_dir(folder, config, overwrite=False)
    assert words in str(refused.value) and str(folder.path) in str(refused.value)
    assert sorted((p.name, p.read_bytes()) for p in folder.path.iterdir()) == before
    assert claim_fold_dir(folder, config, overwrite=True)  # --overwrite: emptied


def test_runs_table_rows_sort_best_streamed_first(tmp_path):
    rows = [
        {"run": "a", "stage": "train", "folds": "0", "tf_auc": 0.70},
        {"run": "a", "stage": "evaluate", "folds": "0,1", "stream_auc": 0.71},
        {"run": "NA", "stage": "evaluate", "folds": "0,1", "stream_auc": 0.74},
        {"run": "NA", "stage": "stream", "folds": "1", "stream_auc": 0.72},
    ]
    workspace = Workspace(tmp_path)
    for row in rows:
        append_run_row(workspace, row)
    table = read_runs(workspace)  # a run may be named NA: read as written
    assert table["run"].tolist() == ["a", "a", "NA", "NA"]  # appended in order
    assert table["finished"].notna().all()
    ordered = sorted_runs(workspace)
    assert list(zip(ordered["run"], ordered["stage"], strict=True)) == [
        ("NA", "evaluate"),
        ("NA", "stream"),
        ("a", "evaluate"),
        ("a", "train"),  # no streamed AUC: last
    ]
    assert runs_text(workspace).splitlines()[1].split()[:3] == ["NA", "evaluate", "0,1"]
    with pytest.raises(ValueError, match=r"not runs\.csv columns"):
        append_run_row(workspace, {"run": "c", "auc": 0.9})
    assert len(read_runs(workspace)) == 4  # nothing written


def append_rows(output_dir: Path, run: str, count: int) -> None:
    for i in range(count):
        append_run_row(Workspace(output_dir), {"run": run, "stage": "train", "folds": str(i)})


def test_runs_appending_side_by_side_lose_no_row(tmp_path):
    """Stages of two runs finishing together (bench.kt.run runs folds side by side): each
    append reads, adds and replaces the file under the output folder's lock."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    jobs = [context.Process(target=append_rows, args=(tmp_path, run, 40)) for run in "ab"]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join()
        assert job.exitcode == 0
    table = read_runs(Workspace(tmp_path))
    assert table.groupby("run").size().to_dict() == {"a": 40, "b": 40}


# ---------------------------------------------------------------------------------------
# two experiments end to end (03, 04, 05 as a user runs them)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return make_tiny_demo(tmp_path_factory.mktemp("runs"), users=40)


def run(script: str, *args: object):
    done = run_numbered_script(script, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.slow
def test_a_second_experiment_leaves_the_first_intact(demo):
    out, workspace = demo, Workspace(demo)
    first = ("--output-dir", out, *TINY, "--epochs", 1)
    run("03_train.py", *first, "--fold", "0,1")
    runs = sorted(p.name for p in workspace.runs.iterdir())
    assert len(runs) == 1 and runs[0].startswith("saint+-d16-")  # named from the config
    a = workspace.run(runs[0])
    kept = {k: folder_bytes(a.fold(k).path) for k in (0, 1)}

    # the same command again: refused, and nothing is written
    again = run_numbered_script("03_train.py", *first, "--fold", "0")
    assert again.returncode == 2 and "--resume continues it" in again.stderr
    # into the first run's folder with another config: refused by name
    clash = run_numbered_script("03_train.py", *first, "--run", runs[0], "--lr", "3e-3")
    assert clash.returncode == 2 and "holds a run of another config" in clash.stderr
    assert "lr: 0.001 vs 0.003" in clash.stderr
    # another config without a name: a run of its own
    run("03_train.py", *first, "--lr", "3e-3", "--fold", "0")
    assert len(list(workspace.runs.iterdir())) == 2
    assert {k: folder_bytes(a.fold(k).path) for k in (0, 1)} == kept

    # every fold in one command, resumable fold by fold: folds 0 and 1 are finished
    # (kept byte for byte), fold 2 trains
    run("03_train.py", *first, "--fold", "0-2", "--resume")
    assert {k: folder_bytes(a.fold(k).path) for k in (0, 1)} == kept
    assert a.fold(2).checkpoint().exists()

    # config.json reproduces the run: the same config, so the same run name
    written = json.loads(a.fold(0).config.read_text())
    fed_back = parsed(["--config", str(a.fold(0).config)])
    assert run_name(fed_back) == runs[0]
    assert identity(asdict(fed_back)) == identity(
        {k: v for k, v in written.items() if k != "recorded"}
    )

    # 04 over two folds, then again: the second keeps both folds' streams
    run("04_infer.py", "--output-dir", out, "--run", runs[0], "--fold", "0,1", "--no-export")
    streams = {k: folder_bytes(a.fold(k).path) for k in (0, 1)}
    kept_run = run("04_infer.py", "--output-dir", out, "--run", runs[0], "--fold", "0,1")
    assert kept_run.stdout.count("streamed already with this checkpoint") == 2
    assert {k: folder_bytes(a.fold(k).path) for k in (0, 1)} == streams
    oof = pd.read_parquet(a.oof)
    assert sorted(set(oof["fold"])) == [0, 1] and oof["row_id"].is_unique
    # a fold whose checkpoint changed since it streamed is streamed again
    summary_path = a.fold(1).stream_summary
    summary = json.loads(summary_path.read_text())
    summary_path.write_text(json.dumps(summary | {"checkpoint_digest": "another model"}))
    again = run("04_infer.py", "--output-dir", out, "--run", runs[0], "--fold", "0,1")
    assert again.stdout.count("streamed already with this checkpoint") == 1
    assert json.loads(summary_path.read_text())["checkpoint_digest"] == summary["checkpoint_digest"]

    # the table: 4 trained folds (3 of run a, 1 of run b: the resumed, finished folds
    # add none), 3 streams (folds 0 and 1, fold 1 again), then a report; 05 --runs
    # prints run a's report first
    run("05_evaluate.py", "--output-dir", out, "--run", runs[0], "--bootstrap", 0,
        "--no-progress")  # fmt: skip
    table = read_runs(workspace)
    counts = table.groupby(["run", "stage"]).size().to_dict()
    b = next(name for name in table["run"] if name != runs[0])
    assert counts == {(runs[0], "train"): 3, (runs[0], "stream"): 3, (runs[0], "evaluate"): 1,
                      (b, "train"): 1}  # fmt: skip
    trained = table[(table["run"] == runs[0]) & (table["stage"] == "train")]
    assert (
        trained["lr"].tolist() == [0.001] * 3
        and (table.loc[table["run"] == b, "lr"] == 0.003).all()
    )
    assert trained["commit"].notna().all() and (trained["best_epoch"].astype(int) == 1).all()
    report = table[table["stage"] == "evaluate"].iloc[0]
    summary = json.loads(a.report.summary.read_text())
    # what the run submits (04 streamed the blend), its fold spread, and the model alone
    assert summary["submitted"] == "blend: model + trees"
    assert report["stream_auc"] == pytest.approx(summary["blend_auc"], abs=1e-6)
    assert report["model_auc"] == pytest.approx(summary["auc"], abs=1e-6)
    fold_aucs = [json.loads(a.fold(k).stream_summary.read_text())["auc"] for k in (0, 1)]
    assert report["auc_fold_mean"] == pytest.approx(np.mean(fold_aucs), abs=1e-6)
    assert report["auc_fold_std"] == pytest.approx(np.std(fold_aucs, ddof=1), abs=1e-6)
    listed = run("05_evaluate.py", "--output-dir", out, "--runs").stdout.splitlines()
    shown = [line.split()[:2] for line in listed[1:]]
    assert [runs[0], "evaluate"] in shown  # with the streams, best streamed AUC first
    order = sorted_runs(workspace)["stream_auc"].dropna().to_numpy()
    assert len(order) == 4 and (np.diff(order) <= 0).all()
    text = a.report_file.read_text()
    assert text.startswith(f"# Evaluation report: run {runs[0]}")
    assert text.index("## Headline") < text.index("## Run")  # the answer first
    assert "Training command (every fold): `python " in text  # in-process: pytest's argv
