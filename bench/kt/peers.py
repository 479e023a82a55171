"""Peers on the same rows: pyKT's models trained on our KT folds and scored on exactly
the rows our model is scored on, beside our model, the boosted trees and the blend.

    scripts/setup_pykt_env.sh && python -m bench.kt.peers     # full grid (.venv-pykt's pyKT)
    python -m bench.kt.peers --grid assist2015:unseen5 --folds 0,1 --peers dkt akt
    python -m bench.kt.peers --table-only        # rewrite the tables from finished folds

Per data set and fold: our recipe (bench.kt.run with --ours' flags: trained with 03,
best.pt chosen on 03's inner split, streamed through the API emulator by 04, which fits
the trees and the blend) runs first, or is read back when finished. Then each pyKT peer
(bench/kt/pykt_peer.py in pyKT's own venv, pykt-toolkit 0.0.38 from PyPI) trains on the
fold's training students less 03's inner split (the same students, load_fold_data with
our run's inner share and seed), picks its epoch on that inner split, and predicts each
scored row from the student's earlier steps (windows of --seq-len, --stride; see
pykt_peer). Everything a fold finishes is written at once under --work-dir
(restartable); a finished fold is skipped.

Scoring (bench/kt/peer_scores.py): every model on the same rows, those every peer
predicts: the fold's streamed question rows less each student's first step (no pyKT
model predicts a first step); AUC per fold (mean ± std over the folds run) and pooled,
and a paired bootstrap over students of each peer's AUC against our model's and our
blend's on the pooled rows. Tables: bench/results/kt_peers.csv (one row per data set,
split and model) and bench/results/kt_peers.txt.

Data sets: assist2009_pid with --multi-skill-rows bundle (leak-free: a problem's rows
share its container, none sees the answer of its own attempt), AKT's 5 folds;
assist2015, 5 folds of new students (seed 0); and pyKT's own assist2015 split (one fold:
its test.csv students).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench import benchlib
from bench.benchlib import RECIPES, relative, run
from bench.kt import peer_scores
from bench.kt import run as kt_run
from bench.kt.peer_configs import DEFAULT_PEERS, PEERS, peer_config
from bench.kt.peer_data import fold_splits, peer_fold_dir, write_fold_file
from bench.kt.plans import PLANS, Context, DatasetPlan, recipe_knobs
from common import recipe
from common.data.dataset import Dataset
from common.data.fold_data import load_fold_data
from common.files import write_json
from common.workspace import Workspace

# our recipe for the public data sets (README; configs/assist2009_pid.toml, whose model is
# MODEL_FLAGS[OUR_MODEL], tests/test_recipes.py): SAINT with Rasch skill embeddings, AKT's
# read-out and the trees' past-event features in a head, the recipe's training settings
# and rows (leak-free: bundle); best.pt chosen on the inner split
OUR_MODEL = "saint-rasch-readout-past-head"
OUR_RECIPE = RECIPES / "assist2009_pid.toml"
OURS = shlex.join(["--models", OUR_MODEL, *recipe_knobs(OUR_RECIPE), "--checkpoint", "best"])
OUR_ROWS = recipe.read_table(OUR_RECIPE, "convert")["multi_skill_rows"]
PYKT_PYTHON = benchlib.REPO / ".venv-pykt" / "bin" / "python"
# (data set, split) of the grid: leak-free rows first
GRID = (("assist2009_pid", "akt5"), ("assist2015", "unseen5"), ("assist2015", "pykt"))
GRID_NAMES = [f"{d}:{s}" for d, s in GRID]


@dataclass
class PeerArgs:
    """What the peers' side of a run needs besides our context."""

    python: Path
    peers: list[str]
    seq_len: int
    stride: int
    epochs: int
    patience: int
    threads: int
    device: str
    bootstrap: int
    sides: tuple[str, ...] = ("ours", "peers")


def our_context(args: argparse.Namespace) -> Context:
    """bench.kt.run's context for our recipe, on the recipe's (leak-free) rows."""
    argv = [
        *shlex.split(args.ours),
        "--multi-skill-rows",
        OUR_ROWS,
        "--work-dir",
        str(args.work_dir),
    ]
    argv += ["--source-root", str(args.source_root)]
    ctx, *_ = kt_run.parse_args(argv)
    return ctx


def export_fold(ctx: Context, plan: DatasetPlan, prep: Workspace, k: int) -> Path:
    """The fold's npz for the peers (fold k of the prep workspace), cut with our run's
    inner share and seed."""
    path = peer_fold_dir(ctx, plan, k) / "data.npz"
    if path.exists():
        return path
    train = ctx.settings.train
    dataset = Dataset.of(prep)
    data = load_fold_data(prep, k, inner_share=train.inner_share, seed=train.seed)
    splits, meta = fold_splits(dataset, data)
    meta.update(
        dataset=plan.preset,
        split=plan.split,
        fold=k,
        inner_share=train.inner_share,
        seed=train.seed,
    )
    write_fold_file(path, splits, meta)
    return path


def run_peer(ctx: Context, plan: DatasetPlan, peer: str, data: Path, k: int, p: PeerArgs) -> dict:
    """pykt_peer.py for one peer on one fold, unless its result exists."""
    out = peer_fold_dir(ctx, plan, k) / peer
    if (out / "result.json").exists():
        return json.loads((out / "result.json").read_text())
    if not p.python.exists():
        raise SystemExit(
            f"{relative(out)} is not finished and {relative(p.python)} does not exist: run "
            "scripts/setup_pykt_env.sh, or give --pykt-python"
        )
    config = peer_config(peer, plan.preset)
    command = [
        str(p.python), str(Path(__file__).with_name("pykt_peer.py")), "--data", str(data),
        "--out-dir", str(out), "--model", peer, "--params", json.dumps(config.params),
        "--lr", str(config.lr), "--batch-size", str(config.batch_size),
        "--epochs", str(p.epochs), "--patience", str(p.patience), "--seq-len", str(p.seq_len),
        "--stride", str(p.stride), "--threads", str(p.threads), "--device", p.device,
    ]  # fmt: skip
    log = peer_fold_dir(ctx, plan, k) / "logs" / f"{peer}.log"
    clock = time.perf_counter()
    run(command, log, label=f"{plan.preset} fold {k} {peer}")
    result = json.loads((out / "result.json").read_text())
    result.update(command=relative(shlex.join(command)), source=config.source)
    result["process_seconds"] = time.perf_counter() - clock
    write_json(out / "result.json", result)
    return result


def run_grid_fold(ctx: Context, plan: DatasetPlan, prep: Workspace, k: int, p: PeerArgs) -> None:
    """Ours, then every peer, on fold k (its peer data exported first: the tables read the
    fold's steps from it, whichever side runs)."""
    data = export_fold(ctx, plan, prep, k)
    if "ours" in p.sides:
        ours = kt_run.prepare_model_dir(ctx, plan, OUR_MODEL, prep)
        print(f"{plan.preset} ({plan.split}) fold {k}: ours", flush=True)
        kt_run.run_fold(ctx, plan, OUR_MODEL, ours, k)
    if "peers" not in p.sides:
        return
    for peer in p.peers:
        print(f"{plan.preset} ({plan.split}) fold {k}: {peer}", flush=True)
        run_peer(ctx, plan, peer, data, k, p)


def ints(text: str) -> list[int]:
    return [int(k) for k in text.split(",")]


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, PeerArgs]:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--grid", nargs="+", choices=GRID_NAMES, default=GRID_NAMES)
    p.add_argument("--folds", type=ints, help="comma list (default: every fold of the split)")
    p.add_argument("--peers", nargs="+", choices=sorted(PEERS), default=list(DEFAULT_PEERS))
    venv = "python of a venv with pykt-toolkit 0.0.38 (default: .venv-pykt's, made by "
    venv += "scripts/setup_pykt_env.sh)"
    p.add_argument("--pykt-python", type=Path, default=PYKT_PYTHON, help=venv)
    p.add_argument("--ours", default=OURS, help="bench.kt.run flags of our recipe")
    p.add_argument("--epochs", type=int, default=30, help="peers' epoch cap (pyKT: 200)")
    p.add_argument("--patience", type=int, default=5, help="peers' early stopping (pyKT: 10)")
    p.add_argument("--seq-len", type=int, default=200, help="pyKT's window (its seq_len)")
    p.add_argument("--stride", type=int, default=50, help="prediction windows' stride")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="the peers' torch device (cuda on a GPU)")
    p.add_argument("--bootstrap", type=int, default=1000, help="paired resamples of students")
    p.add_argument("--work-dir", type=Path, default=benchlib.WORK / "kt")
    p.add_argument("--source-root", type=Path, default=benchlib.SHARED_DATA)
    p.add_argument("--results", type=Path, default=benchlib.RESULTS / "kt_peers")
    sides = "run only our recipe or only the peers (two processes side by side); default both"
    p.add_argument("--only", choices=("ours", "peers"), help=sides)
    table = "train nothing: rewrite the tables from the finished folds"
    p.add_argument("--table-only", action="store_true", help=table)
    args = p.parse_args(argv)
    for name in ("epochs", "patience", "seq_len", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: expected a positive integer")
    if not 1 <= args.stride < args.seq_len:
        p.error(f"--stride: expected 1 <= stride < --seq-len ({args.seq_len})")
    if args.folds is not None and min(args.folds) < 0:
        p.error(f"--folds: expected folds >= 0, got {args.folds}")
    if args.bootstrap < 0:
        p.error("--bootstrap: expected 0 or more")
    args.work_dir, args.source_root = args.work_dir.resolve(), args.source_root.resolve()
    peer_args = PeerArgs(
        args.pykt_python, args.peers, args.seq_len, args.stride, args.epochs, args.patience,
        args.threads, args.device, args.bootstrap,
        (args.only,) if args.only else ("ours", "peers"),
    )  # fmt: skip
    return args, peer_args


def main(argv: list[str] | None = None) -> int:
    args, p = parse_args(argv)
    ctx = our_context(args)
    plans = [PLANS[d][s] for d, s in (name.split(":") for name in args.grid)]
    for plan in plans:
        prep = kt_run.prepare_dataset(ctx, plan)
        for k in [k for k in (args.folds or range(plan.n_folds)) if k < plan.n_folds]:
            if args.table_only:  # the steps of every fold ours or a peer finished
                export_fold(ctx, plan, prep, k)
                continue
            run_grid_fold(ctx, plan, prep, k, p)
            # the tables so far after each fold, without the bootstrap (minutes a table)
            peer_scores.write_tables(ctx, plans, OUR_MODEL, args.results, 0, p.seq_len)
    text = peer_scores.write_tables(ctx, plans, OUR_MODEL, args.results, p.bootstrap, p.seq_len)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
