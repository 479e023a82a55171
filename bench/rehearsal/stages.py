"""The Riiid-size rehearsal's stages (bench/rehearsal/full_scale.py), each run in a fresh
process so its peak RSS is its own:

    python -m bench.rehearsal.stages generate --json F --input-dir D --scale S  # the demo
    python -m bench.rehearsal.stages train --json F --data-dir P --steps N      # 03's steps
    python -m bench.rehearsal.stages batches --json F --data-dir P --seconds T  # the builder
    python -m bench.rehearsal.stages trees --json F --data-dir S --bundle-dir B  # 04's trees

Each writes what it measured to --json. 01, 02 and 04 run as the numbered scripts
themselves; bench/rehearsal/stream.py bounds 04's stream and stands in for the
competition's `riiideducation` module so that 04 runs its competition path (the Kaggle
dataset's snapshot of every student) on the rehearsal's stream; bench/rehearsal/trees.py
fits the trees the Kaggle bundle ships and exports it again with them (the notebook then
streams the blend: the model and the feature state); bench/rehearsal/measure.py
measures each stage's process tree and counts FLOPs. The `run_*` functions are the
recipe's stages: each keeps its figures in <work>/figures/<stage>.json, which
bench/rehearsal/report.py turns into the report and the one-GPU projection.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import re
import shutil
import sys
import time
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bench.benchlib import H200_FREE_BYTES, bench_fold, bench_run, module, script
from bench.rehearsal.measure import Measured, counted, measure
from bench.rehearsal.stream import (
    GROUP_ROWS,
    REFERENCE,
    bundle_root,
    kaggle_api,
    last_json,
    prepare_stream,
)
from bench.rehearsal.trees import stage_trees
from common.data.fold_data import load_fold_data
from common.data.schema import QUESTION
from common.files import write_json
from common.inputs.demo_parallel import make_demo_parallel, riiid_config
from common.model.predict import to_tensors
from common.model.saint import ModelConfig
from common.train.config import TrainConfig
from common.train.plan import PartPlan
from common.train.trainer import Trainer
from common.workspace import Workspace

# the recipe's stages, in the order they run (full_scale's --skip names them)
STAGES = (
    "generate", "preprocess", "folds", "train", "batches", "stream", "trees", "kaggle", "profile"
)  # fmt: skip


def child(stage: str, *args: object) -> list[str]:
    """The command that runs `stage` of this module in a fresh process."""
    return module("bench.rehearsal.stages", stage, *args)


def threads_env(threads: int) -> dict:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))


# ---------------------------------------------------------------------------------------
# stages run in a child process


def stage_generate(args: argparse.Namespace) -> dict:
    config = riiid_config(args.scale, args.seed)
    return make_demo_parallel(config, args.input_dir, args.chunk_users, args.jobs)


def _trainer(args: argparse.Namespace) -> tuple[Trainer, dict]:
    """03's Trainer at the reference size (--batch-size, 512 unless told) on fold 0 of the
    workspace --data-dir with 03's inner split, loaded as 03 loads it, its run the
    benchmark run of the workspace --work-dir; and the seconds each part took."""
    model = ModelConfig(**REFERENCE)
    config = TrainConfig(batch_size=args.batch_size, progress=False, model=model)
    begin = time.perf_counter()
    data = load_fold_data(Workspace(args.data_dir), 0, config.inner_share, config.seed)
    loaded = time.perf_counter()
    trainer = Trainer(config, bench_run(Workspace(args.work_dir)), data, torch.device("cpu"))
    return trainer, {"load_s": loaded - begin, "trainer_s": time.perf_counter() - loaded}


def stage_train(args: argparse.Namespace) -> dict:
    """Warm-up steps, then `steps` timed optimizer steps of epoch 1 as 03 runs them (its
    batches, built from the loaded data by the Trainer), then one more step counted."""
    torch.set_num_threads(args.threads)
    trainer, seconds = _trainer(args)
    (student, start, begin, stop), steps = trainer.epoch_batches(0)
    spans = (student, start, begin, stop)
    build, step, trained = [], [], []
    for index in steps[: args.warmup + args.steps]:
        clock = time.perf_counter()
        batch = to_tensors(trainer.batch_inputs(*spans, index), trainer.device)
        built = time.perf_counter()
        _, count = trainer.train_step(batch)
        build.append(built - clock)
        step.append(time.perf_counter() - built)
        trained.append(count)
    batch = to_tensors(trainer.batch_inputs(*spans, steps[len(trained)]), trainer.device)
    count = counted(lambda: trainer.train_step(batch))
    # positions computed: the batch runs in parts of similar length, each padded to its
    # longest, cut by the device's PartPlan: this CPU's, and an H200's (computed here)
    lengths = batch["valid"].sum(1)
    parts = trainer.micro_batches(batch)
    cpu_positions = sum(part["valid"].numel() for part in parts)
    cuda = PartPlan.for_device(trainer.setup.model_config, torch.device("cuda"), 0, H200_FREE_BYTES)
    cuda_parts = cuda.groups(lengths)
    cuda_positions = cuda.positions(lengths, cuda_parts)
    timed = slice(args.warmup, None)
    interactions = sum(trained[timed])
    rate = interactions / (sum(build[timed]) + sum(step[timed]))
    epoch_interactions = int((stop - begin).sum())
    return {
        **seconds,
        "threads": args.threads,
        "batch_size": trainer.plan.batch_size,
        "parameters": trainer.model.n_parameters(),
        "steps_timed": len(trained) - args.warmup,
        "warmup_steps": args.warmup,
        "interactions_timed": interactions,
        "interactions_per_step": interactions / max(len(trained) - args.warmup, 1),
        "build_s": sum(build[timed]),
        "step_s": sum(step[timed]),
        "interactions_per_s": rate,
        "step_interactions_per_s": interactions / sum(step[timed]),
        "epoch_interactions": epoch_interactions,
        "epoch_steps": len(steps),
        "epoch_hours": epoch_interactions / rate / 3600,
        "counted_interactions": int(batch["trained"].sum()),
        "flops_per_interaction": count["flops"] / int(batch["trained"].sum()),
        "bytes_per_interaction": count["bytes"] / int(batch["trained"].sum()),
        "ops_per_step": count["ops"],
        "micro_batches": len(parts),
        "positions": int(lengths.sum()),
        "cpu_padded_positions": cpu_positions,
        "cuda_parts": len(cuda_parts),
        "cuda_padded_positions": cuda_positions,
    }


def _build_batches(trainer: Trainer, spans, steps, deadline: float) -> tuple[int, ...]:
    """Batches built until `deadline` (perf_counter): (batches, trained questions,
    bytes of the tensors, question positions, positions padded to each batch's longest)."""
    batches = trained = nbytes = positions = padded = 0
    for index in steps:
        if time.perf_counter() >= deadline:
            break
        batch = to_tensors(trainer.batch_inputs(*spans, index), trainer.device)
        batches += 1
        trained += int(batch["trained"].sum())
        nbytes += sum(t.nbytes for t in batch.values())
        positions += int(batch["valid"].sum())
        padded += batch["valid"].numel()
    return batches, trained, nbytes, positions, padded


_FORKED: dict = {}  # what a forked builder worker inherits


def _worker_build(rank: int) -> tuple[int, int, int, float]:
    trainer, spans, steps, workers, seconds = _FORKED["work"]
    torch.set_num_threads(1)
    begin = time.perf_counter()
    built = _build_batches(trainer, spans, steps[rank::workers], begin + seconds)
    return (*built, time.perf_counter() - begin)


def stage_batches(args: argparse.Namespace) -> dict:
    """The batch builder alone (03's batch_inputs and to_tensors, no model): batches of
    epoch 1 built for `seconds`, in this process, then in `workers` forked processes
    at once (the way a DataLoader's workers would feed a GPU)."""
    torch.set_num_threads(1)
    trainer, seconds = _trainer(args)
    spans, steps = trainer.epoch_batches(0)
    profile = cProfile.Profile()
    begin = time.perf_counter()
    profile.enable()
    built = _build_batches(trainer, spans, steps, begin + args.seconds)
    profile.disable()
    one = time.perf_counter() - begin
    batches, trained, nbytes, positions, padded = built
    stats = pstats.Stats(profile)
    top = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:8]
    result = {
        **seconds,
        "one_process": {
            "batches": batches,
            "interactions": trained,
            "seconds": one,
            "interactions_per_s": trained / one,
        },
        "bytes_per_interaction": nbytes / trained,
        "positions_per_interaction": positions / trained,  # context questions included
        "padded_per_interaction": padded / trained,
        "top_own_time": [
            {"function": f"{Path(path).name}:{line}:{function}", "share": own / one}
            for (path, line, function), (_, _, own, _, _) in top
        ],
    }
    for workers in args.workers:
        _FORKED["work"] = (trainer, spans, steps, workers, args.seconds)
        begin = time.perf_counter()
        with get_context("fork").Pool(workers) as pool:
            parts = pool.map(_worker_build, range(workers))
        wall = time.perf_counter() - begin
        trained = sum(p[1] for p in parts)
        result[f"{workers}_workers"] = {
            "batches": sum(p[0] for p in parts),
            "interactions": trained,
            "seconds": wall,
            "interactions_per_s": trained / max(p[-1] for p in parts),
        }
    return result


# where 04's time goes: (file, function) whose cumulative time is a share of the loop's;
# the parts nest (the model's state and the feature state run inside the blend's predict,
# the model inside the model state's, builds inside its forward)
MODEL_FORWARD = "    model forward (builds and steps)"  # the projection's model share
PROFILED = {
    "BlendState.predict (a group's whole work)": ("common/stream/blend_state.py", "predict"),
    "  OnlineState.predict (the model's state)": ("common/stream/online.py", "predict"),
    "    cache builds (_build: last 400 questions)": ("common/stream/online.py", "_build"),
    MODEL_FORWARD: ("common/model/saint/model.py", "forward"),
    "    features (step_inputs)": ("common/data/features.py", "step_inputs"),
    "  feature state (group_features)": ("common/data/past_state.py", "group_features"),
    "  trees (Trees.probability)": ("common/model/trees/forest.py", "probability"),
    "API emulator (iter_test)": ("common/stream/emulator.py", "iter_test"),
}


def cumulative_seconds(stats: pstats.Stats, file: str, name: str | None) -> float:
    """The largest cumulative time of a function `name` (any, for None) of `file`: the
    outermost call's, which holds the nested ones."""
    best = 0.0
    for (path, _, function), (_, _, _, cumulative, _) in stats.stats.items():
        if path.endswith(file) and (name is None or function == name):
            best = max(best, cumulative)
    return best


def profile_shares(stats: pstats.Stats, total: float) -> dict:
    """Seconds and share of the loop's time by part (cumulative, so parts overlap: the
    model runs inside the state's predict), and the top functions by own time."""
    shares = {}
    for label, (file, name) in PROFILED.items():
        seconds = cumulative_seconds(stats, file, name)
        shares[label] = {"seconds": seconds, "share": seconds / total}
    top = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:12]
    shares["top_own_time"] = [
        {"function": f"{Path(path).name}:{line}:{function}", "seconds": own}
        for (path, line, function), (_, _, own, _, _) in top
    ]
    return shares


CHILD_STAGES = {  # the stages measured inside a child process of this module
    "generate": stage_generate,
    "train": stage_train,
    "batches": stage_batches,
    "trees": stage_trees,
}


def child_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=CHILD_STAGES)
    parser.add_argument("--json", type=Path, required=True, help="where the figures go")
    parser.add_argument("--input-dir", type=Path)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk-users", type=int, default=20_000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--work-dir", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--workers", type=int, nargs="*", default=[2])
    parser.add_argument("--bundle-dir", type=Path, help="trees: where the export goes")
    parser.add_argument("--tree-students", type=int, default=0, help="trees: 0 for all")
    parser.add_argument("--weight", type=float, default=0.5, help="trees: the model's weight")
    args = parser.parse_args(argv)
    write_json(args.json, CHILD_STAGES[args.stage](args))
    return 0


# ---------------------------------------------------------------------------------------
# the stages, as the recipe calls them: each runs in a fresh process and keeps its figures
# in <work>/figures/<stage>.json (a later run that skips the stage reports those)


@dataclass
class Places:
    """The rehearsal's scratch folder: input CSVs, 01/02's output, 04's, logs, figures."""

    work: Path

    @property
    def input(self) -> Path:
        return self.work / "input"

    @property
    def prep(self) -> Path:
        return self.work / "prep"

    @property
    def stream(self) -> Path:
        return self.work / "stream"

    @property
    def bundle(self) -> Path:
        return self.work / "bundle"

    def log(self, stage: str) -> Path:
        return self.work / "logs" / f"{stage}.log"

    def figures(self, stage: str) -> Path:
        return self.work / "figures" / f"{stage}.json"

    def load(self, stage: str) -> dict | None:
        path = self.figures(stage)
        return json.loads(path.read_text()) if path.exists() else None

    def keep(self, stage: str, figures: dict) -> dict:
        write_json(self.figures(stage), figures)
        return figures


def _measured(m: Measured) -> dict:
    return {"command": m.command, "seconds": m.seconds, "peak_rss": m.peak, "load": m.load}


def run_generate(places: Places, scale: float, seed: int, jobs: int, chunk_users: int, say):
    """The demo of `scale` times Riiid's students, generated by `jobs` processes."""
    out = places.figures("generate.child")
    command = child("generate", "--json", out, "--input-dir", places.input, "--scale", scale)
    command += ["--seed", seed, "--jobs", jobs, "--chunk-users", chunk_users]
    m = measure(command, places.log("generate"), say=say)
    summary = json.loads(out.read_text())
    return places.keep("generate", _measured(m) | summary)


def run_preprocess(places: Places, say) -> dict:
    """01_preprocess.py on the demo."""
    shutil.rmtree(Workspace(places.prep).data.path, ignore_errors=True)
    flags = ["--input-dir", places.input, "--output-dir", places.prep, "--no-progress"]
    m = measure(script("01_preprocess.py", *flags), places.log("preprocess"), say=say)
    text = places.log("preprocess").read_text()
    rows = int(re.search(r"^rows ([\d,]+)", text, re.M)[1].replace(",", ""))
    csv_bytes = (places.input / "train.csv").stat().st_size
    return places.keep("preprocess", _measured(m) | {"rows": rows, "csv_bytes": csv_bytes})


def run_folds(places: Places, valid_share: float, say) -> dict:
    """02_make_folds.py: one virtual-time fold whose tail is the Kaggle-like stream."""
    flags = ["--output-dir", places.prep, "--strategy", "virtual-time", "--n-folds", 1]
    flags += ["--valid-share", valid_share]
    m = measure(script("02_make_folds.py", *flags), places.log("folds"), say=say)
    stats = json.loads(Workspace(places.prep).folds.manifest.read_text())["folds"][0]
    return places.keep("folds", _measured(m) | {"valid_share": valid_share, "fold": stats})


def run_train(places: Places, steps: int, warmup: int, batch: int, threads: int, say) -> dict:
    """03's optimizer steps at the reference size on its real data path."""
    out = places.figures("train.child")
    command = child("train", "--json", out, "--data-dir", places.prep, "--work-dir")
    command += [places.work / "train", "--steps", steps, "--warmup", warmup]
    command += ["--batch-size", batch]
    command += ["--threads", threads]
    m = measure(command, places.log("train"), env=threads_env(threads), say=say)
    return places.keep("train", _measured(m) | json.loads(out.read_text()))


def run_batches(places: Places, seconds: float, workers: list[int], batch: int, say) -> dict:
    """The batch builder alone, one process and forked workers."""
    out = places.figures("batches.child")
    command = child("batches", "--json", out, "--data-dir", places.prep, "--work-dir")
    command += [places.work / "train", "--seconds", seconds, "--workers", *workers]
    command += ["--batch-size", batch]
    m = measure(command, places.log("batches"), env=threads_env(1), say=say)
    return places.keep("batches", _measured(m) | json.loads(out.read_text()))


def run_stream(places: Places, max_rows: int | None, threads: int, say) -> dict:
    """04_infer.py on the bounded Kaggle-like stream (the fold's state: every student's
    training questions), writing the Kaggle bundle (every student's snapshot). The model
    alone (--no-trees): 04's trees would be fitted on the batch features of
    every training question (99M at Riiid's size); the `trees` stage fits them on a
    sample and exports the bundle again with them."""
    shape = prepare_stream(Workspace(places.prep), places.stream, max_rows)
    flags = ["--output-dir", places.stream, "--fold", 0, "--no-progress"]
    flags += ["--group-rows", GROUP_ROWS, "--kaggle-dir", places.bundle]
    flags += ["--no-trees"]
    command = script("04_infer.py", *flags)
    m = measure(command, places.log("stream"), env=threads_env(threads), say=say)
    summary = json.loads(bench_fold(Workspace(places.stream)).stream_summary.read_text())
    keys = ("rows", "groups", "seconds", "rows_per_s", "predict_rows_per_s", "state_bytes")
    keys += ("cache_builds", "build_seconds", "rows_per_s_without_builds")
    keys += ("cache_rebuilds", "cache_evictions")
    figures = {k: summary[k] for k in keys} | {
        "state_bytes_per_student": summary["state_bytes_per_student"],
        "cache_students": summary["cache_students"],
        "threads": summary["torch_threads"],
    }
    return places.keep("stream", _measured(m) | shape | {"summary": figures})


def run_trees(places: Places, students: int, weight: float, threads: int, say) -> dict:
    """The trees on the training rows of `students` students (0: all) with the blend's
    `weight`, beside the stream's checkpoint, fitted on `threads` OpenMP threads (more
    than the free cores and each round waits on the busy one); the Kaggle bundle
    exported again with them."""
    out = places.figures("trees.child")
    command = child("trees", "--json", out, "--data-dir", places.stream, "--bundle-dir")
    command += [places.bundle, "--tree-students", students, "--weight", weight]
    m = measure(command, places.log("trees"), env=threads_env(threads), say=say)
    return places.keep("trees", _measured(m) | json.loads(out.read_text()))


def stream_prefix(places: Places, rows: int, folder: Path) -> Path:
    """The first `rows` question rows of 04's stream (whole groups of rows sharing a
    virtual time are not needed: the emulator cuts groups itself) as folder/stream.parquet."""
    frame = pd.read_parquet(places.stream / "stream.parquet")
    question = np.cumsum(frame["content_type_id"].to_numpy() == QUESTION)
    folder.mkdir(parents=True, exist_ok=True)
    end = int(np.searchsorted(question, rows)) + 1
    frame.iloc[:end].to_parquet(folder / "stream.parquet", index=False)
    return folder / "stream.parquet"


def run_kaggle(places: Places, rows: int, threads: int, say) -> dict:
    """04_infer.py --competition on the first `rows` question rows of the same stream: the
    Kaggle notebook's process (the bundle's model and snapshot of every student; the
    stand-in API serves the stream)."""
    stream = stream_prefix(places, rows, places.work / "kaggle")
    env = threads_env(threads) | kaggle_api(places.work / "api", stream)
    root = bundle_root(places.bundle)
    flags = ["--competition", "--model-dir", root.path, "--fold", 0, "--no-progress"]
    m = measure(script("04_infer.py", *flags), places.log("kaggle"), env=env, say=say)
    timing = last_json(places.log("kaggle"))
    sizes = {
        f"{name}_bytes": path.stat().st_size
        for name, path in (("snapshot", root.snapshot), ("features", root.features))
        if path.exists()
    }
    return places.keep("kaggle", _measured(m) | {"timing": timing} | sizes)


def run_profile(places: Places, rows: int, count_groups: int, threads: int, say) -> dict:
    """04's Kaggle path on the first `rows` question rows of the stream under cProfile,
    FLOPs and aten ops counted on its first `count_groups` groups."""
    folder = places.work / "profile"
    stream = stream_prefix(places, rows, folder)
    counts = folder / "counts.json"
    api = kaggle_api(places.work / "api", stream, count_groups, counts)
    env = threads_env(threads) | api
    root = bundle_root(places.bundle)
    flags = ["--competition", "--model-dir", root.path, "--fold", 0, "--no-progress"]
    command = [sys.executable, "-m", "cProfile", "-o", folder / "stream.prof"]
    command += script("04_infer.py", *flags)[1:]
    m = measure(command, places.log("profile"), env=env, say=say)
    timing = last_json(places.log("profile"))
    count = json.loads(counts.read_text())
    stats = pstats.Stats(str(folder / "stream.prof"))
    loop = cumulative_seconds(stats, ".py", "stream_loop") or timing["seconds"]
    return places.keep(
        "profile",
        _measured(m)
        | {
            "profiled": timing,
            "flops_per_row": count["flops"] / count["rows"],
            "ops_per_group": count["ops"] / count["groups"],
            "bytes_per_row": count["bytes"] / count["rows"],
            "rows_per_group": count["rows"] / count["groups"],
            "counted_groups": count["groups"],
            "where": profile_shares(stats, loop),
        },
    )


if __name__ == "__main__":
    sys.exit(child_main())
