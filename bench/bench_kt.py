"""Public knowledge-tracing benchmark: SAINT and SAINT+ on ASSISTments 2009 (AKT's
problem-level files and 5 user folds) and ASSISTments 2015 (DKVMN's files), run through
the project's own scripts 00 -> 05 as subprocesses, with a table written into
BENCHMARKS.md beside the published AUCs of bench/published_kt_results.csv.

    python bench/bench_kt.py            # full run: 2 datasets x 5 folds x SAINT, SAINT+
    python bench/bench_kt.py --slice 60 --folds 0 --epochs 1 --d-model 16 --heads 2  # smoke
    python bench/bench_kt.py --models saint-tags saint-interaction   # extensions (MODEL_FLAGS)
    python bench/bench_kt.py --table-only   # rewrite the table from finished folds only

Per dataset: 00_convert_kt_dataset.py (--multi-skill-rows keep: the rows AKT trains and
scores on), optionally a slice of --slice students, 01_preprocess.py, 02_make_folds.py
(assist2009_pid: --strategy dataset, AKT's 5 disjoint user folds; assist2015: --strategy
unseen, 5 random folds of wholly new students, because DKVMN ships one train/test split;
--assist2015-split dkvmn uses that split as a single fold instead). Per fold and model:
03_train.py with the stated config, 04_infer.py --no-export (the fold's students streamed
through the API emulator), 05_evaluate.py --folds k (AUC, accuracy at 0.5 and the two
baselines). Every fold's numbers and commands go to <work-dir>/.../results/fold{k}.json;
a fold whose file exists is skipped (restartable) unless --force.

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
import csv
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere

from common.files import write_json, write_marked_section  # noqa: E402
from common.kt_datasets import MULTI_SKILL_MODES, PRESETS  # noqa: E402

# 03_train.py flags of each model name: the papers' SAINT and SAINT+, and extensions:
# "-tags" adds the mean embedding of the question's skills to the encoder (--tags);
# "-interaction" also embeds each answered question per (question, response) pair, and its
# skills per (skill, response) pair, in the decoder (--decoder-features ... question);
# "-rasch-encoder" has AKT's Rasch form of the question: no vector per question, only a
# scalar difficulty that scales a variation of the skills' mean embedding; "-rasch" has it
# in the decoder too, for the (skill, response) pairs of the answered questions
MODEL_FLAGS = {
    "saint": ("--model", "saint"),
    "saint+": ("--model", "saint+"),
    "saint-tags": ("--model", "saint", "--tags"),
    "saint+-tags": ("--model", "saint+", "--tags"),
    "saint-interaction": ("--model", "saint", "--tags", "--decoder-features", "question"),
    "saint-rasch-encoder": ("--model", "saint", "--tags", "--question-embedding", "rasch"),
    "saint-rasch": (
        "--model", "saint", "--tags", "--question-embedding", "rasch",
        "--decoder-features", "question",
    ),
}  # fmt: skip
MODELS = tuple(MODEL_FLAGS)
DEFAULT_MODELS = ("saint", "saint+")
MODEL_NAMES = {
    "saint": "SAINT",
    "saint+": "SAINT+",
    "saint-tags": "SAINT + skill tags",
    "saint+-tags": "SAINT+ + skill tags",
    "saint-interaction": "SAINT + skill tags + interaction decoder",
    "saint-rasch-encoder": "SAINT + Rasch skill embeddings (encoder)",
    "saint-rasch": "SAINT + Rasch skill embeddings (encoder and decoder)",
}
MARKER = "kt-benchmark"
MARK_START = f"<!-- {MARKER}:start -->"
MARK_END = f"<!-- {MARKER}:end -->"
BASELINES = ("question rate", "student + question")  # scorers of 05_evaluate.py
SLICE_SEED = 0


@dataclass(frozen=True)
class DatasetPlan:
    """How one dataset is converted and split."""

    preset: str  # a PRESETS name of common/kt_datasets.py
    split: str  # short name of the split, part of the work directory's name
    fold_flags: tuple[str, ...]  # 02_make_folds.py flags
    n_folds: int
    note: str


PLANS: dict[str, dict[str, DatasetPlan]] = {
    "assist2009_pid": {
        "akt5": DatasetPlan(
            "assist2009_pid",
            "akt5",
            ("--strategy", "dataset", "--n-folds", "5"),
            5,
            "AKT's 5 disjoint user folds (user_folds.csv from 00): the same test students "
            "as AKT's assist2009_pid_test{1..5}.csv",
        ),
    },
    "assist2015": {
        "unseen5": DatasetPlan(
            "assist2015",
            "unseen5",
            ("--strategy", "unseen", "--n-folds", "5", "--seed", "0"),
            5,
            "5 random folds of wholly new students (seed 0) over DKVMN's train+test "
            "students; DKVMN itself ships a single train/test split",
        ),
        "dkvmn": DatasetPlan(
            "assist2015",
            "dkvmn",
            ("--strategy", "dataset", "--n-folds", "1"),
            1,
            "DKVMN's single split: fold 0 = the 5,905 students of assist2015_test.csv",
        ),
    },
}


@dataclass
class TrainSettings:
    """The 03_train.py config of every fold; part of the model directory's name (hash)."""

    epochs: int = 10
    d_model: int = 128
    layers: int = 2  # per side: 2 encoder + 2 decoder blocks
    heads: int = 8
    window: int = 100
    batch_size: int = 64
    lr: float = 1e-3
    # cosine with a short warm-up: 03's Noam default (4,000 warm-up steps) would never
    # end warm-up here (79 steps per epoch on an assist2009_pid fold, about 270 on
    # assist2015, at batch 64)
    schedule: str = "cosine"
    warmup: int = 200
    dropout: float = 0.1
    seed: int = 0
    device: str = "auto"
    checkpoint: str = "last"  # last epoch (no selection on the test fold) or best
    extra: tuple[str, ...] = ()  # further 03_train.py flags, verbatim

    def train_flags(self) -> list[str]:
        flags = {
            "--epochs": self.epochs,
            "--d-model": self.d_model,
            "--layers": self.layers,
            "--heads": self.heads,
            "--window": self.window,
            "--batch-size": self.batch_size,
            "--lr": self.lr,
            "--schedule": self.schedule,
            "--warmup": self.warmup,
            "--dropout": self.dropout,
            "--seed": self.seed,
            "--device": self.device,
            "--patience": self.epochs,  # no early stopping: it would look at the test fold
            # last: every training student trains (no best.pt is scored); best: best.pt,
            # chosen on an inner split of them, never on the test fold
            "--select-on": "inner" if self.checkpoint == "best" else "fold",
        }
        return [str(x) for pair in flags.items() for x in pair] + list(self.extra)

    def checkpoint_file(self) -> str:
        return "best.pt" if self.checkpoint == "best" else f"epoch_{self.epochs:02d}.pt"

    def key(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:8]


@dataclass
class Context:
    """What every step needs: the settings and where things go."""

    settings: TrainSettings
    work_dir: Path
    source_root: Path
    multi_skill_rows: str
    slice_students: int | None
    force: bool
    bootstrap: int
    table_only: bool
    benchmarks_file: Path
    published_file: Path
    argv: list[str] = field(default_factory=lambda: list(sys.argv))

    def dataset_dir(self, plan: DatasetPlan) -> Path:
        name = f"{plan.preset}-{self.multi_skill_rows}-{plan.split}"
        if self.slice_students:
            name += f"-slice{self.slice_students}"
        return self.work_dir / name

    def model_dir(self, plan: DatasetPlan, model: str) -> Path:
        return self.dataset_dir(plan) / f"{model}-{self.settings.key()}"


# ---------------------------------------------------------------------------------------
# subprocesses


def run_step(command: list[str], log: Path, label: str) -> float:
    """Run one script from the repository root, its output to `log`; seconds of wall time.
    Raises with the log's tail when it fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"  {label}: {shlex.join(command[1:])}", flush=True)
    begin = time.perf_counter()
    with open(log, "w") as out:
        done = subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, check=False)
    seconds = time.perf_counter() - begin
    if done.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise RuntimeError(f"{label} failed (exit {done.returncode}); {log}:\n{tail}")
    print(f"  {label}: done in {seconds:.1f} s", flush=True)
    return seconds


def script(name: str, *args: object) -> list[str]:
    return [sys.executable, str(REPO / name), *map(str, args)]


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


def prepare_dataset(ctx: Context, plan: DatasetPlan) -> Path:
    """00 (+ slice), 01 and 02 into the dataset's directory; each step is skipped when its
    output exists (they are all written atomically). Returns the prep directory."""
    root = ctx.dataset_dir(plan)
    if ctx.force:  # model directories stay: their folds are redone one by one
        for name in ("input_full", "input", "prep"):
            if (root / name).exists():
                shutil.rmtree(root / name)
    logs = root / "logs"
    full_dir = root / ("input_full" if ctx.slice_students else "input")
    input_dir, prep_dir = root / "input", root / "prep"
    if not (full_dir / "conversion.json").exists():
        source = ctx.source_root / PRESETS[plan.preset].folder
        convert = script(
            "00_convert_kt_dataset.py",
            "--dataset",
            plan.preset,
            "--source-dir",
            source,
            "--multi-skill-rows",
            ctx.multi_skill_rows,
            "--output-dir",
            full_dir,
        )
        run_step(convert, logs / "00_convert.log", "00 convert")
    if ctx.slice_students and not (input_dir / "slice.json").exists():
        record = slice_students(full_dir, input_dir, ctx.slice_students)
        print(f"  slice: {record['students']} of {record['of_students']} students", flush=True)
    if not (prep_dir / "data").exists():
        preprocess = script(
            "01_preprocess.py", "--input-dir", input_dir, "--output-dir", prep_dir, "--no-progress"
        )
        run_step(preprocess, logs / "01_preprocess.log", "01 preprocess")
    if not (prep_dir / "folds" / "folds.json").exists():
        folds = script(
            "02_make_folds.py",
            "--input-dir",
            input_dir,
            "--output-dir",
            prep_dir,
            *plan.fold_flags,
        )
        run_step(folds, logs / "02_make_folds.log", "02 make folds")
    return prep_dir


def prepare_model_dir(ctx: Context, plan: DatasetPlan, model: str, prep_dir: Path) -> Path:
    """The model's output directory, with data/ and folds/ linked to the shared prep."""
    model_dir = ctx.model_dir(plan, model)
    model_dir.mkdir(parents=True, exist_ok=True)
    for name in ("data", "folds"):
        link = model_dir / name
        if not link.is_symlink():
            link.symlink_to(Path("..") / prep_dir.name / name, target_is_directory=True)
    write_json(model_dir / "bench_config.json", {"model": model, **asdict(ctx.settings)})
    return model_dir


# ---------------------------------------------------------------------------------------
# one fold of one model: 03, 04, 05


def fold_commands(ctx: Context, model: str, model_dir: Path, input_dir: Path, k: int):
    s = ctx.settings
    train = script(
        "03_train.py",
        "--output-dir",
        model_dir,
        "--fold",
        k,
        *MODEL_FLAGS[model],
        *s.train_flags(),
        "--resume",  # an interrupted fold continues from its last epoch
        "--no-progress",
    )
    infer = script(
        "04_infer.py",
        "--output-dir",
        model_dir,
        "--fold",
        k,
        "--checkpoint",
        s.checkpoint_file(),
        "--device",
        s.device,
        "--no-export",
        "--no-progress",
    )
    evaluate = script(
        "05_evaluate.py",
        "--input-dir",
        input_dir,
        "--output-dir",
        model_dir,
        "--folds",
        k,
        "--bootstrap",
        0,
        "--no-progress",
    )
    return train, infer, evaluate


@contextmanager
def report_lock(model_dir: Path):
    """Each 05 run rewrites model_dir/report/. Two bench_kt jobs on one model (other
    folds) take turns at 05 and at reading its table back, so neither reads the other's
    (an exclusive flock on model_dir/report.lock, released when the block ends)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    with open(model_dir / "report.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fold_metrics(model_dir: Path, k: int) -> dict:
    """AUC and accuracy at 0.5 of the model and both baselines on fold k (05's metrics.csv)."""
    table = pd.read_csv(model_dir / "report" / "metrics.csv", dtype={"fold": str})
    rows = table[table["fold"] == str(k)].set_index("scorer")
    scores = {}
    for scorer in ("model", *BASELINES):
        scores[scorer] = {
            "auc": float(rows.loc[scorer, "auc"]),
            "accuracy": float(rows.loc[scorer, "accuracy_at_half"]),
            "rows": int(rows.loc[scorer, "rows"]),
        }
    return scores


def run_fold(ctx: Context, plan: DatasetPlan, model: str, model_dir: Path, k: int) -> dict:
    """Train, stream and score fold k of `model`, or load its result when it exists."""
    result_path = model_dir / "results" / f"fold{k}.json"
    if result_path.exists() and not ctx.force:
        print(f"  skip: {result_path} exists", flush=True)
        return json.loads(result_path.read_text())
    if ctx.force:
        result_path.unlink(missing_ok=True)
        if (model_dir / f"fold{k}").exists():
            shutil.rmtree(model_dir / f"fold{k}")
    input_dir = ctx.dataset_dir(plan) / "input"
    commands = fold_commands(ctx, model, model_dir, input_dir, k)
    logs = model_dir / "logs"
    wall = {}
    train, infer, evaluate = commands
    wall["train"] = run_step(train, logs / f"fold{k}_train.log", f"train fold {k}")
    wall["infer"] = run_step(infer, logs / f"fold{k}_infer.log", f"infer fold {k}")
    with report_lock(model_dir):
        wall["evaluate"] = run_step(evaluate, logs / f"fold{k}_evaluate.log", f"evaluate fold {k}")
        scores = fold_metrics(model_dir, k)
    fold_dir = model_dir / f"fold{k}"
    history = pd.read_csv(fold_dir / "history.csv")
    stream = json.loads((fold_dir / "stream_summary.json").read_text())
    run_record = json.loads((fold_dir / "train_run.json").read_text())
    result = {
        "dataset": plan.preset,
        "split": plan.split,
        "model": model,
        "fold": k,
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
        "multi_skill_rows": ctx.multi_skill_rows,
        "slice_students": ctx.slice_students,
        "commands": [shlex.join(c) for c in commands],
        "environment": run_record.get("environment", {}),
        "cpus": os.cpu_count(),
    }
    write_json(result_path, result)
    return result


def pooled_report(ctx: Context, plan: DatasetPlan, model_dir: Path, folds: list[int]) -> None:
    """05 over every finished fold of the model (the pooled report.md)."""
    stamp = model_dir / "report" / "bench_pooled.json"
    wanted = {"folds": folds, "bootstrap": ctx.bootstrap}
    if stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return
    if len(folds) == 1 and ctx.bootstrap == 0:  # the fold's own 05 run wrote this report
        write_json(stamp, wanted)
        return
    command = script(
        "05_evaluate.py",
        "--input-dir",
        ctx.dataset_dir(plan) / "input",
        "--output-dir",
        model_dir,
        "--folds",
        ",".join(map(str, folds)),
        "--bootstrap",
        ctx.bootstrap,
        "--no-progress",
    )
    with report_lock(model_dir):
        run_step(command, model_dir / "logs" / "evaluate_pooled.log", "05 pooled")
        write_json(stamp, wanted)


# ---------------------------------------------------------------------------------------
# the table


def finished_results(model_dir: Path) -> list[dict]:
    paths = sorted((model_dir / "results").glob("fold*.json"), key=lambda p: int(p.stem[4:]))
    return [json.loads(p.read_text()) for p in paths]


def mean_std(values: list[float], digits: int = 4) -> str:
    if not values:
        return "—"
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def score_row(dataset: str, name: str, results: list[dict], scorer: str) -> list[str]:
    """A table row: `scorer`'s AUC and accuracy over the folds of `results` (and, for the
    model, its training time and streaming rate)."""
    auc = [r["scores"][scorer]["auc"] for r in results]
    accuracy = [r["scores"][scorer]["accuracy"] for r in results]
    folds = ",".join(str(r["fold"]) for r in results)
    if scorer != "model":
        return [dataset, name, mean_std(auc), mean_std(accuracy), "—", "—", folds]
    train = statistics.fmean(r["train_seconds"] for r in results)
    wall = statistics.fmean(r["wall_seconds"]["train"] for r in results)
    stream = statistics.fmean(r["stream_rows_per_s"] for r in results)
    timing = [f"{train:,.0f} ({wall:,.0f})", f"{stream:,.0f}"]
    return [dataset, name, mean_std(auc), mean_std(accuracy), *timing, folds]


def result_rows(ctx: Context, plans: list[DatasetPlan]) -> list[list[str]]:
    """One row per (dataset, model) with finished folds, then the baselines per dataset
    (the same fold rows for every model: taken from the first model's folds)."""
    rows = []
    for plan in plans:
        label = f"{plan.preset} ({plan.split})"
        finished = {m: finished_results(ctx.model_dir(plan, m)) for m in MODELS}
        finished = {m: results for m, results in finished.items() if results}
        rows += [score_row(label, MODEL_NAMES[m], r, "model") for m, r in finished.items()]
        if finished:
            first = next(iter(finished.values()))
            rows += [score_row(label, f"baseline: {b}", first, b) for b in BASELINES]
    return rows


def read_published(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def short_source(source: str) -> str:
    """The address or arXiv id of a source, for the table."""
    found = re.search(r"https?://\S+|arXiv:[0-9.]+", source)
    short = found.group(0) if found else source
    if "third-party" in source:
        short += " (third-party reimplementation)"
    if "secondary copy" in source:
        short += " (read in a secondary copy)"
    return short


def published_section(published: list[dict], datasets: list[str]) -> str:
    """The verified published AUCs (protocols as numbered notes), and which named sources
    could not be verified."""
    chosen = [p for p in published if p["dataset"] in datasets]
    notes: dict[str, int] = {}
    rows = []
    for p in (p for p in chosen if p["auc"]):
        std = f" ± {float(p['auc_std']):.4f}" if p["auc_std"] else ""
        note = notes.setdefault(p["protocol_note"], len(notes) + 1)
        auc = f"{float(p['auc']):.4f}{std}"
        rows.append([p["dataset"], p["model"], auc, short_source(p["source"]), f"[{note}]"])
    text = "Published ROC AUCs (bench/published_kt_results.csv; only numbers read in a source):\n\n"
    if rows:
        text += markdown_table(["dataset", "model", "AUC", "source", "protocol"], rows)
        text += "\n" + "".join(f"[{n}] {note}\n\n" for note, n in notes.items())
    else:
        text += "(none verified)\n\n"
    named: dict[str, list[str]] = {}
    for p in (p for p in chosen if not p["auc"]):
        named.setdefault(short_source(p["source"]), []).append(f"{p['model']} ({p['dataset']})")
    if named:
        listed = "; ".join(f"{source}: {', '.join(items)}" for source, items in named.items())
        text += (
            "Named in the CSV but not verified (their tables were not readable in the stored "
            f"sources, so no number is recorded): {listed}.\n"
        )
    return text


def protocol_notes(ctx: Context, plans: list[DatasetPlan]) -> str:
    s = ctx.settings
    lines = [f"- {p.preset}: {p.note}." for p in plans]
    lines += [
        f"- Multi-skill rows: `{ctx.multi_skill_rows}`. With `keep` (as AKT), a response to a "
        "problem with several skills appears once per skill on consecutive rows, so every copy "
        "after the first follows its own answer one step earlier: an easy target that lifts AUC "
        "on assist2009_pid (`bundle` predicts the copies together, before feedback; `merge` "
        "keeps one row).",
        "- AKT trains each fold with a separate validation file and picks the epoch on it; here "
        f"every fold trains {s.epochs} epoch(s) on the fold's training students and is scored from "
        f"`{s.checkpoint_file()}` (no selection on the test fold: "
        + (
            "best.pt is chosen on an inner split of the training students"
            if s.checkpoint == "best"
            else "the last epoch, no early stopping; 03's per-epoch AUC on the fold is only logged"
        )
        + "). AKT cuts students into independent sequences of 200; here each prediction "
        f"depends on the student's last {(2 * s.layers) * s.window} questions (banded attention "
        f"over {s.window}, {2 * s.layers} layers deep, over the whole history, streamed through "
        "the API emulator).",
        "- AUC is pooled over every response of a fold's students (as AKT/DKVMN compute it), "
        "then averaged over folds; ± is the standard deviation over folds (n-1).",
        "- These datasets have no times: 00 fills a constant 60 s step and empty elapsed times, "
        "so SAINT+'s extra decoder inputs (elapsed, lag) carry no signal and SAINT+ should "
        "match SAINT up to noise.",
        "- Rows beyond the papers' SAINT: `SAINT + skill tags` adds the mean embedding of "
        "the question's skills (00 writes them as tags) to the encoder input (03_train.py "
        "`--tags`); `... + interaction decoder` also embeds each answered question per "
        "(question, response) and (skill, response) pair in the decoder (`--decoder-features "
        "question`). `SAINT + Rasch skill embeddings (encoder)` replaces the vector per "
        "question by AKT's Rasch form: the mean skill embedding plus a learned scalar "
        "difficulty of the question times a variation vector of its skills (`--tags "
        "--question-embedding rasch`); `... (encoder and decoder)` gives the (skill, response) "
        "pairs in the decoder the same form (`--decoder-features question`). "
        "assist2015's questions are its skills, so tags add nothing there.",
        "- Baselines are 05_evaluate.py's: each question's correct rate on the fold's training "
        "rows, and that combined with the student's running correct rate.",
    ]
    if ctx.slice_students:
        lines.append(
            f"- **Slice run**: only {ctx.slice_students} students per dataset; the numbers "
            "prove the pipeline runs and are not comparable with published AUCs."
        )
    return "\n".join(lines) + "\n"


def example_commands(ctx: Context, plans: list[DatasetPlan]) -> str:
    for plan in plans:
        for model in MODELS:
            results = finished_results(ctx.model_dir(plan, model))
            if results:
                r = results[0]
                shown = [c.replace(str(REPO) + "/", "") for c in r["commands"]]
                return "\n".join(shown) + "\n"
    return ""


def machine_line(ctx: Context, plans: list[DatasetPlan]) -> str:
    for plan in plans:
        for model in MODELS:
            results = finished_results(ctx.model_dir(plan, model))
            if results:
                env = results[-1]["environment"]
                return (
                    f"{env.get('platform', '?')}, {results[-1].get('cpus', '?')} CPUs, device "
                    f"{env.get('device', '?')}, torch {env.get('torch', '?')} "
                    f"({env.get('torch_threads', '?')} threads), Python {env.get('python', '?')}"
                )
    return "?"


def render_section(ctx: Context, plans: list[DatasetPlan]) -> str:
    s = ctx.settings
    header = [
        "dataset",
        "model",
        "AUC mean ± std",
        "accuracy mean ± std",
        "train s/fold (03 wall)",
        "stream rows/s",
        "folds",
    ]
    config = (
        f"d_model {s.d_model}, {s.layers}+{s.layers} layers, {s.heads} heads, window "
        f"{s.window}, batch {s.batch_size}, {s.epochs} epoch(s), lr {s.lr} ({s.schedule}, "
        f"warm-up {s.warmup}), dropout {s.dropout}, seed {s.seed}, device {s.device}, "
        f"scored from {s.checkpoint_file()}" + (f", extra {' '.join(s.extra)}" if s.extra else "")
    )
    parts = [
        "## Public knowledge-tracing datasets (bench/bench_kt.py)\n",
        f"Written {time.strftime('%Y-%m-%d %H:%M')} by `python "
        f"{shlex.join(['bench/bench_kt.py', *ctx.argv[1:]])}`.\n",
        f"Config ({s.key()}): {config}. Machine: {machine_line(ctx, plans)}.\n",
        markdown_table(header, result_rows(ctx, plans)),
        published_section(read_published(ctx.published_file), [p.preset for p in plans]),
        "Protocol notes:\n\n" + protocol_notes(ctx, plans),
    ]
    commands = example_commands(ctx, plans)
    if commands:
        parts.append(
            "Commands of one fold (every fold's are in its results JSON):\n\n```\n"
            + commands
            + "```\n"
        )
    return "\n".join(parts)


def write_section(path: Path, section: str) -> None:
    """Replace this benchmark's section of BENCHMARKS.md (between its markers)."""
    write_marked_section(path, MARKER, section)


# ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None):
    """(context, plans to run, plans in the table, models, folds or None for all)."""
    d = TrainSettings()
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--datasets", nargs="+", choices=sorted(PLANS), default=sorted(PLANS))
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(DEFAULT_MODELS))
    p.add_argument(
        "--folds",
        type=lambda t: [int(k) for k in t.split(",")],
        default=None,
        help="comma list (default: every fold of the dataset's split)",
    )
    p.add_argument(
        "--slice",
        type=int,
        default=None,
        dest="slice_students",
        help="keep only N students per dataset (smoke runs)",
    )
    p.add_argument("--multi-skill-rows", choices=MULTI_SKILL_MODES, default="keep")
    p.add_argument("--assist2015-split", choices=sorted(PLANS["assist2015"]), default="unseen5")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--d-model", type=int, default=d.d_model)
    p.add_argument("--layers", type=int, default=d.layers, help="per side")
    p.add_argument("--heads", type=int, default=d.heads)
    p.add_argument("--window", type=int, default=d.window)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--schedule", choices=("noam", "cosine"), default=d.schedule)
    p.add_argument("--warmup", type=int, default=d.warmup)
    p.add_argument("--dropout", type=float, default=d.dropout)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=d.device)
    p.add_argument("--checkpoint", choices=("last", "best"), default=d.checkpoint)
    p.add_argument("--train-extra", default="", help="further 03_train.py flags, one string")
    p.add_argument("--bootstrap", type=int, default=200, help="resamples of the pooled 05 run")
    p.add_argument("--work-dir", type=Path, default=REPO / "bench" / "out" / "kt")
    p.add_argument("--benchmarks-file", type=Path, default=REPO / "BENCHMARKS.md")
    p.add_argument("--published", type=Path, default=REPO / "bench" / "published_kt_results.csv")
    p.add_argument("--source-root", type=Path, default=REPO.parent / "shared" / "data")
    p.add_argument("--force", action="store_true", help="redo finished steps and folds")
    p.add_argument(
        "--table-only",
        action="store_true",
        help="run nothing: rewrite the table from the folds already finished in --work-dir "
        "(every model of MODEL_FLAGS with results under this config)",
    )
    args = p.parse_args(argv)
    if args.slice_students is not None and args.slice_students < 1:
        p.error(f"--slice: expected a positive number of students, got {args.slice_students}")
    settings = TrainSettings(
        epochs=args.epochs,
        d_model=args.d_model,
        layers=args.layers,
        heads=args.heads,
        window=args.window,
        batch_size=args.batch_size,
        lr=args.lr,
        schedule=args.schedule,
        warmup=args.warmup,
        dropout=args.dropout,
        seed=args.seed,
        device=args.device,
        checkpoint=args.checkpoint,
        extra=tuple(shlex.split(args.train_extra)),
    )
    ctx = Context(
        settings=settings,
        work_dir=args.work_dir.resolve(),
        source_root=args.source_root.resolve(),
        multi_skill_rows=args.multi_skill_rows,
        slice_students=args.slice_students,
        force=args.force,
        bootstrap=args.bootstrap,
        table_only=args.table_only,
        benchmarks_file=args.benchmarks_file,
        published_file=args.published,
        argv=[sys.argv[0], *(argv if argv is not None else sys.argv[1:])],
    )
    splits = {"assist2009_pid": "akt5", "assist2015": args.assist2015_split}
    plans = [PLANS[name][splits[name]] for name in args.datasets]
    table_plans = [PLANS[name][split] for name, split in splits.items()]
    return ctx, plans, table_plans, args.models, args.folds


def main(argv: list[str] | None = None) -> int:
    ctx, plans, table_plans, models, folds = parse_args(argv)
    if ctx.table_only:
        plans = []
    for plan in plans:
        print(f"{plan.preset} ({plan.split}): preparing {ctx.dataset_dir(plan)}", flush=True)
        prep_dir = prepare_dataset(ctx, plan)
        wanted = [k for k in (folds or range(plan.n_folds)) if k < plan.n_folds]
        if folds and len(wanted) < len(folds):
            print(f"  {plan.split} has {plan.n_folds} fold(s): running {wanted}", flush=True)
        model_dirs = {m: prepare_model_dir(ctx, plan, m, prep_dir) for m in models}
        for k in wanted:
            for model in models:
                print(f"{plan.preset} fold {k} {model} ({model_dirs[model].name})", flush=True)
                run_fold(ctx, plan, model, model_dirs[model], k)
                write_section(ctx.benchmarks_file, render_section(ctx, table_plans))
        for model in models:
            finished = [r["fold"] for r in finished_results(model_dirs[model])]
            if finished:
                pooled_report(ctx, plan, model_dirs[model], finished)
    write_section(ctx.benchmarks_file, render_section(ctx, table_plans))
    print(f"wrote the table into {ctx.benchmarks_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
