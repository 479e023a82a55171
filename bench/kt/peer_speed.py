"""What trimmed batches save: one training epoch and one inner-split prediction of each
pyKT peer, padded to pyKT's window of 200 steps and trimmed (windows of similar length
batched together, each batch cut at its longest), from the same initial weights, on one
fold of the KT peers benchmark (bench/kt/peers.py, whose work folder holds the fold).

    python -m bench.kt.peers ... (or any run that exported the fold), then
    python -m bench.kt.peer_speed --grid assist2015:unseen5 --fold 0 --threads 1

Each peer runs in pyKT's venv (bench/kt/pykt_trim.py --check-trim, then --time-epochs):
first the check that trimmed and padded predictions agree within 1e-5 on real batches of
the fold, then the timing. Results: one speed.json per peer under the fold's peers/speed/
(a finished peer is skipped: restartable), the table at --results
(bench/results/kt_peer_speed.txt with the default grid and fold).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from bench import benchlib
from bench.benchlib import Report, relative, run
from bench.kt.peer_configs import DEFAULT_PEERS, PEERS, SIZES, peer_config, run_key, run_name
from bench.kt.peer_data import peer_fold_dir
from bench.kt.peers import GRID_NAMES, PYKT_PYTHON, check_pykt, our_context
from bench.kt.plans import PLANS
from common.cli import guarded
from common.errors import UserError

PYKT_TRIM = Path(__file__).with_name("pykt_trim.py")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--grid", choices=GRID_NAMES, default="assist2015:unseen5")
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--peers", nargs="+", choices=sorted(PEERS), default=list(DEFAULT_PEERS))
    p.add_argument("--size", choices=SIZES, default="ours")
    p.add_argument("--threads", type=int, default=1)
    share = "time this share of each epoch's windows, each way (pykt_peer --time-share)"
    p.add_argument("--time-share", type=float, default=1.0, help=share)
    p.add_argument("--device", default="cpu")
    p.add_argument("--pykt-python", type=Path, default=PYKT_PYTHON)
    p.add_argument("--work-dir", type=Path, default=benchlib.WORK / "kt")
    p.add_argument("--results", type=Path, help="default bench/results/kt_peer_speed.txt")
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error("--threads: expected a positive integer")
    args.work_dir = args.work_dir.resolve()
    if args.results is None:
        args.results = benchlib.RESULTS / "kt_peer_speed.txt"
    return args


def peer_command(args, data: Path, peer: str, config, *mode: str) -> list[str]:
    return [
        str(args.pykt_python), str(PYKT_TRIM), "--data", str(data), "--model", peer,
        "--params", json.dumps(config.params), "--lr", str(config.lr),
        "--batch-size", str(config.batch_size), "--threads", str(args.threads),
        "--device", args.device, *mode,
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return guarded(lambda: measure(parse_args(argv)))


def peer_speed(args: argparse.Namespace, fold_dir: Path, peer: str, config) -> dict:
    """The peer's speed.json (pykt_trim.py's check, then its timing), run unless it exists,
    with the check's line."""
    key = run_key(peer, args.size)
    out, logs = fold_dir / "speed" / key, fold_dir / "logs"
    data = fold_dir / "data.npz"
    if not (out / "speed.json").exists():
        run(peer_command(args, data, peer, config, "--check-trim", "--out-dir", str(out)),
            logs / f"{key}_check.log", label=f"{key} check")  # fmt: skip
        check = (logs / f"{key}_check.log").read_text().strip().splitlines()[-1]
        timing = ["--time-epochs", "--time-share", str(args.time_share)]
        run(peer_command(args, data, peer, config, *timing, "--out-dir", str(out)),
            logs / f"{key}_speed.log", label=f"{key} timing")  # fmt: skip
        record = json.loads((out / "speed.json").read_text())
        record["check"] = check
        (out / "speed.json").write_text(json.dumps(record, indent=2) + "\n")
    return json.loads((out / "speed.json").read_text())


def measure(args: argparse.Namespace) -> int:
    dataset, split = args.grid.split(":")
    plan = PLANS[dataset][split]
    if not 0 <= args.fold < plan.n_folds:
        raise UserError(f"--fold {args.fold}: {args.grid} has folds 0-{plan.n_folds - 1}")
    ctx = our_context(argparse.Namespace(
        ours=shlex.join(["--models", "saint"]), work_dir=args.work_dir,
        source_root=benchlib.SHARED_DATA,
    ))  # fmt: skip
    fold_dir = peer_fold_dir(ctx, plan, args.fold)
    data = fold_dir / "data.npz"
    if not data.exists():
        raise UserError(
            f"{relative(data)}: not exported yet; run python -m bench.kt.peers --grid "
            f"{args.grid} --folds {args.fold} first (it exports every fold it runs)"
        )
    print(f"{relative(args.pykt_python)}: {check_pykt(args.pykt_python, args.peers)}")
    report = Report("kt_peer_speed", args.results)
    report.header(f"Trimmed batches: the KT peers on {args.grid} fold {args.fold}", "torch")
    report(
        "| peer | size | check: largest difference | share of the epoch timed | padded epoch s "
        "| trimmed epoch s | epoch speed-up | padded inner s | trimmed inner s | inner speed-up |"
    )
    report("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for peer in args.peers:
        config = peer_config(peer, plan.preset, args.size)
        r = peer_speed(args, fold_dir, peer, config)
        largest = r["check"].split("largest difference ")[1].split(" ")[0]
        report(
            f"| {run_name(run_key(peer, args.size))} | {config.size} | {largest} "
            f"| {r.get('time_share', 1.0):g} | {r['padded_train_seconds']:.0f} "
            f"| {r['trimmed_train_seconds']:.0f} "
            f"| {r['train_speedup']:.1f}x | {r['padded_inner_seconds']:.0f} "
            f"| {r['trimmed_inner_seconds']:.0f} | {r['inner_speedup']:.1f}x |"
        )
    report()
    report(f"{args.threads} thread(s) each; both timings in one process, padded first, from "
           "the same weights and the same draw of batches' order; an epoch timed on a share "
           "of its windows is scaled up to the whole epoch.")  # fmt: skip
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
