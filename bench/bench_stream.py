"""Streaming inference throughput: question rows per second through 04_infer.py.

Builds (once) a demo of --users students, 01 -> 02 with the virtual-time strategy (tito's
scheme from the competition: the last 2.5% of rows by virtual time form a stream that
interleaves many students, like the hidden test; or streams the workspace --data-dir made
the same way), then for each model size writes a
checkpoint with freshly initialized weights (speed does not depend on the weights) and
runs the real 04_infer.py on fold 0, which streams every validation group through the API
emulator with state updates, one batched forward pass per group, in groups of 18 to 33
rows as in the real example test (--group-rows). Reports rows/s, rows per group, state
memory, and the projected time for the competition's 2.5M rows.

    python -m bench.bench_stream --threads 2       # the table: bench/results/stream.txt
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from bench.benchlib import WORK, Report, bench_fold, link_data, make_demo, results_flag, run, script
from common.data.fold_data import fold_fingerprint, load_fold_data
from common.model.checkpoint import save_model
from common.model.saint import SAINT, ModelConfig
from common.tables import markdown_table
from common.workspace import Workspace

CONFIGS = {
    "demo": dict(d_model=64, n_heads=4, encoder_layers=2, decoder_layers=2),
    "d256": dict(d_model=256, n_heads=8, encoder_layers=2, decoder_layers=2),
}
TEST_ROWS = 2_500_000  # question rows in the competition's hidden test
# 02's virtual-time split: the last 2.5% of rows, many students interleaved
STREAM_SPLIT = ("--strategy", "virtual-time", "--n-folds", "1", "--valid-share", "0.025")


def measure(data: Workspace, work: Path, name: str, args: argparse.Namespace, say: Report):
    """04_infer.py on fold 0 of the workspace `data` (linked into one of its own) with a
    fresh checkpoint of model size `name`: its summary."""
    out = link_data(work / f"stream_{name}", data)
    n_questions = load_fold_data(data, 0).n_questions
    torch.manual_seed(0)
    config = ModelConfig(n_questions=n_questions, window=args.window, **CONFIGS[name])
    model = SAINT(config)
    fingerprint = fold_fingerprint(data, 0)
    folder = bench_fold(out)
    save_model(folder.checkpoint(), model, epoch=0, fold_fingerprint=fingerprint)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    flags = ["--output-dir", out.path, "--fold", "0", "--no-progress", "--no-export"]
    flags += ["--group-rows", args.group_rows, *args.extra]
    run(script("04_infer.py", *flags), env=env, say=say)
    summary = json.loads(folder.stream_summary.read_text())
    summary["parameters"] = model.n_parameters()
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--threads",
        type=int,
        default=torch.get_num_threads(),
        help="04's torch threads (default: this process's, %(default)s)",
    )
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--configs", default="demo,d256")
    parser.add_argument(
        "--group-rows",
        default="18,33",
        help="rows per emulated group, MIN,MAX (default %(default)s: the real example's)",
    )
    parser.add_argument("--work-dir", type=Path, default=WORK)
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="a workspace through 02 (split as STREAM_SPLIT says) to stream instead of a demo",
    )
    results_flag(parser, "stream")
    parser.add_argument("extra", nargs="*", help="passed on to 04_infer.py (after --)")
    args = parser.parse_args()
    if args.data_dir is not None and not Workspace(args.data_dir).folds.fold(0).exists():
        parser.error(f"--data-dir {args.data_dir}: no fold 0 there (run 02_make_folds.py)")
    say = Report("stream", args.results)
    say.header("04_infer.py streaming throughput (bench/bench_stream.py)")
    if args.data_dir is not None:
        data_out = Workspace(args.data_dir)
    else:
        data = args.work_dir / f"demo{args.users}"
        data_out = make_demo(
            data / "input", data / "out", args.users, args.seed, STREAM_SPLIT, say=say
        )
    header = ["model", "params", "question rows", "groups", "rows/group", "rows/s"]
    header += ["cache builds", "state bytes/student (ring + cache)", "2.5M rows would take"]
    rows = []
    for name in args.configs.split(","):
        s = measure(data_out, args.work_dir, name, args, say)
        state, minutes = s["state_bytes_per_student"], TEST_ROWS / s["rows_per_s"] / 60
        cells = [f"{s[key]:,}" for key in ("parameters", "rows", "groups")]
        cells += [f"{s['rows'] / s['groups']:.0f}", f"{s['rows_per_s']:,.0f}"]
        cells += [f"{s['cache_builds']:,}", f"{state['ring']:,} + {state['cache']:,}"]
        rows.append([name, *cells, f"{minutes:.0f} min"])
    say()
    say(markdown_table(header, rows).rstrip("\n"))
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
