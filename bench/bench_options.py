"""Ablation of the modeling options (the AKT read-out; the past-event features read by the
model, in its encoder or at its head; the boosted-features baseline and the blend) on
fold 0 of the quick start's demo and of assist2009_pid.

Demo: the quick start's 2,000 students (00-02 as run_demo.sh), then per variant 03 (the
quick start's recipe, best.pt chosen on the inner split), 04 streaming fold 0 and 05
(04 fits the trees on the fold's training rows, chooses the blend's weight on
the inner split and streams the blend; 05 scores the model, the trees and the blend).
assist2009_pid: fold 0 of every bench/kt/run.py model run with `--checkpoint best` found
under --kt-dir, and its `baselines` run (none is run here).

    python -m bench.bench_options                 # the demo variants, then the table
    python -m bench.bench_options --table-only    # the table from finished runs

The section goes to bench/results/options.txt.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.benchlib import (
    BENCH_RUN,
    DEMO,
    DEMO_FOLD_FLAGS,
    SMALL_DATA_RECIPE,
    WORK,
    Report,
    bench_run,
    link_data,
    make_demo,
    results_flag,
    run,
    script,
)
from bench.fold_run import FoldRun, train_and_stream
from common.model.trees.blending import BLEND
from common.model.trees.boosting import TREES
from common.tables import markdown_table
from common.workspace import Workspace

VARIANTS = {
    "SAINT+ (quick start)": [],
    "SAINT+ + AKT read-out": ["--readout", "akt"],
    # issue 26: where the past-event features enter the model
    "SAINT+ + past features (encoder)": ["--past-features", "encoder"],
    "SAINT+ + past features (head)": ["--past-features", "head"],
}
KT_DATASET = "assist2009_pid-keep-akt5"
HEADER = [
    "data (fold 0)", "variant", "model AUC", "trees AUC", "blend AUC (weight)",
    "question rate AUC", "train s (epochs)", "stream rows/s",
]  # fmt: skip


def demo_variant(
    work: Path, prep: Workspace, input_dir: Path, name: str, flags: list[str]
) -> Workspace:
    """03, 04 and 05 of one variant on fold 0 of the demo's workspace `prep` (skipped when
    its report is there); the variant's workspace."""
    out = link_data(work / name.replace(" ", "_").replace("+", "plus"), prep)
    if not bench_run(out).report.summary.exists():
        train_and_stream(FoldRun(out), [*SMALL_DATA_RECIPE, *flags])
        where = ["--input-dir", input_dir, "--output-dir", out.path, "--run", BENCH_RUN]
        where += ["--bootstrap", "0"]
        run(script("05_evaluate.py", *where, "--no-progress"))
    return out


def demo_row(name: str, out: Workspace) -> list[str]:
    summary = json.loads(bench_run(out).report.summary.read_text())
    fold = FoldRun(out)
    history, stream = fold.history(), fold.stream_summary()
    blend = summary.get("blend_auc")
    weight = summary["blend"].get("0", {}).get("weight") if summary.get("blend") else None
    return [
        "demo",
        name,
        f"{summary['auc']:.4f}",
        f"{summary['baselines'][TREES]:.4f}",
        "—" if blend is None else f"{blend:.4f} ({weight:g})",
        f"{summary['baselines']['question rate']:.4f}",
        f"{history['train_seconds'].sum():,.0f} ({len(history)})",
        f"{stream['rows_per_s']:,.0f}",
    ]


def kt_rows(kt_dir: Path) -> list[list[str]]:
    """Fold 0 of every KT benchmark model run whose checkpoint was chosen on the inner split,
    and of the baselines run."""
    rows, boosted = [], "—"
    for path in sorted((kt_dir / KT_DATASET).glob("*/results/fold0.json")):
        result = json.loads(path.read_text())
        scores = result["scores"]
        if result["model"] == "baselines":
            boosted = f"{scores[TREES]['auc']:.4f}"
            rows.append(
                ["assist2009_pid", "baselines only", "—", boosted, "—",
                 f"{scores['question rate']['auc']:.4f}", "—", "—"]
            )  # fmt: skip
            continue
        if result["settings"]["checkpoint"] != "best":
            continue
        blend = scores.get(BLEND, {}).get("auc")
        rows.append(
            [
                "assist2009_pid",
                result["model"],
                f"{scores['model']['auc']:.4f}",
                f"{scores[TREES]['auc']:.4f}" if TREES in scores else "—",
                "—" if blend is None else f"{blend:.4f}",
                f"{scores['question rate']['auc']:.4f}",
                f"{result['train_seconds']:,.0f} ({result['epochs']})",
                f"{result['stream_rows_per_s']:,.0f}",
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, default=WORK / "options")
    parser.add_argument("--kt-dir", type=Path, default=WORK / "kt")
    parser.add_argument("--table-only", action="store_true", help="run nothing")
    parser.add_argument(
        "--variants", nargs="+", choices=sorted(VARIANTS), default=sorted(VARIANTS),
        help="demo variants to run (the others are only read)",
    )  # fmt: skip
    results_flag(parser, "options")
    args = parser.parse_args(argv)
    demo_input = args.work_dir / "demo" / "input"
    prep = Workspace(args.work_dir / "demo" / "output")
    rows = []
    if not args.table_only:
        make_demo(demo_input, prep.path, DEMO.n_users, DEMO.seed, DEMO_FOLD_FLAGS)
    for name, flags in VARIANTS.items():
        out = Workspace(args.work_dir / name.replace(" ", "_").replace("+", "plus"))
        if not args.table_only and name in args.variants:
            out = demo_variant(args.work_dir, prep, demo_input, name, flags)
        if bench_run(out).report.summary.exists():
            rows.append(demo_row(name, out))
    rows += kt_rows(args.kt_dir)
    report = Report("options", args.results)
    report.header(
        "bench/bench_options.py: read-out, past-event features, trees, blend",
        "torch",
        "sklearn",
    )
    report(markdown_table(HEADER, rows, "ll" + "r" * (len(HEADER) - 2)))
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
