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
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench import benchlib
from bench.benchlib import RECIPES, relative, run
from bench.kt import peer_scores
from bench.kt import run as kt_run
from bench.kt.peer_configs import DEFAULT_PEERS, PEERS, SIZES, peer_config, run_key
from bench.kt.peer_data import fold_splits, peer_fold_dir, write_fold_file
from bench.kt.plans import PLANS, Context, DatasetPlan, recipe_knobs
from common import recipe
from common.cli import guarded
from common.data.dataset import Dataset
from common.data.fold_data import load_fold_data
from common.errors import UserError
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
    size: str  # SIZES: our model's size, or pyKT's
    seq_len: int
    stride: int
    epochs: int
    patience: int
    threads: int
    device: str
    bootstrap: int
    sides: tuple[str, ...] = ("ours", "peers")
    trim: bool = True  # trimmed batches (pykt_peer --no-trim when False)


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


def our_model(ctx: Context) -> str:
    """The model --ours runs (bench.kt.run's --models; OUR_MODEL by default)."""
    return ctx.args.models[0]


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
    """pykt_peer.py for one peer at p.size on one fold, unless its result exists."""
    key = run_key(peer, p.size)
    out = peer_fold_dir(ctx, plan, k) / key
    if (out / "result.json").exists():
        return json.loads((out / "result.json").read_text())
    config = peer_config(peer, plan.preset, p.size)
    command = [
        str(p.python), str(Path(__file__).with_name("pykt_peer.py")), "--data", str(data),
        "--out-dir", str(out), "--model", peer, "--params", json.dumps(config.params),
        "--lr", str(config.lr), "--batch-size", str(config.batch_size),
        "--epochs", str(p.epochs), "--patience", str(p.patience), "--seq-len", str(p.seq_len),
        "--stride", str(p.stride), "--threads", str(p.threads), "--device", p.device,
    ]  # fmt: skip
    if not p.trim:
        command.append("--no-trim")
    log = peer_fold_dir(ctx, plan, k) / "logs" / f"{key}.log"
    clock = time.perf_counter()
    run(command, log, label=f"{plan.preset} fold {k} {key}")
    result = json.loads((out / "result.json").read_text())
    result.update(
        command=relative(shlex.join(command)), source=config.source, size=config.size, key=key
    )
    result["process_seconds"] = time.perf_counter() - clock
    write_json(out / "result.json", result)
    return result


def run_grid_fold(ctx: Context, plan: DatasetPlan, prep: Workspace, k: int, p: PeerArgs) -> None:
    """Ours, then every peer, on fold k (its peer data exported first: the tables read the
    fold's steps from it, whichever side runs)."""
    data = export_fold(ctx, plan, prep, k)
    if "ours" in p.sides:
        model = our_model(ctx)
        ours = kt_run.prepare_model_dir(ctx, plan, model, prep)
        print(f"{plan.preset} ({plan.split}) fold {k}: ours ({model})", flush=True)
        kt_run.run_fold(ctx, plan, model, ours, k)
    if "peers" not in p.sides:
        return
    for peer in p.peers:
        print(f"{plan.preset} ({plan.split}) fold {k}: {run_key(peer, p.size)}", flush=True)
        run_peer(ctx, plan, peer, data, k, p)


def ints(text: str) -> list[int]:
    try:
        return [int(k) for k in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of folds, got {text!r}") from None


def check_pykt(python: Path, peers: list[str]) -> str:
    """Before any training: the pyKT venv's python runs, imports pykt and holds every
    asked peer's model (pyKT's source for simpleKT, sparseKT, stableKT; PyPI's 0.0.38 has
    DKT, DKVMN, SAKT, SAINT and AKT); returns which pyKT it holds."""
    if not python.is_file():
        raise UserError(
            f"--pykt-python {relative(python)}: no such file; run scripts/setup_pykt_env.sh, "
            "or give the python of a venv with pyKT"
        )
    modules = sorted({MODULES[peer] for peer in peers})
    code = "import sys, pykt.models; " + "; ".join(f"import pykt.models.{m}" for m in modules)
    code += "; n = __import__('pathlib').Path(sys.prefix, 'pykt-source.txt'); "
    code += "print(n.read_text().strip() if n.exists() else 'pykt-toolkit (no source note)')"
    try:
        command = [str(python), "-c", code]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except OSError as error:
        raise UserError(f"--pykt-python {relative(python)}: cannot run it ({error})") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(
            f"--pykt-python {relative(python)} cannot import the models of --peers "
            f"{' '.join(peers)} ({last}); simpleKT, sparseKT and stableKT need pyKT's source: "
            "scripts/setup_pykt_env.sh with ../shared/peers/ present"
        )
    return done.stdout.strip()


# the pyKT module of each peer's class
MODULES = {peer: peer.split("_")[0] for peer in PEERS}


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, PeerArgs]:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--grid", nargs="+", choices=GRID_NAMES, default=GRID_NAMES)
    p.add_argument("--folds", type=ints, help="comma list (default: every fold of the split)")
    p.add_argument("--peers", nargs="+", choices=sorted(PEERS), default=list(DEFAULT_PEERS))
    size = "the peers' size: ours (d_model 64, 2 blocks, 4 heads) or pyKT's tuned or default"
    p.add_argument("--size", choices=SIZES, default="ours", help=size)
    venv = "python of a venv with pyKT (default: .venv-pykt's, made by "
    venv += "scripts/setup_pykt_env.sh)"
    p.add_argument("--pykt-python", type=Path, default=PYKT_PYTHON, help=venv)
    p.add_argument("--ours", default=OURS, help="bench.kt.run flags of our recipe")
    p.add_argument("--epochs", type=int, default=30, help="peers' epoch cap (pyKT: 200)")
    p.add_argument("--patience", type=int, default=5, help="peers' early stopping (pyKT: 10)")
    p.add_argument("--seq-len", type=int, default=200, help="pyKT's window (its seq_len)")
    p.add_argument("--stride", type=int, default=50, help="prediction windows' stride")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="the peers' torch device (cuda on a GPU)")
    pad = "peers pad every batch to --seq-len, as pyKT does (default: trimmed batches)"
    p.add_argument("--no-trim", dest="trim", action="store_false", help=pad)
    p.add_argument("--bootstrap", type=int, default=1000, help="paired resamples of students")
    p.add_argument("--work-dir", type=Path, default=benchlib.WORK / "kt")
    p.add_argument("--source-root", type=Path, default=benchlib.SHARED_DATA)
    where = "the tables' path without suffix (default: <work-dir>/kt_peers; the committed "
    where += "tables: bench/results/kt_peers)"
    p.add_argument("--results", type=Path, help=where)
    drop = "let the tables drop rows that --results holds and the work folder has not"
    p.add_argument("--replace", action="store_true", help=drop)
    sides = "run only our recipe or only the peers (two processes side by side); default both"
    p.add_argument("--only", choices=("ours", "peers"), help=sides)
    table = "train nothing: rewrite the tables from the finished folds"
    p.add_argument("--table-only", action="store_true", help=table)
    args = p.parse_args(argv)
    check_args(p, args)
    args.work_dir, args.source_root = args.work_dir.resolve(), args.source_root.resolve()
    if args.results is None:
        args.results = args.work_dir / "kt_peers"
    peer_args = PeerArgs(
        args.pykt_python, args.peers, args.size, args.seq_len, args.stride, args.epochs,
        args.patience, args.threads, args.device, args.bootstrap,
        (args.only,) if args.only else ("ours", "peers"), args.trim,
    )  # fmt: skip
    return args, peer_args


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, as argparse refuses (exit 2), flags out of range before any work."""
    for name in ("epochs", "patience", "seq_len", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: expected a positive integer")
    if not 1 <= args.stride < args.seq_len:
        p.error(f"--stride: expected 1 <= stride < --seq-len ({args.seq_len})")
    if args.folds is not None and min(args.folds) < 0:
        p.error(f"--folds: expected folds >= 0, got {args.folds}")
    if args.folds is not None:
        most = max(PLANS[d][s].n_folds for d, s in (n.split(":") for n in args.grid))
        beyond = sorted(k for k in args.folds if k >= most)
        if beyond:
            p.error(f"--folds {beyond[0]}: the splits of --grid have folds 0-{most - 1}")
    if args.bootstrap < 0:
        p.error("--bootstrap: expected 0 or more")
    if args.work_dir.exists() and not args.work_dir.is_dir():
        p.error(f"--work-dir {args.work_dir}: is a file, not a folder")
    if not args.table_only and not args.source_root.is_dir():
        p.error(f"--source-root {args.source_root}: no such folder (the KT data sets' files)")


def main(argv: list[str] | None = None) -> int:
    return guarded(lambda: run_bench(argv))


def run_bench(argv: list[str] | None) -> int:
    args, p = parse_args(argv)
    try:
        ctx = our_context(args)
    except SystemExit as error:  # bench.kt.run's parser refused a flag of --ours
        raise UserError(f"--ours {args.ours!r}: bench.kt.run refused it (above)") from error
    # the tables cover every split of the grid the work folder has finished, whatever
    # --grid runs now
    every = [PLANS[d][s] for d, s in GRID]
    plans = [PLANS[d][s] for d, s in (name.split(":") for name in args.grid)]
    if args.table_only:
        return write_tables(ctx, every, args, p.bootstrap, p.seq_len)
    if "peers" in p.sides:
        print(f"{relative(p.python)}: {check_pykt(p.python, p.peers)}", flush=True)
    for plan in plans:
        prep = kt_run.prepare_dataset(ctx, plan)
        for k in [k for k in (args.folds or range(plan.n_folds)) if k < plan.n_folds]:
            run_grid_fold(ctx, plan, prep, k, p)
            # the tables so far after each fold, without the bootstrap (minutes a table)
            try:
                peer_scores.write_tables(
                    ctx, every, our_model(ctx), args.results, 0, p.seq_len, args.replace
                )
            except UserError as error:  # said again, and refused, at the end
                print(f"tables not written yet: {error}", flush=True)
    return write_tables(ctx, every, args, p.bootstrap, p.seq_len)


def write_tables(ctx: Context, plans, args: argparse.Namespace, bootstrap: int, seq_len: int):
    """The tables at --results from every finished fold, printed."""
    text = peer_scores.write_tables(
        ctx, plans, our_model(ctx), args.results, bootstrap, seq_len, args.replace
    )
    print(text)
    print(f"wrote {relative(args.results.with_suffix('.csv'))} and .txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
