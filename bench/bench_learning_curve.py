"""Learning curve: the model, the boosted trees and their blend against the number of
training students, on one demo generator and the same held-out students at every size.

One demo of the largest size plus the held-out students (00, one seed); for each size, a
copy of train.csv with the held-out students and that many others (the smaller sizes'
students among the larger ones'), 01 on it, and 02 with the data set's own fold
(`--strategy dataset`: the held-out students are fold 0, wholly new to the model); then
per model variant 03 (the quick start's recipe, best.pt on an inner split of the training
students), 04 (which fits the trees on every training row, chooses the blend's weight on
the inner split and streams the blend) and 05 on fold 0.

    python -m bench.bench_learning_curve                      # 2k, 8k, 32k students
    python -m bench.bench_learning_curve --sizes 500,1000 --held-out 300 --epochs 2

03 trains the recipe's 5 epochs at every size (`--epochs`: one number for every size, or
one per size); best.pt is chosen among them on the inner split as always.

It writes bench/results/learning_curve.txt and learning_curve.png beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd

from bench.benchlib import (
    BENCH_RUN,
    RECIPES,
    SMALL_DATA_RECIPE,
    WORK,
    Report,
    bench_run,
    link_data,
    make_demo_input,
    recipe_flags,
    relative,
    results_flag,
    run,
    script,
)
from bench.fold_run import FoldRun, train_and_stream
from common.files import atomic_file
from common.model.trees.blending import BLEND
from common.model.trees.boosting import TREES
from common.tables import markdown_table
from common.train.config import TrainConfig
from common.workspace import Workspace

# every family (configs/demo_families.toml: SAINT as the quick start trains it, the LSTM
# and the LQ-RNN beside it): 04 stacks them with the trees
FAMILIES = recipe_flags(RECIPES / "demo_families.toml", "train", TrainConfig, ("fold", "progress"))
VARIANTS = {
    "model": [],
    "model + past features (head)": ["--past-features", "head"],
    "every family": list(FAMILIES),
}
SCORERS = ("model", TREES, BLEND)
MEMBERS = ("lstm", "lqrnn")  # the other families' AUCs (05's summary), where a run has them


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,8000,32000", help="training students")
    parser.add_argument("--held-out", type=int, default=2000, help="students scored")
    parser.add_argument(
        "--epochs",
        default="5",
        help="03's epochs, each at least 1: one for every size, or one per size",
    )
    parser.add_argument("--seed", type=int, default=0, help="the demo generator's seed")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--work-dir", type=Path, default=WORK / "learning_curve")
    results_flag(parser, "learning_curve")
    args = parser.parse_args(argv)
    try:
        args.sizes = sorted(int(size) for size in args.sizes.split(","))
        epochs = [int(n) for n in args.epochs.split(",")]
    except ValueError:
        parser.error("--sizes and --epochs take comma-separated whole numbers")
    if min(args.sizes) < 1:
        parser.error("--sizes: each size is at least 1 student")
    if len(epochs) == 1:
        epochs *= len(args.sizes)
    if len(epochs) != len(args.sizes) or min(epochs) < 1:
        parser.error(f"--epochs needs one positive number, or one per size ({len(args.sizes)})")
    args.epochs = dict(zip(args.sizes, epochs, strict=True))
    return args


def size_data(args: argparse.Namespace, users: list[int], size: int) -> Workspace:
    """01 and 02 of the held-out students and the first `size` others (skipped when
    done); returns their workspace. `users`: the demo's user ids, held-out ones first."""
    held_out, training = users[: args.held_out], users[args.held_out :][:size]
    folder = args.work_dir / f"students_{size}"
    out = Workspace(folder / "output")
    if out.folds.fold(0).exists():
        return out
    source = args.work_dir / "demo"
    input_dir = folder / "input"
    input_dir.mkdir(parents=True, exist_ok=True)
    train = pd.read_csv(source / "train.csv")
    kept = train[train["user_id"].isin(set(held_out + training))]
    kept.to_csv(input_dir / "train.csv", index=False)
    subset_truth(source, input_dir, kept["row_id"])
    for name in ("questions.csv", "lectures.csv"):
        (input_dir / name).write_bytes((source / name).read_bytes())
    pd.DataFrame({"user_id": held_out, "fold": 0}).to_csv(input_dir / "user_folds.csv", index=False)
    where = ("--input-dir", input_dir, "--output-dir", out.path)
    run(script("01_preprocess.py", *where, "--no-progress"))
    run(script("02_make_folds.py", *where, "--strategy", "dataset", "--n-folds", 1))
    return out


def subset_truth(source: Path, input_dir: Path, row_ids: pd.Series) -> None:
    """The demo's truth (demo_truth.csv) of the rows `row_ids` alone, as 05 reads it
    beside their train.csv (it refuses a truth of rows the data does not hold)."""
    truth = pd.read_csv(source / "demo_truth.csv")
    truth[truth["row_id"].isin(row_ids)].to_csv(input_dir / "demo_truth.csv", index=False)


def variant_scores(data: Workspace, name: str, flags: list[str]) -> dict[str, float]:
    """03, 04 and 05 of one variant on the held-out fold of the size's workspace `data`
    (skipped when done); the pooled AUC of each scorer and best.pt's epoch. `flags`
    follow the recipe's (the last wins)."""
    folder = data.path.parent
    variant = name.replace(" ", "_").replace("+", "plus").replace("(", "").replace(")", "")
    out = link_data(folder / variant, data)
    summary_path = bench_run(out).report.summary
    if not summary_path.exists():
        train_and_stream(FoldRun(out), [*SMALL_DATA_RECIPE, *flags], logs=out.path / "logs")
        where = ["--input-dir", folder / "input", "--output-dir", out.path, "--run", BENCH_RUN]
        run(script("05_evaluate.py", *where, "--bootstrap", 0, "--no-progress"))
    summary = json.loads(summary_path.read_text())
    members = summary.get("members", {})
    return {
        "best_epoch": FoldRun(out).best_checkpoint()["best_epoch"],
        "model": summary["auc"],
        TREES: summary["baselines"][TREES],
        BLEND: summary["blend_auc"],
        "oracle": summary["oracle_auc"],
        **{arch: members.get(arch, float("nan")) for arch in MEMBERS},
    }


def demo_users(args: argparse.Namespace) -> list[int]:
    """The demo of the largest size and the held-out students (made once); its user ids
    in the order the generator wrote them."""
    folder = args.work_dir / "demo"
    make_demo_input(folder, args.held_out + max(args.sizes), args.seed)
    users = pd.read_csv(folder / "train.csv", usecols=["user_id"])["user_id"]
    return list(pd.unique(users))


def plot(path: Path, table: pd.DataFrame) -> None:
    """AUC against training students (log scale), a line per variant and scorer."""
    figure, ax = plt.subplots(figsize=(6.5, 4.5))
    styles = {"model": "-o", TREES: "--s", BLEND: ":^"}
    trees_drawn = False
    for variant, rows in table.groupby("variant", sort=False):
        for scorer in SCORERS:
            if scorer == TREES and trees_drawn:
                continue  # the same trees whatever the model variant
            saint = "SAINT" if variant == "model" else f"SAINT ({variant})"
            names = {"model": saint, BLEND: f"blend of {variant} and trees"}
            label = names.get(scorer, "trees")
            ax.plot(rows["students"], rows[scorer], styles[scorer], label=label)
        for arch, style in zip(MEMBERS, ("-.v", "-.x"), strict=True):
            if rows[arch].notna().any():  # the run trained this family beside SAINT
                ax.plot(rows["students"], rows[arch], style, label=f"{arch} ({variant})")
        trees_drawn = True
    ax.set(xscale="log", xlabel="training students", ylabel="ROC AUC, held-out students")
    ax.set_xticks(sorted(table["students"].unique()))
    ax.set_xticklabels([f"{n:,}" for n in sorted(table["students"].unique())])
    ax.minorticks_off()
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    with atomic_file(path) as tmp:
        figure.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(figure)


def report_table(report: Report, table: pd.DataFrame) -> None:
    header = ["training students", "variant", "epochs (best.pt's)", "model", *MEMBERS, "trees"]
    header += ["blend", "model − trees", "blend − best single", "oracle"]
    body = []
    for row in table.itertuples(index=False):
        scores = row._asdict()
        model, trees, blend = (scores[k] for k in ("model", "trees", "blend"))
        epochs = f"{row.epochs} ({scores['best_epoch']})"
        members = ["—" if pd.isna(scores[a]) else f"{scores[a]:.4f}" for a in MEMBERS]
        best = max(model, trees, *(scores[a] for a in MEMBERS if not pd.isna(scores[a])))
        body.append(
            [f"{row.students:,}", row.variant, epochs, f"{model:.4f}", *members,
             f"{trees:.4f}", f"{blend:.4f}", f"{model - trees:+.4f}", f"{blend - best:+.4f}",
             f"{row.oracle:.4f}"]
        )  # fmt: skip
    report(markdown_table(header, body, "rl" + "r" * (len(header) - 2)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    users = demo_users(args)
    records = []
    for size in args.sizes:
        data = size_data(args, users, size)
        for name in args.variants:
            flags = [*VARIANTS[name], "--epochs", str(args.epochs[size])]
            scores = variant_scores(data, name, flags)
            record = {"students": size, "variant": name, "epochs": args.epochs[size]}
            records.append({**record, **scores})
    table = pd.DataFrame(records).rename(columns={TREES: "trees", BLEND: "blend"})
    report = Report("learning_curve", args.results)
    report.header("Learning curve: model, trees and blend (bench/bench_learning_curve.py)")
    report(
        f"{args.held_out:,} held-out students (new to every model), the same at every size; "
        f"demo seed {args.seed}; the quick start's recipe ({' '.join(SMALL_DATA_RECIPE)}) "
        "with the epochs of the table's column"
        + (
            "; every family: configs/demo_families.toml's"
            if "every family" in args.variants
            else ""
        )
    )
    report()
    report_table(report, table)
    figure = args.results.with_suffix(".png")
    plot(figure, table.rename(columns={"trees": TREES, "blend": BLEND}))
    report(f"\nfigure: {relative(figure)}")
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
