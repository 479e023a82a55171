"""Training throughput of pyKT's SAINT (PyPI `pykt-toolkit`) on random data, CPU.

Reference point for our own SAINT benchmark (bench/bench_train.py). Runs in a separate venv
that has pykt-toolkit, a CPU torch and this project (bench/benchlib.py imports common):

    python3 -m venv <dir>-venv
    <dir>-venv/bin/pip install torch==2.13.0
    <dir>-venv/bin/pip install --no-deps pykt-toolkit
    <dir>-venv/bin/pip install numpy pandas scikit-learn
    <dir>-venv/bin/pip install --no-deps -e .          # from the repository root
    <dir>-venv/bin/python -m bench.pykt_saint_throughput --batch-sizes 64 512   # from the root

One timed step is exactly pyKT's training step: `pykt.models.train_model.model_forward`
(SAINT forward + BCE on all masked positions, as in pyKT's train loop), then
zero_grad / backward / Adam step. Random windows of `--seq-len` interactions,
every position valid. pyKT's dataloader splits a window of L interactions into
L-1 "current" and L-1 "shifted" positions, so SAINT sees L questions and L-1
responses and the loss covers L-1 predictions; throughput counts L per window:
interactions/s = batch * seq_len * steps / seconds. The output goes to
bench/results/pykt_saint.txt.
"""

import argparse
import statistics
import time

import torch
from pykt.models.train_model import model_forward

from bench.benchlib import Report, load_average, results_flag
from bench.pykt_saint_epoch import pykt_saint

NUM_Q, NUM_C = 13523, 188  # Riiid question / skill vocabulary sizes


def random_batch(batch, seq_len, gen):
    """A batch in the dict format of pyKT's KTDataset (all positions valid)."""
    q = torch.randint(0, NUM_Q, (batch, seq_len), generator=gen)
    c = torch.randint(0, NUM_C, (batch, seq_len), generator=gen)
    r = torch.randint(0, 2, (batch, seq_len), generator=gen)
    t = torch.zeros(batch, seq_len, dtype=torch.long)
    mask = torch.ones(batch, seq_len - 1, dtype=torch.bool)
    data = {"masks": mask, "smasks": mask}
    for name, x in (("qseqs", q), ("cseqs", c), ("rseqs", r), ("tseqs", t)):
        data[name], data["shft_" + name] = x[:, :-1], x[:, 1:]
    return data


def train_step(model, opt, data):
    loss = model_forward(model, data)
    opt.zero_grad()
    loss.backward()
    opt.step()


def bench(args, batch):
    torch.manual_seed(0)
    model = pykt_saint(NUM_Q, NUM_C, args)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    data = random_batch(batch, args.seq_len, torch.Generator().manual_seed(batch))
    for _ in range(args.warmup):
        train_step(model, opt, data)
    rates = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.steps):
            train_step(model, opt, data)
        seconds = time.perf_counter() - start
        rates.append(batch * args.seq_len * args.steps / seconds)
    total = sum(p.numel() for p in model.parameters())
    # pyKT clones whole blocks, so blocks after the first carry embedding tables
    # that forward never reads; they get no gradient.
    trained = sum(p.numel() for p in model.parameters() if p.grad is not None)
    return statistics.median(rates), rates, total, trained


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 512])
    ap.add_argument("--steps", type=int, default=3, help="timed steps per repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument(
        "--layers", type=int, default=2, help="pyKT n_blocks: encoder and decoder blocks each"
    )
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--seq-len", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    results_flag(ap, "pykt_saint")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    say = Report("pykt_saint", args.results)
    say.header(
        "pyKT SAINT training throughput (bench/pykt_saint_throughput.py)", "torch", "pykt-toolkit"
    )
    say(
        f"pyKT SAINT  threads {torch.get_num_threads()}  "
        f"d_model {args.d_model}  blocks {args.layers}+{args.layers}  heads {args.heads}  "
        f"seq_len {args.seq_len}  num_q {NUM_Q}  num_c {NUM_C}  "
        f"steps {args.steps} x {args.repeats} repeats (warm-up {args.warmup})"
    )
    rows = [(batch, *bench(args, batch)) for batch in args.batch_sizes]
    say(f"load avg    {load_average()} (1, 5, 15 min) at the end")  # others skew the rates
    columns = ("interactions/s", 15), ("best", 8), ("repeats", 22), ("params", 10)
    say(f"{'batch':>6} " + " ".join(f"{n:>{w}}" for n, w in columns) + f" {'trained':>10}")
    for batch, median, rates, total, trained in rows:
        reps = " ".join(f"{r:.0f}" for r in rates)
        say(f"{batch:>6} {median:>15.0f} {max(rates):>8.0f} {reps:>22} {total:>10,} {trained:>10,}")
    say.write()


if __name__ == "__main__":
    main()
