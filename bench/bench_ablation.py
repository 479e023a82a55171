"""Ablation on the demo data: SAINT, SAINT+, SAINT+ with question difficulty, SAINT+ with
multi-head latent attention, a large teacher and a small student distilled from it,
against the same student trained without a teacher.

Every variant runs the real scripts on fold 0 of the quick start's demo (2,000 students):
03_train.py, then 04_infer.py streaming the fold's validation rows through the API
emulator. Reported per variant: streamed AUC, the demo's oracle AUC on the same rows,
the per-question baseline on the same rows, parameters, training interactions/s (mean
over epochs), streaming rows/s, and the per-student cache size.

    python bench/bench_ablation.py            # prepares output/demo if needed
    python bench/bench_ablation.py --restream # trained variants: stream them again only

The section (command, data, the table and the distillation summary) goes to
bench/results/ablation.txt; the 03/04 commands it runs are printed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from benchlib import (
    WORK,
    Report,
    link_data,
    machine,
    make_demo,
    results_flag,
    run,
    script,
    shown,
)

from common import layout
from common.data.dataset import Dataset
from common.data.fold_data import Fold, load_fold_data
from common.metrics import auc_or_nan
from common.report.baselines import BaselineConfig, baseline_scores
from common.tables import markdown_table

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


def run_name(name: str) -> str:
    """The variant's run: one folder per variant under <work-dir>/runs/, beside the
    demo's data and folds (linked into the work dir once)."""
    return name.replace(" ", "_").replace("+", "plus")


def variant_fold(out: Path, name: str) -> Path:
    """Fold 0's folder of the variant's run in the output dir `out`."""
    return layout.fold_dir(layout.run_dir(out, run_name(name)), 0)


def infer_command(out: Path, name: str) -> list[str]:
    """04_infer.py streaming fold 0 of the variant's run in the output dir `out`."""
    run = ("--output-dir", out, "--run", run_name(name), "--fold", "0")
    return script("04_infer.py", *run, "--no-progress", "--no-export")


def kaggle_like_stream(work: Path, demo: Path, share: float) -> Path:
    """A second split of the same demo for stream speed: the last `share` of its rows by
    virtual time (02_make_folds.py --strategy virtual-time), a stream that interleaves
    many students, about 23 rows per group at share 0.1, like the real example test's
    18 to 33 (fold 0's validation stream has few students left in its tail: 5 rows per
    group on average, 1 at the median). The variants trained on some of these rows, so
    only its speed is used."""
    out = work / "kaggle_like_stream"
    if not (out / "folds" / "fold0.npz").exists():
        link_data(out, demo / "output", ("data",))
        split = ("--strategy", "virtual-time", "--n-folds", "1", "--valid-share", share)
        run(script("02_make_folds.py", "--output-dir", out, *split))
    return out


def stream_speed(stream: Path, name: str, checkpoint: Path, restream: bool) -> dict:
    """04_infer.py's summary for `checkpoint` streamed over the Kaggle-like stream
    (streamed again when asked, or when the checkpoint is newer than the summary)."""
    folder = variant_fold(stream, name)
    folder.mkdir(parents=True, exist_ok=True)
    best = folder / "best.pt"
    best.unlink(missing_ok=True)
    best.symlink_to(checkpoint.resolve())
    summary = folder / "stream_summary.json"
    if restream or not summary.exists() or summary.stat().st_mtime < checkpoint.stat().st_mtime:
        run(infer_command(stream, name))
    return json.loads(summary.read_text())


def trained_epochs(fold_dir: Path) -> int:
    history = fold_dir / "history.csv"
    return len(pd.read_csv(history)) if history.exists() else 0


def train_and_stream(
    out: Path, name: str, flags: list[str], epochs: int, fresh: bool, restream: bool
) -> dict:
    """Train the variant's run (from scratch when `fresh`; otherwise a variant trained for
    fewer epochs than asked continues from its last checkpoint, which with the Noam
    schedule is the same as training the longer run at once) and stream; a finished
    variant is only read."""
    fold_dir = variant_fold(out, name)
    stream = infer_command(out, name)
    if fresh and fold_dir.exists():
        shutil.rmtree(fold_dir)
    summary = fold_dir / "stream_summary.json"
    if not summary.exists() or trained_epochs(fold_dir) < epochs:
        fold = ("--output-dir", out, "--run", run_name(name), "--fold", "0", "--epochs", epochs)
        run(script("03_train.py", *fold, "--no-progress", "--resume", *TRAIN, *flags))
        run(stream)
    elif restream:  # the trained checkpoint streamed again (e.g. on a quiet machine)
        run(stream)
    summary = json.loads((fold_dir / "stream_summary.json").read_text())
    history = pd.read_csv(fold_dir / "history.csv")
    checkpoint = torch.load(fold_dir / "best.pt", map_location="cpu", weights_only=False)
    predictions = pd.read_parquet(fold_dir / "stream_predictions.parquet")
    return {
        "predictions": predictions,
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


def stream_shape(rows: int, groups: int) -> str:
    return f"{rows:,} question rows in {groups:,} groups, {rows / groups:.1f} rows per group"


def main() -> int:
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
    args = parser.parse_args()
    say = Report("ablation", args.results)
    say.header("Ablation on the demo data (bench/bench_ablation.py)")
    demo, folds = args.demo_dir, ("--n-folds", "5", "--seed", "0")
    data_out = make_demo(demo / "input", demo / "output", args.users, 0, folds, say=say)
    truth = pd.read_csv(args.demo_dir / "input" / "demo_truth.csv")
    results = {}
    out = link_data(args.work_dir, data_out)  # every variant a run of this output dir
    for name, flags in VARIANTS.items():
        epochs = args.teacher_epochs if name.startswith("teacher") else args.epochs
        if name == "student distilled":
            teacher = variant_fold(out, "teacher d256 4+4") / "best.pt"
            flags = [*flags, "--teacher", str(teacher)]
        fresh = args.force or name in args.retrain
        results[name] = train_and_stream(out, name, flags, epochs, fresh, args.restream)
    speed_root = kaggle_like_stream(args.work_dir, args.demo_dir, args.speed_share)
    for name in VARIANTS:
        checkpoint = variant_fold(out, name) / "best.pt"
        speed = stream_speed(speed_root, name, checkpoint, args.restream)
        results[name]["kaggle_rows_per_s"] = speed["rows_per_s"]
        results[name]["kaggle_stream"] = speed

    # baselines and oracle on exactly the streamed rows
    rows = results["SAINT+"]["predictions"]
    labels = rows["answered_correctly"].to_numpy()
    oracle = truth.set_index("row_id")["p_true"].reindex(rows["row_id"]).to_numpy()
    oracle_auc = auc_or_nan(labels, oracle)
    dataset = Dataset.load(data_out)
    data = load_fold_data(data_out, 0, dataset=dataset)
    cut_row = dataset.arrays.offsets[:-1] + Fold.load(data_out, 0).user_cut
    entries = np.searchsorted(data.sequences.row, rows["global_row"].to_numpy())
    baselines = baseline_scores(
        data.sequences, entries, cut_row, data.n_questions, BaselineConfig()
    )
    baseline_auc = auc_or_nan(labels, baselines["question rate"])

    kaggle = results["SAINT+"]["kaggle_stream"]
    lines = [
        f"Command: `{shown([sys.executable, *sys.argv])}` on {machine()}; every variant trains "
        f"{args.epochs} epochs ({args.teacher_epochs} for the teacher) with "
        f"`{' '.join(TRAIN)}`, the checkpoint with the best validation AUC is streamed "
        f"(torch threads: {torch.get_num_threads()}).",
        "",
        f"Fold 0 of the {args.users:,}-student demo, {len(rows):,} streamed question rows; "
        f"oracle AUC (the demo's true probabilities) {oracle_auc:.4f}; per-question "
        f"baseline AUC {baseline_auc:.4f}.",
        "",
        f"Stream speed on two streams, one 04_infer.py run each: fold 0's validation rows "
        f"({stream_shape(results['SAINT+']['rows'], results['SAINT+']['groups'])}), and "
        f"the Kaggle-like stream, the last {args.speed_share:.0%} of the same demo's rows by "
        f"virtual time ({stream_shape(kaggle['rows'], kaggle['groups'])}; the real example "
        f"test has 18 to 33 rows per group; speed only: the models trained on some of "
        f"its rows).",
        "",
    ]
    header = ["variant", "flags", "params", "AUC", "gap to oracle", "gain over baseline"]
    header += ["train interactions/s", "stream rows/s, fold 0", "stream rows/s, Kaggle-like"]
    header += ["cache bytes/student", "best epoch"]
    body = []
    for name, r in results.items():
        merged = r["predictions"].set_index("row_id")["prediction"].reindex(rows["row_id"])
        auc = r["auc"] = auc_or_nan(labels, merged.to_numpy())
        flags = " ".join(VARIANTS[name]) + (
            " --teacher <teacher's run>/fold0/best.pt" if name == "student distilled" else ""
        )
        quality = [f"{auc:.4f}", f"{oracle_auc - auc:.4f}", f"{auc - baseline_auc:+.4f}"]
        rates = [r["train_rate"], r["rows_per_s"], r["kaggle_rows_per_s"]]
        cells = [*quality, *(f"{x:,.0f}" for x in rates), f"{r['cache_bytes']:,}"]
        body.append([name, f"`{flags}`", f"{r['parameters']:,}", *cells, str(r["best_epoch"])])
    lines.append(markdown_table(header, body, "ll" + "r" * (len(header) - 2)))
    teacher, student = results["teacher d256 4+4"], results["student distilled"]
    plain = results["SAINT+"]
    kept = (student["auc"] - baseline_auc) / (teacher["auc"] - baseline_auc)
    kept_plain = (plain["auc"] - baseline_auc) / (teacher["auc"] - baseline_auc)
    speed = student["rows_per_s"] / teacher["rows_per_s"]
    kaggle_speed = student["kaggle_rows_per_s"] / teacher["kaggle_rows_per_s"]
    lines += [
        f"The distilled student (d_model 64, 2+2) keeps "
        f"**{kept:.1%}** of the teacher's AUC gain over the per-question baseline (the same "
        f"student without a teacher, the SAINT+ row: {kept_plain:.1%}) and streams "
        f"**{kaggle_speed:.1f}x** faster than the teacher on the Kaggle-like stream, "
        f"**{speed:.1f}x** on fold 0's stream (targets: at least 90% and 3x).",
        "",
    ]
    text = "\n".join(lines)
    say()
    say(text.rstrip("\n"))
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
