"""Training throughput: trained question interactions per second of full optimizer steps.

Measures Trainer.train_step (forward, loss, backward, clipping, AdamW, schedule) on the
batches 03 trains on (the first steps of epoch 1: spans of demo students, each after its
receptive field of context, batch_size windows' worth of trained questions per step),
after warm-up steps, as the median of repeats. A rate counts trained questions only (the
context before a span is computed but not counted). Reports model FLOPs per trained
interaction (torch's FlopCounterMode on one step), the machine's measured fp32 matmul
peak, and the share of that peak the training step reaches; and, over epoch 1's batches,
the positions computed per trained question (context and padding included) as this CPU's
part plan cuts them and as the CUDA plan would for an H200 (common.train.plan.PartPlan;
computed here, the plan needs no GPU).

    python -m bench.bench_train --data-dir output/demo --threads 2   # after ./run_demo.sh

The table goes to bench/results/train.txt.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.benchlib import H200_FREE_BYTES, REPO, WORK, Report, bench_run, results_flag
from common.data.fold_data import load_fold_data
from common.device import autocast_dtype
from common.model.predict import to_tensors
from common.model.saint import ModelConfig
from common.tables import markdown_table
from common.train.config import TrainConfig
from common.train.plan import PartPlan
from common.train.trainer import Trainer
from common.workspace import Workspace


def reference(**model) -> ModelConfig:
    """The issue's reference shape: 2+2 layers, 8 heads, window 100 (fields overridden)."""
    return ModelConfig(**{"d_model": 256, "n_heads": 8, "window": 100} | model)


CONFIGS = {
    # the reference size: d_model 256, 2+2 layers, window 100, batch 512
    "d256": TrainConfig(model=reference(), batch_size=512),
    # the same with pyKT SAINT's feed-forward width (d_ff = d_model): like-for-like FLOPs
    "d256-ff256": TrainConfig(model=reference(d_ff=256), batch_size=512),
    # and at batch 64, pyKT's fastest batch size on this machine
    "d256-ff256-b64": TrainConfig(model=reference(d_ff=256), batch_size=64),
    # the quick start's demo config (run_demo.sh)
    "demo": TrainConfig(model=reference(d_model=64, n_heads=4), batch_size=64),
}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device: torch.device, dtype: torch.dtype, repeats: int = 10) -> tuple[float, int]:
    """(measured matmul FLOP/s on `device` in `dtype`, the matrices' size): the roof the
    training share is of. 2048x2048 on a GPU; on a CPU 1024x1024 in fp32 (already at its
    BLAS peak: 2048 only takes 8x the seconds) and 512x512 in bf16 or fp16: a CPU without
    native bf16 runs it at about 1 GFLOP/s, where 2048 would take minutes."""
    size = 2048 if device.type == "cuda" else 1024 if dtype == torch.float32 else 512
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    synchronize(device)
    begin = time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronize(device)
    return 2 * size**3 * repeats / (time.perf_counter() - begin), size


def positions_per_trained(trainer: Trainer, device: torch.device, free_bytes: int) -> tuple:
    """(positions computed per trained question, parts per step) over epoch 1's batches,
    cut as `device` cuts them (PartPlan): every part padded to its longest sequence."""
    parts = PartPlan.for_device(trainer.setup.model_config, device, free_bytes=free_bytes)
    (_, start, begin, stop), steps = trainer.epoch_batches(0)
    computed = count = 0
    for index in steps:
        length = torch.as_tensor(stop[index] - start[index])
        groups = parts.groups(length)
        computed += parts.positions(length, groups)
        count += len(groups)
    trained = sum(int((stop[i] - begin[i]).sum()) for i in steps)
    return computed / trained, count / len(steps)


def timed_rates(trainer, batches: list, trained: list, args, device) -> list[float]:
    """Interactions/s of `args.steps` optimizer steps after `args.warmup`, per repeat."""
    rates = []
    for _ in range(args.repeats):
        for i in range(args.warmup):
            trainer.train_step(batches[i])
        synchronize(device)
        begin = time.perf_counter()
        for i in range(args.warmup, args.warmup + args.steps):
            trainer.train_step(batches[i])
        synchronize(device)
        rates.append(sum(trained[args.warmup :]) / (time.perf_counter() - begin))
    return rates


def measure(data, name: str, args: argparse.Namespace) -> dict:
    """Interactions/s of full optimizer steps (median of repeats), and FLOPs counted on
    one step of the uncompiled model (compiling does not change them)."""
    device = torch.device(args.device)
    config = replace(CONFIGS[name], progress=False, select_on="fold", amp=args.amp)
    out = bench_run(Workspace(args.work_dir / name))  # the Trainer's run: its folder alone
    counting = Trainer(replace(config, compile=False), out, data, device)
    spans, epoch = counting.epoch_batches(0)
    index = [epoch[i % len(epoch)] for i in range(args.steps + args.warmup)]  # repeated
    batches = [to_tensors(counting.batch_inputs(*spans, i), device) for i in index]
    trained = [int(b["trained"].sum()) for b in batches]
    with FlopCounterMode(display=False) as counter:
        counting.train_step(batches[0])
    flops_per_interaction = counter.get_total_flops() / trained[0]
    cpu_plan = positions_per_trained(counting, torch.device("cpu"), 0)
    # the CUDA plan for this GPU's free memory when run on one, else for an H200's
    free = None if device.type == "cuda" else H200_FREE_BYTES
    cuda_plan = positions_per_trained(counting, torch.device("cuda"), free)
    trainer = Trainer(config, out, data, device) if args.compile else counting
    rates = timed_rates(trainer, batches, trained, args, device)
    # with --compile, the uncompiled model's rate too, on the same batches (one process
    # measures both: bench/gpu_check.py reads them)
    eager = timed_rates(counting, batches, trained, args, device) if args.compile else rates
    return {
        "eager_rate": statistics.median(eager),
        "config": name,
        "d_model": config.model.d_model,
        "d_ff": config.model.d_ff,
        "layers": f"{config.model.encoder_layers}+{config.model.decoder_layers}",
        "batch_size": config.batch_size,
        "parameters": trainer.model.n_parameters(),
        "rate": statistics.median(rates),
        "rates": rates,
        "flops_per_interaction": flops_per_interaction,
        "cpu_plan": cpu_plan,
        "cuda_plan": cuda_plan,
    }


def table_row(name: str, r: dict, peak: float) -> list:
    """One config's row of the table."""
    share = r["rate"] * r["flops_per_interaction"] / peak
    repeats = ", ".join(f"{x:,.0f}" for x in r["rates"])
    size = [str(r["d_model"]), str(r["d_ff"]), r["layers"], str(r["batch_size"])]
    rate = [f"{r['rate']:,.0f}", repeats, f"{r['flops_per_interaction'] / 1e9:.4f}"]
    plans = [
        f"{ratio:.3f} ({parts:.1f} parts/step)" for ratio, parts in (r["cpu_plan"], r["cuda_plan"])
    ]
    return [name, *size, f"{r['parameters']:,}", *rate, f"{share:.0%}", *plans]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=REPO / "output" / "demo",
        help="an output dir with data/ and folds/ (fold 0 is used)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=torch.get_num_threads(),
        help="torch threads (default: this process's, %(default)s)",
    )
    parser.add_argument("--configs", default="d256,d256-ff256,demo")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work-dir", type=Path, default=WORK / "train")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--amp", choices=("off", "bf16", "fp16", "auto"), default="off")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    results_flag(parser, "train")
    args = parser.parse_args()
    say = Report("train", args.results)
    say.header("03_train.py training throughput (bench/bench_train.py)")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    compute = autocast_dtype(args.amp, device) or torch.float32  # "auto": the device's
    peak, peak_size = matmul_peak(device, compute)
    torch.manual_seed(0)
    data = load_fold_data(Workspace(args.data_dir), 0)
    say(f"threads     {args.threads}")
    say(f"device      {args.device}, amp {args.amp}, compile {args.compile}")
    say(f"matmul peak {peak / 1e9:.0f} GFLOP/s ({compute}, {peak_size}x{peak_size}, measured)")
    say(f"data        {args.data_dir}, fold 0")
    gpu = "this GPU's free memory" if device.type == "cuda" else "an H200's 139 GiB, on the CPU"
    say(f"CUDA plan   parts sized for {gpu}")
    header = ["config", "d_model", "d_ff", "layers", "batch", "params"]
    header += ["interactions/s (median)", "repeats", "GFLOP/interaction", "share of matmul peak"]
    header += ["positions per trained question: CPU plan", "CUDA plan"]
    rows = []
    for name in args.configs.split(","):
        r = measure(data, name, args)
        say(f"{name}: {r['rate']:,.0f} interactions/s")
        if args.compile:
            say(f"{name}: eager {r['eager_rate']:,.0f} interactions/s")
        ratio, parts = r["cuda_plan"]
        say(
            f"{name}: CUDA plan {ratio:.3f} positions per trained question ({parts:.1f} parts/step)"
        )
        rows.append(table_row(name, r, peak))
    say()
    say(markdown_table(header, rows, "lrrrrrrlrrrr").rstrip("\n"))
    say.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
