"""Streaming inference throughput: question rows per second through 04_infer.py.

Builds (once) a demo of --users students, 01 -> 02 with the virtual-time strategy (tito's
scheme from the competition: the last 2.5% of rows by virtual time form a stream that
interleaves many students, like the hidden test), then for each model size writes a
checkpoint with freshly initialized weights (speed does not depend on the weights) and
runs the real 04_infer.py on fold 0, which streams every validation group through the API
emulator with state updates, one batched forward pass per group. Reports rows/s, rows
per group, state memory, and the projected time for the competition's 2.5M rows.

    python bench/bench_stream.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common.checkpoint import save_checkpoint  # noqa: E402
from common.folds import fold_fingerprint, load_fold_data  # noqa: E402
from common.model import SAINT, ModelConfig  # noqa: E402

CONFIGS = {
    "demo": dict(d_model=64, n_heads=4, encoder_layers=2, decoder_layers=2),
    "d256": dict(d_model=256, n_heads=8, encoder_layers=2, decoder_layers=2),
}
TEST_ROWS = 2_500_000  # question rows in the competition's hidden test


def run(command: list[str], env: dict | None = None) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, cwd=REPO, check=True, env=env)


def prepare_data(work: Path, users: int, seed: int) -> Path:
    data = work / f"demo{users}"
    if not (data / "out" / "folds" / "fold0.npz").exists():
        python = sys.executable
        run([python, "00_make_demo_input.py", "--users", str(users), "--seed", str(seed),
             "--output-dir", str(data / "input")])  # fmt: skip
        run([python, "01_preprocess.py", "--input-dir", str(data / "input"),
             "--output-dir", str(data / "out"), "--no-progress"])  # fmt: skip
        run([python, "02_make_folds.py", "--output-dir", str(data / "out"),
             "--strategy", "virtual-time", "--n-folds", "1", "--valid-share", "0.025"])  # fmt: skip
    return data / "out"


def measure(data_out: Path, work: Path, name: str, threads: int, window: int, extra: list[str]):
    out = work / f"stream_{name}"
    out.mkdir(parents=True, exist_ok=True)
    for link in ("data", "folds"):
        if not (out / link).exists():
            os.symlink(data_out.resolve() / link, out / link)
    n_questions = load_fold_data(data_out, 0).n_questions
    torch.manual_seed(0)
    config = ModelConfig(n_questions=n_questions, window=window, **CONFIGS[name])
    model = SAINT(config)
    save_checkpoint(
        out / "fold0" / "best.pt",
        {
            "model_config": config.to_dict(),
            "model_state": model.state_dict(),
            "epoch": 0,
            "fold_fingerprint": fold_fingerprint(data_out, 0),
        },
    )
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    run([sys.executable, "04_infer.py", "--output-dir", str(out), "--fold", "0",
         "--no-progress", "--no-export", *extra], env)  # fmt: skip
    summary = json.loads((out / "fold0" / "stream_summary.json").read_text())
    summary["parameters"] = model.n_parameters()
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--configs", default="demo,d256")
    parser.add_argument("--work-dir", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("extra", nargs="*", help="passed on to 04_infer.py (after --)")
    args = parser.parse_args()
    data_out = prepare_data(args.work_dir, args.users, args.seed)
    rows = []
    for name in args.configs.split(","):
        rows.append(
            (name, measure(data_out, args.work_dir, name, args.threads, args.window, args.extra))
        )
    print()
    print(f"command: {' '.join(sys.argv)}")
    print(
        "| model | params | question rows | groups | rows/group | rows/s | cache builds | "
        "state bytes/student (ring + cache) | 2.5M rows would take |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, s in rows:
        state = s["state_bytes_per_student"]
        hours = TEST_ROWS / s["rows_per_s"] / 3600
        print(
            f"| {name} | {s['parameters']:,} | {s['rows']:,} | {s['groups']:,} | "
            f"{s['rows'] / s['groups']:.0f} | {s['rows_per_s']:,.0f} | {s['cache_builds']:,} | "
            f"{state['ring']:,} + {state['cache']:,} | {hours * 60:.0f} min |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
