"""Training throughput: trained question interactions per second of full optimizer steps.

Measures Trainer.train_step (forward, loss, backward, clipping, AdamW, schedule) on the
batches 03 trains on (the first steps of epoch 1: spans of demo students, each after its
receptive field of context, batch_size windows' worth of trained questions per step),
after warm-up steps, as the median of repeats. A rate counts trained questions only (the
context before a span is computed but not counted). Reports model FLOPs per trained
interaction (torch's FlopCounterMode on one step), the machine's measured fp32 matmul
peak, and the share of that peak the training step reaches.

    python bench/bench_train.py --data-dir output/demo --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.files import cpu_model
from common.folds import load_fold_data
from common.predict import to_tensors
from common.training import TrainConfig, Trainer

CONFIGS = {
    # the issue's reference size: d_model 256, 2+2 layers, window 100, batch 512
    "d256": dict(d_model=256, layers=2, heads=8, window=100, batch_size=512),
    # the same with pyKT SAINT's feed-forward width (d_ff = d_model): like-for-like FLOPs
    "d256-ff256": dict(d_model=256, d_ff=256, layers=2, heads=8, window=100, batch_size=512),
    # and at batch 64, pyKT's fastest batch size on this machine
    "d256-ff256-b64": dict(d_model=256, d_ff=256, layers=2, heads=8, window=100, batch_size=64),
    # the quick start's demo config (run_demo.sh)
    "demo": dict(d_model=64, layers=2, heads=4, window=100, batch_size=64),
}


def matmul_peak(threads: int, size: int = 2048, repeats: int = 10) -> float:
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(3):
        a @ b
    begin = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - begin)


def measure(data, name: str, steps: int, warmup: int, repeats: int, out: Path) -> dict:
    config = TrainConfig(progress=False, select_on="fold", **CONFIGS[name])
    trainer = Trainer(config, out / name, data, torch.device("cpu"))
    spans, epoch = trainer.epoch_batches(0)
    index = [epoch[i % len(epoch)] for i in range(steps + warmup)]  # repeated if short
    cpu = torch.device("cpu")
    batches = [to_tensors(trainer.batch_inputs(*spans, i), cpu) for i in index]
    trained = [int(b["trained"].sum()) for b in batches]
    with FlopCounterMode(display=False) as counter:
        trainer.train_step(batches[0])
    flops_per_interaction = counter.get_total_flops() / trained[0]
    rates = []
    for _ in range(repeats):
        for i in range(warmup):
            trainer.train_step(batches[i])
        begin = time.perf_counter()
        for i in range(warmup, warmup + steps):
            trainer.train_step(batches[i])
        rates.append(sum(trained[warmup:]) / (time.perf_counter() - begin))
    return {
        "config": name,
        **CONFIGS[name],
        "parameters": trainer.model.n_parameters(),
        "d_ff": trainer.model.config.d_ff,
        "rate": statistics.median(rates),
        "rates": rates,
        "flops_per_interaction": flops_per_interaction,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path("output/demo"),
        help="an output dir with data/ and folds/ (fold 0 is used)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--configs", default="d256,d256-ff256,demo")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work-dir", type=Path, default=Path("bench/out/train"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    peak = matmul_peak(args.threads)
    torch.manual_seed(0)
    data = load_fold_data(args.data_dir, 0)
    cpu = cpu_model()
    print(f"machine: {cpu}; torch {torch.__version__}, {args.threads} threads")
    print(f"measured fp32 matmul peak (2048x2048 sgemm): {peak / 1e9:.0f} GFLOP/s")
    print(f"command: {' '.join(sys.argv)}")
    print()
    print(
        "| config | d_model | d_ff | layers | batch | params | interactions/s (median) | "
        "repeats | GFLOP/interaction | share of matmul peak |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for name in args.configs.split(","):
        r = measure(data, name, args.steps, args.warmup, args.repeats, args.work_dir)
        share = r["rate"] * r["flops_per_interaction"] / peak
        repeats = ", ".join(f"{x:,.0f}" for x in r["rates"])
        print(
            f"| {name} | {r['d_model']} | {r['d_ff']} | {r['layers']}+{r['layers']} | "
            f"{r['batch_size']} | {r['parameters']:,} | {r['rate']:,.0f} | {repeats} | "
            f"{r['flops_per_interaction'] / 1e9:.4f} | {share:.0%} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
