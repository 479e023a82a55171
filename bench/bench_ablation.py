"""Ablation on the demo data: SAINT, SAINT+, SAINT+ with question difficulty, SAINT+ with
multi-head latent attention, a large teacher and a small student distilled from it,
against the same student trained without a teacher.

Every variant runs the real scripts on fold 0 of the quick start's demo (2,000 students):
03_train.py, then 04_infer.py streaming the fold's validation rows through the API
emulator. Reported per variant: streamed AUC, the demo's oracle AUC on the same rows,
the per-question baseline on the same rows, parameters, training interactions/s (mean
over epochs), streaming rows/s, and the per-student cache size.

    python -m bench.bench_ablation            # prepares the demo if needed
    python -m bench.bench_ablation --restream # trained variants: stream them again only

The section (command, data, the table and the distillation summary) goes to
bench/results/ablation.txt; the 03/04 commands it runs are printed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bench.benchlib import (
    WORK,
    Report,
    link_data,
    machine,
    make_demo,
    results_flag,
    run,
    script,
    shown,
    this_command,
)
from bench.fold_run import FoldRun, train_and_stream
from common.data.dataset import Dataset
from common.data.fold_data import Fold, load_fold_data
from common.metrics import auc_or_nan
from common.report.baselines import BaselineConfig, baseline_scores
from common.tables import markdown_table
from common.workspace import ModelFolder, Workspace

SMALL = ["--d-model", "64", "--layers", "2", "--heads", "4"]
TRAIN = ["--window", "100", "--batch-size", "64", "--lr", "2e-3", "--warmup", "100"]
VARIANTS = {
    "SAINT": ["--model", "saint", *SMALL],
    "SAINT+": ["--model", "saint+", *SMALL],
    "SAINT+ difficulty": ["--model", "saint+", *SMALL, "--difficulty-buckets", "20"],
    "SAINT+ MLA": ["--model", "saint+", *SMALL, "--attention", "mla", "--kv-latent-dim", "16"],
    "teacher d256 4+4": ["--model", "saint+", "--d-model", "256", "--layers", "4", "--heads", "8"],
    "student distilled": [
        "--model",
        "saint+",
        *SMALL,
        "--distill-alpha",
        "0.5",
        "--distill-temperature",
        "2",
    ],
}


TEACHER, STUDENT = "teacher d256 4+4", "student distilled"
# the student's --teacher as the table shows it: fold 0's best checkpoint of the teacher's run
TEACHER_CHECKPOINT = f"{ModelFolder.name_of(0)}/{ModelFolder.BEST}"


def run_name(name: str) -> str:
    """The variant's run: one folder per variant under <work-dir>/runs/, beside the
    demo's data and folds (linked into the work dir once)."""
    return name.replace(" ", "_").replace("+", "plus")


def variant_fold(out: Workspace, name: str) -> FoldRun:
    """Fold 0 of the variant's run in the workspace `out`."""
    return FoldRun(out, run_name(name))


def kaggle_like_stream(work: Path, demo: Workspace, share: float) -> Workspace:
    """A second split of the same demo for stream speed: the last `share` of its rows by
    virtual time (02_make_folds.py --strategy virtual-time), a stream that interleaves
    many students, about 23 rows per group at share 0.1, like the real example test's
    18 to 33 (fold 0's validation stream has few students left in its tail: 5 rows per
    group on average, 1 at the median). The variants trained on some of these rows, so
    only its speed is used. `demo`: the demo's workspace, whose data/ it shares."""
    out = Workspace(work / "kaggle_like_stream")
    if not out.folds.fold(0).exists():
        link_data(out.path, demo, folds=False)
        split = ("--strategy", "virtual-time", "--n-folds", "1", "--valid-share", share)
        run(script("02_make_folds.py", "--output-dir", out.path, *split))
    return out


def stream_speed(stream: Workspace, name: str, checkpoint: Path, restream: bool) -> dict:
    """04_infer.py's summary for `checkpoint` streamed over the Kaggle-like stream
    (streamed again when asked, or when the checkpoint is newer than the summary)."""
    fold = variant_fold(stream, name)
    fold.folder.path.mkdir(parents=True, exist_ok=True)
    best = fold.folder.checkpoint()
    best.unlink(missing_ok=True)
    best.symlink_to(checkpoint.resolve())
    summary = fold.folder.stream_summary
    if restream or not summary.exists() or summary.stat().st_mtime < checkpoint.stat().st_mtime:
        run(fold.stream_command())
    return fold.stream_summary()


def variant_figures(fold: FoldRun) -> dict:
    """What the table shows of a trained and streamed variant."""
    summary, history = fold.stream_summary(), fold.history()
    checkpoint = fold.best_checkpoint()
    return {
        "predictions": pd.read_parquet(fold.folder.stream_predictions),
        "rows_per_s": summary["rows_per_s"],
        "rows": summary["rows"],
        "groups": summary["groups"],
        "cache_bytes": summary["state_bytes_per_student"]["cache"],
        "train_rate": float(history["interactions_per_s"].mean()),
        "train_seconds": float(history["train_seconds"].sum()),
        "best_epoch": int(checkpoint["best_epoch"]),
        "parameters": sum(
            v.numel()
            for k, v in checkpoint["model_state"].items()
            if not k.endswith("question_difficulty")
        ),
    }


def train_variant(
    out: Workspace, name: str, flags: list[str], epochs: int, fresh: bool, restream: bool
) -> dict:
    """Train the variant's run (from scratch when `fresh`; otherwise a variant trained for
    fewer epochs than asked continues from its last checkpoint, which with the Noam
    schedule is the same as training the longer run at once) and stream; a finished
    variant is only read."""
    fold = variant_fold(out, name)
    if fresh and fold.folder.path.exists():
        shutil.rmtree(fold.folder.path)
    if not fold.streamed() or fold.trained_epochs() < epochs:
        train_and_stream(fold, ["--epochs", epochs, *TRAIN, *flags])
    elif restream:  # the trained checkpoint streamed again (e.g. on a quiet machine)
        run(fold.stream_command())
    return variant_figures(fold)


def stream_shape(rows: int, groups: int) -> str:
    return f"{rows:,} question rows in {groups:,} groups, {rows / groups:.1f} rows per group"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--demo-dir", type=Path, default=WORK / "demo2000")
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--work-dir", type=Path, default=WORK / "ablation")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--teacher-epochs", type=int, default=5)
    parser.add_argument("--force", action="store_true", help="retrain every variant afresh")
    parser.add_argument(
        "--retrain",
        nargs="+",
        default=[],
        choices=list(VARIANTS),
        metavar="VARIANT",
        help="retrain these variants afresh (e.g. 'student distilled' after the teacher "
        f"changed); one of {', '.join(VARIANTS)}",
    )
    parser.add_argument(
        "--restream",
        action="store_true",
        help="stream every trained variant again (04_infer.py only), e.g. on a quiet machine",
    )
    parser.add_argument(
        "--speed-share",
        type=float,
        default=0.1,
        help="share of the demo's rows (by virtual time) in the Kaggle-like speed stream",
    )
    results_flag(parser, "ablation")
    return parser.parse_args()


def train_variants(args: argparse.Namespace, out: Workspace, demo: Workspace) -> dict[str, dict]:
    """Every variant trained and streamed on fold 0 of `out` (the student after its
    teacher), then streamed over the Kaggle-like stream of the demo's data for speed."""
    results = {}
    for name, flags in VARIANTS.items():
        epochs = args.teacher_epochs if name == TEACHER else args.epochs
        if name == STUDENT:
            flags = [*flags, "--teacher", str(variant_fold(out, TEACHER).folder.checkpoint())]
        fresh = args.force or name in args.retrain
        results[name] = train_variant(out, name, flags, epochs, fresh, args.restream)
    speed_root = kaggle_like_stream(args.work_dir, demo, args.speed_share)
    for name in VARIANTS:
        checkpoint = variant_fold(out, name).folder.checkpoint()
        speed = stream_speed(speed_root, name, checkpoint, args.restream)
        results[name]["kaggle_rows_per_s"] = speed["rows_per_s"]
        results[name]["kaggle_stream"] = speed
    return results


@dataclass
class Reference:
    """The streamed rows every variant is scored on, and what the demo's truth and the
    per-question baseline score on exactly those rows."""

    rows: pd.DataFrame  # the SAINT+ variant's streamed predictions (row ids, labels)
    labels: np.ndarray
    oracle_auc: float
    baseline_auc: float


def reference_scores(demo_dir: Path, data_out: Workspace, rows: pd.DataFrame) -> Reference:
    """The oracle (the demo's true probabilities) and the per-question baseline on the
    streamed `rows` (fold 0 of the demo's workspace `data_out`)."""
    labels = rows["answered_correctly"].to_numpy()
    truth = pd.read_csv(demo_dir / "input" / "demo_truth.csv")
    oracle = truth.set_index("row_id")["p_true"].reindex(rows["row_id"]).to_numpy()
    dataset = Dataset.of(data_out)
    data = load_fold_data(data_out, 0)
    cut_row = dataset.arrays.offsets[:-1] + Fold.of(data_out, 0).user_cut
    entries = np.searchsorted(data.sequences.row, rows["global_row"].to_numpy())
    baselines = baseline_scores(
        data.sequences, entries, cut_row, data.n_questions, BaselineConfig()
    )
    baseline_auc = auc_or_nan(labels, baselines["question rate"])
    return Reference(rows, labels, auc_or_nan(labels, oracle), baseline_auc)


def score_variants(results: dict[str, dict], ref: Reference) -> None:
    """Each variant's AUC (results[name]["auc"]) on the reference rows."""
    for r in results.values():
        merged = r["predictions"].set_index("row_id")["prediction"].reindex(ref.rows["row_id"])
        r["auc"] = auc_or_nan(ref.labels, merged.to_numpy())


def intro_lines(args: argparse.Namespace, results: dict[str, dict], ref: Reference) -> list[str]:
    """The command, the data and the two streams the speeds were measured on."""
    plain, kaggle = results["SAINT+"], results["SAINT+"]["kaggle_stream"]
    return [
        f"Command: `{shown(this_command())}` on {machine()}; every variant trains "
        f"{args.epochs} epochs ({args.teacher_epochs} for the teacher) with "
        f"`{' '.join(TRAIN)}`, the checkpoint with the best validation AUC is streamed "
        f"(torch threads: {torch.get_num_threads()}).",
        "",
        f"Fold 0 of the {args.users:,}-student demo, {len(ref.rows):,} streamed question rows; "
        f"oracle AUC (the demo's true probabilities) {ref.oracle_auc:.4f}; per-question "
        f"baseline AUC {ref.baseline_auc:.4f}.",
        "",
        f"Stream speed on two streams, one 04_infer.py run each: fold 0's validation rows "
        f"({stream_shape(plain['rows'], plain['groups'])}), and "
        f"the Kaggle-like stream, the last {args.speed_share:.0%} of the same demo's rows by "
        f"virtual time ({stream_shape(kaggle['rows'], kaggle['groups'])}; the real example "
        f"test has 18 to 33 rows per group; speed only: the models trained on some of "
        f"its rows).",
        "",
    ]


def variant_table(results: dict[str, dict], ref: Reference) -> str:
    header = ["variant", "flags", "params", "AUC", "gap to oracle", "gain over baseline"]
    header += ["train interactions/s", "stream rows/s, fold 0", "stream rows/s, Kaggle-like"]
    header += ["cache bytes/student", "best epoch"]
    body = []
    for name, r in results.items():
        teacher = f" --teacher <teacher's run>/{TEACHER_CHECKPOINT}" if name == STUDENT else ""
        flags = " ".join(VARIANTS[name]) + teacher
        auc = r["auc"]
        quality = [f"{auc:.4f}", f"{ref.oracle_auc - auc:.4f}", f"{auc - ref.baseline_auc:+.4f}"]
        rates = [r["train_rate"], r["rows_per_s"], r["kaggle_rows_per_s"]]
        cells = [*quality, *(f"{x:,.0f}" for x in rates), f"{r['cache_bytes']:,}"]
        body.append([name, f"`{flags}`", f"{r['parameters']:,}", *cells, str(r["best_epoch"])])
    return markdown_table(header, body, "ll" + "r" * (len(header) - 2))


def distillation_lines(results: dict[str, dict], baseline_auc: float) -> list[str]:
    """How much of the teacher's gain the student keeps, and how much faster it streams."""
    teacher, student, plain = results[TEACHER], results[STUDENT], results["SAINT+"]
    kept = (student["auc"] - baseline_auc) / (teacher["auc"] - baseline_auc)
    kept_plain = (plain["auc"] - baseline_auc) / (teacher["auc"] - baseline_auc)
    speed = student["rows_per_s"] / teacher["rows_per_s"]
    kaggle_speed = student["kaggle_rows_per_s"] / teacher["kaggle_rows_per_s"]
    return [
        f"The distilled student (d_model 64, 2+2) keeps "
        f"**{kept:.1%}** of the teacher's AUC gain over the per-question baseline (the same "
        f"student without a teacher, the SAINT+ row: {kept_plain:.1%}) and streams "
        f"**{kaggle_speed:.1f}x** faster than the teacher on the Kaggle-like stream, "
        f"**{speed:.1f}x** on fold 0's stream (targets: at least 90% and 3x).",
        "",
    ]


def main() -> int:
    args = parse_args()
    say = Report("ablation", args.results)
    say.header("Ablation on the demo data (bench/bench_ablation.py)")
    demo, folds = args.demo_dir, ("--n-folds", "5", "--seed", "0")
    data_out = make_demo(demo / "input", demo / "output", args.users, 0, folds, say=say)
    out = link_data(args.work_dir, data_out)  # every variant a run of this output dir
    results = train_variants(args, out, data_out)
    ref = reference_scores(args.demo_dir, data_out, results["SAINT+"]["predictions"])
    score_variants(results, ref)
    lines = intro_lines(args, results, ref)
    lines.append(variant_table(results, ref))
    lines += distillation_lines(results, ref.baseline_auc)
    text = "\n".join(lines)
    say()
    say(text.rstrip("\n"))
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
