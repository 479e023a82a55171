"""Public knowledge-tracing benchmark: SAINT and SAINT+ on ASSISTments 2009 (AKT's
problem-level files and 5 user folds) and ASSISTments 2015 (DKVMN's files), run through
the project's own scripts 00 -> 05 as subprocesses, with a table written to
bench/results/kt.txt beside the published AUCs of bench/kt/published_kt_results.csv.

    python -m bench.kt.run            # full run: 2 datasets x 5 folds x SAINT, SAINT+
    python -m bench.kt.run --slice 60 --folds 0 --epochs 1 --d-model 16 --heads 2  # smoke
    python -m bench.kt.run --models saint-tags saint-interaction   # extensions (MODEL_FLAGS)
    python -m bench.kt.run --table-only   # rewrite kt.txt's table from finished folds

Per dataset: 00_convert_kt_dataset.py (--multi-skill-rows keep: the rows AKT trains and
scores on), optionally a slice of --slice students, 01_preprocess.py, 02_make_folds.py
(assist2009_pid: --strategy dataset, AKT's 5 disjoint user folds; assist2015: --strategy
unseen, 5 random folds of wholly new students, because DKVMN ships one train/test split;
--assist2015-split dkvmn uses that split as a single fold instead). Per fold and model:
03_train.py with the stated config, 04_infer.py --no-export (the fold's students streamed
through the API emulator), 05_evaluate.py --folds k (AUC, accuracy at 0.5 and the two
baselines). Every fold's numbers and commands go to <work-dir>/.../results/fold{k}.json;
a fold whose file exists is skipped (restartable) unless --force. The section (config,
table, published AUCs, protocol notes, one fold's commands) is printed at the end and
written to --results (by default kt.txt in the work folder: a partial run never rewrites
the committed bench/results/kt.txt unless named) after every fold and at the end (no file
for a --slice run unless --results names one).

The model is scored from the last epoch's checkpoint (--checkpoint last) with early stopping
off, trained on all of the fold's training students (03 --select-on fold, whose best.pt
is then never used: choosing an epoch on the fold's own students would select on the test
set). --checkpoint best scores best.pt chosen on an inner split of the training students
(03's default --select-on inner), which is honest too but trains on 10% fewer students.

Layout under --work-dir (default bench/out/kt/, git-ignored):
    <dataset>-<rows>-<split>[-slice<N>]/input/        00's output (the slice with --slice)
                                        prep/data, prep/folds   01 and 02
                                        <model>-<config hash>/  03-05 (data, folds linked)
                                            results/fold{k}.json, logs/, report/
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from bench import benchlib
from bench.benchlib import BENCH_RUN, bench_run, flags, link_data, relative, run, script
from bench.fold_run import FoldRun, train_and_stream
from bench.kt import report as kt_report
from bench.kt.plans import (
    BASELINES_ONLY,
    BENCH_DEFAULTS,
    BENCH_KNOBS,
    DEFAULT_MODELS,
    FAMILY_BASE,
    MODEL_FLAGS,
    MODEL_NAMES,
    MODELS,
    PLANS,
    Context,
    DatasetPlan,
    TrainSettings,
)
from common.cli import config_from_args
from common.data.dataset import Dataset
from common.data.fold_data import Fold
from common.data.past_features import past_features
from common.files import environment, file_lock, write_json, write_text
from common.inputs.kt_datasets import MULTI_SKILL_MODES, PRESETS
from common.metrics import score_metrics
from common.model.trees.blending import InnerPredictions, fold_blend_bundle
from common.model.trees.boosting import TREES, TreesConfig
from common.report.evaluate import EvaluateConfig
from common.report.scored_rows import baseline_columns, streamed_entries
from common.train.config import TrainConfig, add_train_flags
from common.workspace import ModelFolder, Workspace

SLICE_SEED = 0
PUBLISHED = Path(__file__).with_name("published_kt_results.csv")


# ---------------------------------------------------------------------------------------
# data preparation: 00 (and the slice), 01, 02


def slice_students(full_dir: Path, input_dir: Path, count: int) -> dict:
    """Copy a converted dataset keeping `count` students, drawn per shipped fold (user_map's
    fold, -1 for none) in proportion to its size, at least one per fold, so that every
    fold of --strategy dataset keeps students."""
    user_map = pd.read_csv(full_dir / "user_map.csv")
    rng = np.random.default_rng(SLICE_SEED)
    chosen = []
    for _, group in user_map.groupby("fold"):
        take = max(1, round(count * len(group) / len(user_map)))
        chosen.append(rng.choice(group["user_id"].to_numpy(), size=min(take, len(group))))
    keep = np.sort(np.concatenate(chosen))
    input_dir.mkdir(parents=True, exist_ok=True)
    train = pd.read_csv(full_dir / "train.csv", dtype=str, keep_default_na=False)
    train = train[train["user_id"].astype(np.int64).isin(keep)]
    train.to_csv(input_dir / "train.csv", index=False)  # original row_ids: still increasing
    for name in ("questions.csv", "lectures.csv"):
        shutil.copyfile(full_dir / name, input_dir / name)
    for name in ("user_folds.csv", "user_map.csv"):
        if (full_dir / name).exists():
            table = pd.read_csv(full_dir / name)
            table[table["user_id"].isin(keep)].to_csv(input_dir / name, index=False)
    record = {
        "students": len(keep),
        "of_students": len(user_map),
        "rows": len(train),
        "seed": SLICE_SEED,
        "per_fold": user_map[user_map["user_id"].isin(keep)]["fold"].value_counts().to_dict(),
    }
    write_json(input_dir / "slice.json", record)
    return record


def prepare_dataset(ctx: Context, plan: DatasetPlan) -> Workspace:
    """00 (+ slice), 01 and 02 into the dataset's directory; each step is skipped when its
    output exists (they are all written atomically). Returns the prep workspace."""
    args, root = ctx.args, ctx.dataset_dir(plan)
    if args.force:  # model directories stay: their folds are redone one by one
        for name in ("input_full", "input", "prep"):
            shutil.rmtree(root / name, ignore_errors=True)
    logs = root / "logs"
    full_dir = root / ("input_full" if args.slice_students else "input")
    input_dir, prep = root / "input", Workspace(root / "prep")
    if not (full_dir / "conversion.json").exists():
        source = args.source_root / PRESETS[plan.preset].folder
        rows = args.multi_skill_rows
        convert = flags(dataset=plan.preset, source_dir=source, multi_skill_rows=rows)
        convert = script("00_convert_kt_dataset.py", *convert, *flags(output_dir=full_dir))
        run(convert, logs / "00_convert.log", label="00 convert")
    if args.slice_students and not (input_dir / "slice.json").exists():
        record = slice_students(full_dir, input_dir, args.slice_students)
        print(f"  slice: {record['students']} of {record['of_students']} students", flush=True)
    where = flags(input_dir=input_dir, output_dir=prep.path)
    if not prep.data.path.exists():
        preprocess = script("01_preprocess.py", *where)
        run([*preprocess, "--no-progress"], logs / "01_preprocess.log", label="01 preprocess")
    if not prep.folds.manifest.exists():
        folds = [*where, *plan.fold_flags]
        run(script("02_make_folds.py", *folds), logs / "02_make_folds.log", label="02 make folds")
    return prep


def prepare_model_dir(ctx: Context, plan: DatasetPlan, model: str, prep: Workspace) -> Workspace:
    """The model's workspace, its data/ and folds/ linked to the shared prep's."""
    workspace = link_data(ctx.model_dir(plan, model), prep)
    settings = {"model": model, **asdict(ctx.settings)}
    write_json(workspace.path / "bench_config.json", settings)
    return workspace


# ---------------------------------------------------------------------------------------
# one fold of one model: 03, 04, 05


def fold_flags(ctx: Context, model: str) -> tuple[list[str], list[str]]:
    """The 03_train.py and 04_infer.py flags of every fold of `model`."""
    s = ctx.settings
    train = [*MODEL_FLAGS[model], *s.train_flags()]
    return train, flags(checkpoint=s.checkpoint_file(), device=s.train.device)


def evaluate_command(ctx: Context, plan: DatasetPlan, workspace: Workspace, k: int) -> list[str]:
    """05_evaluate.py scoring fold k alone (no bootstrap: the pooled run has it)."""
    where = flags(input_dir=ctx.dataset_dir(plan) / "input", output_dir=workspace.path)
    score = flags(run=BENCH_RUN, folds=k, bootstrap=0)
    return script("05_evaluate.py", *where, *score, "--no-progress")


def report_lock(workspace: Workspace):
    """Each 05 run rewrites the run's report/. Two KT benchmark jobs on one model (other
    folds) take turns at 05 and at reading its table back, so neither reads the other's
    (an exclusive flock on report.lock in the model's workspace, released when the block
    ends)."""
    return file_lock(workspace.path / "report.lock")


def run_baselines(ctx: Context, plan: DatasetPlan, workspace: Workspace, k: int) -> dict:
    """05's baselines on fold k's streamed question rows, in this process (no model)."""
    clock = time.perf_counter()
    data = Dataset.of(workspace)
    fold = Fold.of(workspace, k)
    entries = streamed_entries(data, fold)
    config, trees = EvaluateConfig(), TreesConfig()
    columns = baseline_columns(data, fold, entries, config.baselines)
    # the trees as 04 fits them on the fold's training rows (no inner split: no weight)
    bundle = fold_blend_bundle(InnerPredictions("no model", None), fold, data, None, trees)
    features = past_features(data.sequences, entries, bundle.skill, bundle.rates)
    columns[TREES] = bundle.trees.probability(features)
    labels = data.sequences.response[entries]
    scores = {}
    for name, values in columns.items():
        metrics = score_metrics(labels, values)
        scores[name] = {
            "auc": metrics["auc"],
            "accuracy": metrics["accuracy_at_half"],
            "rows": metrics["rows"],
        }
    return {
        "dataset": plan.preset,
        "split": plan.split,
        "model": BASELINES_ONLY,
        "fold": k,
        "scores": scores,
        "seconds": time.perf_counter() - clock,
        "trees_config": asdict(trees),
        "multi_skill_rows": ctx.args.multi_skill_rows,
        "slice_students": ctx.args.slice_students,
        "commands": [],
        "environment": environment(),
        "cpus": os.cpu_count(),
    }


def run_fold(ctx: Context, plan: DatasetPlan, model: str, workspace: Workspace, k: int) -> dict:
    """Train, stream and score fold k of `model` in its workspace, or load its result when
    it exists."""
    result_path = workspace.path / "results" / f"fold{k}.json"
    if result_path.exists() and not ctx.args.force:
        print(f"  skip: {relative(result_path)} exists", flush=True)
        return json.loads(result_path.read_text())
    if model == BASELINES_ONLY:
        result = run_baselines(ctx, plan, workspace, k)
    else:
        if ctx.args.force:
            result_path.unlink(missing_ok=True)
            shutil.rmtree(FoldRun(workspace, fold=k).folder.path, ignore_errors=True)
        result = train_and_score(ctx, plan, model, workspace, k)
    write_json(result_path, result)
    return result


def seed_primary(ctx: Context, plan: DatasetPlan, model: str, fold: FoldRun) -> None:
    """A model of FAMILY_BASE: its first architecture is the base model's run, so a fold
    the base has finished seeds it (03's files of the fold copied where the model has
    none yet; its 03 --resume keeps them and trains the other architectures)."""
    base = FAMILY_BASE.get(model)
    if base is None or fold.folder.path.exists():
        return
    source = FoldRun(Workspace(ctx.model_dir(plan, base)), fold=fold.fold).folder
    if not (source.path / ModelFolder.BEST).exists():
        return
    fold.folder.path.mkdir(parents=True)
    seeded = {source.history.name, source.config.name, source.inner_predictions.name}
    seeded.add(source.record("train").name)
    for path in source.path.iterdir():
        if path.is_file() and (path.suffix == ".pt" or path.name in seeded):
            shutil.copy2(path, fold.folder.path / path.name)
    print(f"  seeded from {relative(source.path)} ({base})", flush=True)


def train_and_score(
    ctx: Context, plan: DatasetPlan, model: str, workspace: Workspace, k: int
) -> dict:
    """03 and 04 on fold k, then 05 scoring it: the fold's result."""
    fold, logs = FoldRun(workspace, fold=k), workspace.path / "logs"
    seed_primary(ctx, plan, model, fold)
    train_flags, stream_flags = fold_flags(ctx, model)
    wall = train_and_stream(fold, train_flags, stream_flags, logs=logs, label=f"fold {k}")
    evaluate = evaluate_command(ctx, plan, workspace, k)
    with report_lock(workspace):
        log = logs / f"fold{k}_evaluate.log"
        wall["evaluate"] = run(evaluate, log, label=f"evaluate fold {k}")
        scores = kt_report.fold_metrics(workspace, k)
    commands = [fold.train_command(train_flags), fold.stream_command(stream_flags), evaluate]
    return fold_result(ctx, plan, model, fold, scores, wall, commands)


def fold_result(
    ctx: Context,
    plan: DatasetPlan,
    model: str,
    fold: FoldRun,
    scores: dict,
    wall: dict[str, float],
    commands: list[list[str]],
) -> dict:
    """What results/fold{k}.json keeps of a trained, streamed and scored fold."""
    history, stream = fold.history(), fold.stream_summary()
    run_record = json.loads(fold.folder.record("train").read_text())
    return {
        "dataset": plan.preset,
        "split": plan.split,
        "model": model,
        "fold": fold.fold,
        "scores": scores,
        "train_seconds": float(history["train_seconds"].sum()),
        "valid_seconds": float(history["valid_seconds"].sum()),
        "epochs": len(history),
        "interactions_per_s": float(history["interactions_per_s"].median()),
        "stream_rows_per_s": float(stream["rows_per_s"]),
        "stream_rows": int(stream["rows"]),
        "checkpoint": stream["checkpoint"],
        "wall_seconds": wall,
        "settings": asdict(ctx.settings),
        "multi_skill_rows": ctx.args.multi_skill_rows,
        "slice_students": ctx.args.slice_students,
        "commands": [shlex.join(c) for c in commands],
        "environment": run_record.get("environment", {}),
        "cpus": os.cpu_count(),
    }


def pooled_report(ctx: Context, plan: DatasetPlan, workspace: Workspace, folds: list[int]) -> None:
    """05 over every finished fold of the model (the pooled report.md)."""
    stamp = bench_run(workspace).report.path / "bench_pooled.json"
    wanted = {"folds": folds, "bootstrap": ctx.args.bootstrap}
    if stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return
    if len(folds) == 1 and ctx.args.bootstrap == 0:  # the fold's own 05 run wrote this report
        write_json(stamp, wanted)
        return
    scope = flags(folds=",".join(map(str, folds)), bootstrap=ctx.args.bootstrap, no_progress=True)
    input_dir = ctx.dataset_dir(plan) / "input"
    where = flags(input_dir=input_dir, output_dir=workspace.path, run=BENCH_RUN)
    with report_lock(workspace):
        log = workspace.path / "logs" / "evaluate_pooled.log"
        run(script("05_evaluate.py", *where, *scope), log, label="05 pooled")
        write_json(stamp, wanted)


# ---------------------------------------------------------------------------------------
# the table


def finished_by_plan(ctx: Context, plans: list[DatasetPlan]) -> dict:
    """{plan: {model's name in the table: its finished folds}}, models with none left out."""
    finished = {}
    for plan in plans:
        results = {
            MODEL_NAMES[m]: kt_report.finished_results(ctx.model_dir(plan, m)) for m in MODELS
        }
        finished[plan] = {name: r for name, r in results.items() if r}
    return finished


def render_section(ctx: Context, plans: list[DatasetPlan]) -> str:
    return kt_report.render_section(ctx, finished_by_plan(ctx, plans))


def write_results(ctx: Context, section: str) -> None:
    """The section, machine paths made relative, to --results (nothing without one)."""
    if ctx.args.results:
        write_text(ctx.args.results, relative(section))


# ---------------------------------------------------------------------------------------


TABLE_ONLY = (
    "run nothing: rewrite the section of --results from the folds already finished in "
    "--work-dir (every model of MODEL_FLAGS with results under this config)"
)


def ints(text: str) -> list[int]:
    return [int(k) for k in text.split(",")]


def parse_args(argv: list[str] | None = None):
    """(context, plans to run, plans in the table, models, folds or None for all)."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--datasets", nargs="+", choices=sorted(PLANS), default=sorted(PLANS))
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(DEFAULT_MODELS))
    p.add_argument("--folds", type=ints, help="comma list (default: every fold of the split)")
    smoke = "keep only N students per dataset (smoke runs)"
    p.add_argument("--slice", type=int, dest="slice_students", metavar="N", help=smoke)
    p.add_argument("--multi-skill-rows", choices=MULTI_SKILL_MODES, default="keep")
    p.add_argument("--assist2015-split", choices=sorted(PLANS["assist2015"]), default="unseen5")
    add_train_flags(p, shorthands=("--layers",), only=BENCH_KNOBS, defaults=BENCH_DEFAULTS)
    p.add_argument("--checkpoint", choices=("last", "best"), default="last")
    p.add_argument("--train-extra", default="", help="further 03_train.py flags, one string")
    p.add_argument("--bootstrap", type=int, default=200, help="resamples of the pooled 05 run")
    p.add_argument("--work-dir", type=Path, default=benchlib.WORK / "kt")
    p.add_argument("--published", type=Path, default=PUBLISHED)
    p.add_argument("--source-root", type=Path, default=benchlib.SHARED_DATA)
    kept = "<work-dir>/kt.txt, none for a --slice run; the committed section: bench/results/kt.txt"
    p.add_argument("--results", type=Path, help=f"where the section is written (default {kept})")
    p.add_argument("--force", action="store_true", help="redo finished steps and folds")
    p.add_argument("--table-only", action="store_true", help=TABLE_ONLY)
    args = p.parse_args(argv)
    if args.slice_students is not None and args.slice_students < 1:
        p.error(f"--slice: expected a positive number of students, got {args.slice_students}")
    args.work_dir, args.source_root = args.work_dir.resolve(), args.source_root.resolve()
    if args.results is None and not args.slice_students:  # never a committed file unasked
        args.results = args.work_dir / "kt.txt"
    extra = tuple(shlex.split(args.train_extra))
    settings = TrainSettings(config_from_args(TrainConfig, args), args.checkpoint, extra)
    command = [sys.executable, "-m", "bench.kt.run", *(sys.argv[1:] if argv is None else argv)]
    splits = {"assist2009_pid": "akt5", "assist2015": args.assist2015_split}
    plans = [PLANS[name][splits[name]] for name in args.datasets]
    table_plans = [PLANS[name][split] for name, split in splits.items()]
    return Context(settings, args, command), plans, table_plans, args.models, args.folds


def main(argv: list[str] | None = None) -> int:
    ctx, plans, table_plans, models, folds = parse_args(argv)
    for plan in [] if ctx.args.table_only else plans:
        print(f"{plan.preset} ({plan.split}): preparing {relative(ctx.dataset_dir(plan))}")
        prep = prepare_dataset(ctx, plan)
        wanted = [k for k in (folds or range(plan.n_folds)) if k < plan.n_folds]
        if folds and len(wanted) < len(folds):
            print(f"  {plan.split} has {plan.n_folds} fold(s): running {wanted}", flush=True)
        spaces = {m: prepare_model_dir(ctx, plan, m, prep) for m in models}
        for k in wanted:
            for model in models:
                print(f"{plan.preset} fold {k} {model} ({spaces[model].path.name})", flush=True)
                run_fold(ctx, plan, model, spaces[model], k)
                write_results(ctx, render_section(ctx, table_plans))
        for model in models:
            finished = [r["fold"] for r in kt_report.finished_results(spaces[model].path)]
            if finished and model != BASELINES_ONLY:
                pooled_report(ctx, plan, spaces[model], finished)
    section = relative(render_section(ctx, table_plans))
    print(section, flush=True)
    write_results(ctx, section)
    if ctx.args.results:
        print(f"wrote {relative(ctx.args.results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
