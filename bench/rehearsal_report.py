"""The Riiid-size rehearsal's report (bench/bench_full_scale.py): the generated data beside
the real train.csv, each stage's figures against its target, and each stage projected to
one GPU from the FLOPs, bytes and op counts measured here; all from the figures the stages
(bench/rehearsal.py) kept in the work folder."""

from __future__ import annotations

import pstats
from dataclasses import dataclass

from benchlib import GB
from rehearsal import Places, cumulative_seconds, profile_shares

from common.tables import markdown_table

# ---------------------------------------------------------------------------------------
# one GPU, projected


@dataclass(frozen=True)
class Gpu:
    """What the projection assumes of one GPU (an H200 SXM) and its host."""

    name: str = "H200 SXM"
    bf16_flops: float = 989e12  # dense bf16 tensor-core peak (NVIDIA's data sheet)
    flop_use: float = 0.35  # share reached by a d256 model's matmuls (small: 256-wide)
    memory_bandwidth: float = 4.8e12  # HBM3e, bytes/s
    bandwidth_use: float = 0.6  # share reached by eager element-wise kernels
    launch_s: float = 6e-6  # per aten op launched from Python, eager, no CUDA graphs
    host_link: float = 25e9  # bytes/s host to device: pinned memory, PCIe Gen5 x16 at half
    bytes_scale: float = 0.5  # bf16 activations: half of the fp32 bytes counted here


def project_training(train: dict, gpu: Gpu, padded: bool = True) -> dict:
    """Interactions/s of 03's step on one GPU: its arithmetic (the FLOPs counted on a
    step), its memory traffic (the bytes its aten ops read and write, at bf16) and its
    launches, added (eager mode overlaps little at this size). The step was counted as
    the CPU path runs it, in parts of similar length; on CUDA 03 runs the batch as one
    part padded to its longest sequence (`padded`): FLOPs and bytes scale with the
    positions computed, and the ops are one part's (the counted ops over the parts)."""
    scale = train["gpu_padded_positions"] / train["cpu_padded_positions"] if padded else 1.0
    parts = train["micro_batches"] if padded else 1
    flops = train["flops_per_interaction"] * scale
    traffic = train["bytes_per_interaction"] * gpu.bytes_scale * scale
    per_interaction = {
        "arithmetic": flops / (gpu.bf16_flops * gpu.flop_use),
        "memory": traffic / (gpu.memory_bandwidth * gpu.bandwidth_use),
        "launches": train["ops_per_step"] / parts * gpu.launch_s / train["counted_interactions"],
    }
    bound = max(per_interaction, key=per_interaction.get)
    return {
        "interactions_per_s": 1.0 / sum(per_interaction.values()),
        "bound": bound,
        "per_interaction_s": per_interaction,
        "flops_per_interaction": flops,
        "positions_scale": scale,
    }


def project_stream(profile: dict, gpu: Gpu) -> dict:
    """Rows/s of 04's loop on one GPU: the CPU's share outside the model stays as measured;
    the model's share becomes its launches and its arithmetic per group."""
    profiled = profile["profiled"]
    per_group_cpu = profiled["seconds"] / profiled["groups"]
    model_share = profile["where"]["  model forward (builds and steps)"]["share"]
    rows_per_group = profile["rows_per_group"]
    model_gpu = max(
        profile["ops_per_group"] * gpu.launch_s,
        profile["flops_per_row"] * rows_per_group / (gpu.bf16_flops * gpu.flop_use),
    )
    per_group = per_group_cpu * (1 - model_share) + model_gpu
    return {
        "rows_per_s": rows_per_group / per_group,
        "cpu_s_per_group": per_group_cpu * (1 - model_share),
        "gpu_s_per_group": model_gpu,
    }


# ---------------------------------------------------------------------------------------
# the report

MACHINE_GB = 24.0  # this machine's memory: every stage must fit
KAGGLE_GB = 13.0  # a Kaggle notebook's memory: 04's competition path must fit
TARGET_PREPROCESS = 1_000_000  # rows/s, 01 on 2 cores
TARGET_BUILDER = 2_000_000  # interactions/s: twice the 1M/s a GPU trains at
TARGET_STREAM = 1_000  # rows/s, 04 at d256 on 2 cores
TEST_ROWS = 2_500_000  # question rows of the competition's hidden test
TARGET_STREAM_MINUTES = 45


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _gb(n: float) -> str:
    return f"{n / GB:.2f}"


def data_table(g: dict, prep: dict | None) -> str:
    """The generated data beside the real train.csv."""
    lengths = g["rows_per_student"]
    real = ["101,230,332", "393,656", "13,523", "418", "~2%", "~41", "257", "17,917", "—"]
    ours = [
        f"{g['rows']:,}",
        f"{g['students']:,}",
        f"{g['questions']:,}",
        f"{g['lectures']:,}",
        f"{g['lecture_rows'] / g['rows']:.1%}",
        f"{lengths['median']:.0f}",
        f"{lengths['mean']:.0f}",
        f"{lengths['max']:,}",
        f"{lengths['share_under_30']:.0%}",
    ]
    names = ["rows", "students", "questions (7 parts)", "lectures", "lecture rows"]
    names += ["rows per student: median", "mean", "longest", "students under 30 rows"]
    if prep:
        names.append("train.csv")
        real.append("—")
        ours.append(f"{prep['csv_bytes'] / GB:.1f} GB")
    body = [[n, r, o] for n, r, o in zip(names, real, ours, strict=True)]
    return markdown_table(["", "real train.csv", "this demo"], body)


def _row(stage: str, what: str, figures: dict, rate: str, target: str = "", met=None) -> list:
    """A stage table line: its wall time, peak RSS and load come from its figures; with no
    target given, the target is fitting this machine's memory."""
    load = figures.get("load", float("nan"))
    seconds, rss = figures["seconds"], figures["peak_rss"]
    if not target:
        target, met = f"≤ {MACHINE_GB:.0f} GB", rss <= MACHINE_GB * GB
    return [stage, what, f"{seconds:.0f}", rate, _gb(rss), f"{load:.1f}", target, _met(met)]


def stage_rows(f: dict) -> list[list[str]]:
    """One line per stage measured: what ran, wall, rate, peak RSS, target, met."""
    rows = []
    if g := f.get("generate"):
        rows.append(
            _row(
                "00 demo data (parallel)",
                f"{g['n_jobs']} joblib processes, {g['chunks']} chunk(s) of "
                f"{g['chunk_users']:,} students",
                g,
                f"{g['rows'] / g['seconds']:,.0f} rows/s",
            )
        )
    if p := f.get("preprocess"):
        rate = p["rows"] / p["seconds"]
        rows.append(
            _row(
                "01 preprocess",
                f"{p['rows']:,} rows, {p['csv_bytes'] / GB:.1f} GB of CSV",
                p,
                f"{rate:,.0f} rows/s",
                f"≥ 1M rows/s; ≤ {MACHINE_GB:.0f} GB",
                rate >= TARGET_PREPROCESS and p["peak_rss"] <= MACHINE_GB * GB,
            )
        )
    if d := f.get("folds"):
        rows.append(
            _row(
                "02 folds",
                f"virtual-time, 1 fold, tail share {d['valid_share']}",
                d,
                f"{d['fold']['train_rows'] + d['fold']['valid_rows']:,} rows",
            )
        )
    if t := f.get("train"):
        rows.append(
            _row(
                f"03 training, d256 2+2, batch {t.get('batch_size', 512)}",
                f"{t['steps_timed']} steps after {t['warmup_steps']} of warm-up, "
                f"{t['threads']} threads; epoch: {t['epoch_steps']:,} steps, "
                f"{t['epoch_interactions']:,} interactions, {t['epoch_hours']:.1f} h projected",
                t,
                f"{t['interactions_per_s']:,.0f} interactions/s",
            )
        )
    if b := f.get("batches"):
        best = max(
            (v for k, v in b.items() if k.endswith("_workers") or k == "one_process"),
            key=lambda v: v["interactions_per_s"],
        )
        workers = [k for k in b if k.endswith("_workers")]
        rates = [f"{b['one_process']['interactions_per_s']:,.0f} (1 process)"]
        rates += [f"{b[k]['interactions_per_s']:,.0f} ({k.replace('_', ' ')})" for k in workers]
        rows.append(
            _row(
                "03's batch builder alone",
                f"batch_inputs + to_tensors, no model; per trained interaction "
                f"{b.get('padded_per_interaction', float('nan')):.1f} padded positions and "
                f"{b['bytes_per_interaction']:.0f} B of tensors",
                b,
                "; ".join(rates) + " interactions/s",
                "≥ 2M interactions/s",
                best["interactions_per_s"] >= TARGET_BUILDER,
            )
        )
    if s := f.get("stream"):
        q = s["summary"]
        state = q["state_bytes"]
        minutes = s["whole"]["question_rows"] / q["rows_per_s"] / 60
        full = TEST_ROWS / q["rows_per_s"] / 60
        ok = q["rows_per_s"] >= TARGET_STREAM and s["peak_rss"] <= MACHINE_GB * GB
        rows.append(
            _row(
                "04 streaming, emulated API (d256)",
                f"{q['rows']:,} of the stream's {s['whole']['question_rows']:,} question rows "
                f"in {q['groups']:,} groups; online state {_gb(state['total'])} GB (rings of "
                f"{state['capacity']:,} slots {_gb(state['student_state'])}, a pool of "
                f"{state['cache_students']:,} caches {_gb(state['cache_pool'])}); the whole "
                f"stream {minutes:.0f} min projected",
                s,
                f"{q['rows_per_s']:,.0f} rows/s",
                f"≥ 1,000 rows/s; 2.5M rows < 45 min; ≤ {MACHINE_GB:.0f} GB",
                ok and full < TARGET_STREAM_MINUTES,
            )
        )
    if k := f.get("kaggle"):
        rate = k["timing"]["rows_per_s"]
        rows.append(
            _row(
                "04 streaming, Kaggle path (d256)",
                f"--competition: the bundle's snapshot of every student "
                f"({k['snapshot_bytes'] / GB:.2f} GB compressed), {k['timing']['rows']:,} rows"
                + _kaggle_state(k["timing"].get("state_bytes")),
                k,
                f"{rate:,.0f} rows/s",
                f"≤ {KAGGLE_GB:.0f} GB",
                k["peak_rss"] <= KAGGLE_GB * GB,
            )
        )
    return rows


def _kaggle_state(state: dict | None) -> str:
    if not state:
        return ""
    budget = state.get("max_bytes")
    limit = f" (budget {budget / GB:.0f} GB)" if budget else ""
    return (
        f"; online state {_gb(state['total'])} GB{limit}: rings of {state['students']:,} "
        f"students {_gb(state['student_state'])}, a pool of {state['cache_students']:,} caches "
        f"{_gb(state['cache_pool'])}"
    )


def gpu_rows(f: dict, gpu: Gpu) -> list[list[str]]:
    """Each stage on one GPU (and its host), projected from the measured figures."""
    rows = []
    if p := f.get("preprocess"):
        rows.append(
            [
                "01 preprocess",
                "CPU only (CSV parse, parquet, arrays): no GPU work",
                f"{p['rows'] / p['seconds']:,.0f} rows/s (as measured, 2 cores)",
                f"{p['seconds'] / 60:.1f} min",
            ]
        )
    if t := f.get("train"):
        for padded in (True, False) if "micro_batches" in t else (False,):
            projected = project_training(t, gpu, padded)
            epoch = t["epoch_interactions"] / projected["interactions_per_s"]
            per = projected["per_interaction_s"]
            how = (
                f"as 03 runs it on CUDA: one part padded to its longest sequence "
                f"({projected['positions_scale']:.1f}x the positions of the sorted parts)"
                if padded
                else f"in {t.get('micro_batches', 'its')} length-sorted parts (as on the CPU)"
            )
            rows.append(
                [
                    f"03 training step, d256 2+2, batch {t.get('batch_size', 512)}, {how}",
                    f"{projected['flops_per_interaction'] / 1e9:.4f} GFLOP per interaction; "
                    f"arithmetic {per['arithmetic'] * 1e9:.0f} ns, memory "
                    f"{per['memory'] * 1e9:.0f} ns, launches {per['launches'] * 1e9:.0f} ns "
                    "per interaction",
                    f"{projected['interactions_per_s']:,.0f} interactions/s "
                    f"({projected['bound']}-bound)",
                    f"{epoch / 60:.1f} min per epoch",
                ]
            )
    if b := f.get("batches"):
        link = gpu.host_link / b["bytes_per_interaction"]
        per_core = b["one_process"]["interactions_per_s"]
        need = 1e6 / per_core
        rows.append(
            [
                "03's batch builder (host CPU)",
                f"{per_core:,.0f} interactions/s per core; {b['bytes_per_interaction']:.0f} B per "
                f"interaction over a {gpu.host_link / 1e9:.0f} GB/s host link",
                f"link: {link:,.0f} interactions/s; 1M/s needs {need:.1f} builder cores",
                "—",
            ]
        )
    if (pr := f.get("profile")) and (s := f.get("stream")):
        projected = project_stream(pr, gpu)
        whole = s["whole"]["question_rows"]
        rows.append(
            [
                "04 streaming, d256",
                f"{pr['flops_per_row'] / 1e6:.1f} MFLOP per row, {pr['ops_per_group']:,.0f} aten "
                f"ops per group of {pr['rows_per_group']:.0f} rows (the first "
                f"{pr.get('counted_groups', 50)} groups, cache builds included); CPU outside "
                f"the model {projected['cpu_s_per_group'] * 1e3:.1f} ms per group (cProfile "
                f"on), the model on the GPU {projected['gpu_s_per_group'] * 1e3:.1f} ms",
                f"{projected['rows_per_s']:,.0f} rows/s",
                f"{whole / projected['rows_per_s'] / 60:.1f} min for the stream's {whole:,} rows",
            ]
        )
    return rows


def profile_lines(pr: dict) -> list[str]:
    """Where 04's time goes (cProfile, cumulative; parts nest)."""
    timing = pr["profiled"]
    lines = [
        f"04 under cProfile: {timing['rows']:,} rows in {timing['groups']:,} groups, "
        f"{timing['seconds']:.1f} s ({timing['rows_per_s']:,.0f} rows/s with the profiler on)"
    ]
    for label, part in pr["where"].items():
        if label != "top_own_time":
            lines.append(f"  {label:<36} {part['seconds']:8.1f} s  {part['share']:6.1%}")
    lines.append("  most own time (the whole process: start-up and the snapshot's load too):")
    for item in pr["where"]["top_own_time"]:
        lines.append(f"    {item['seconds']:8.2f} s  {item['function']}")
    return lines


def report(say, places: Places, scale: float, gpu: Gpu = Gpu()) -> dict:
    """Print the rehearsal's tables from the figures kept in the work folder."""
    stages = ("generate", "preprocess", "folds", "train", "batches", "stream", "kaggle")
    f = {name: places.load(name) for name in (*stages, "profile")}
    f = {k: v for k, v in f.items() if v is not None}
    profile = places.work / "profile" / "stream.prof"
    if "profile" in f and profile.exists():  # the shares as PROFILED names them now
        stats = pstats.Stats(str(profile))
        loop = cumulative_seconds(stats, ".py", "stream_loop")
        f["profile"]["where"] = profile_shares(stats, loop or f["profile"]["profiled"]["seconds"])
    if g := f.get("generate"):
        say(f"Data: {scale:g} of the real train.csv's students")
        say(data_table(g, f.get("preprocess")).rstrip("\n"))
        say()
    say("Stages (each a fresh process; wall s of the process; peak RSS in GB: the larger of")
    say("/usr/bin/time's peak of the largest process and the sampled PSS sum over its")
    say("workers; load: the 1-minute load average when the stage began, 2 cores)")
    header = ["stage", "what ran", "wall s", "rate", "peak RSS GB", "load", "target", "met?"]
    say(markdown_table(header, stage_rows(f), "llrrrrll").rstrip("\n"))
    say()
    if s := f.get("stream"):
        w, b = s["whole"], s["streamed"]
        per = s["summary"]["state_bytes_per_student"]
        say(
            f"04's stream (02's virtual-time tail): {w['question_rows']:,} question rows of "
            f"{w['students']:,} students, {w['new_students']:,} of them new; "
            f"{w['new_student_question_share']:.1%} of its question rows are new students'."
        )
        q = s["summary"]
        say(
            f"04's model caches: {q['cache_builds']:,} built ({q['cache_rebuilds']:,} of them "
            f"rebuilt after an eviction), {q['cache_evictions']:,} evicted, for "
            f"{q['rows']:,} rows in {q['groups']:,} groups (pool of {q['cache_students']:,})."
        )
        say(
            f"Streamed here: its first {b['question_rows']:,} question rows "
            f"({b['new_student_question_share']:.1%} new students'), "
            f"{b['students']:,} students; the state starts with every student's training "
            f"questions (a ring of {per['ring']:,.0f} B per student, a model cache of "
            f"{per['cache']:,.0f} B per cached student)."
        )
        say()
    if rows := gpu_rows(f, gpu):
        say(
            f"One GPU, projected (assumes an {gpu.name}: {gpu.bf16_flops / 1e12:.0f} TFLOP/s "
            f"dense bf16 at {gpu.flop_use:.0%}, {gpu.memory_bandwidth / 1e12:.1f} TB/s HBM at "
            f"{gpu.bandwidth_use:.0%}, {gpu.launch_s * 1e6:.0f} µs per eager aten launch, "
            f"a {gpu.host_link / 1e9:.0f} GB/s host link)"
        )
        header = ["stage", "measured here, per unit", "projected rate", "projected time"]
        say(markdown_table(header, rows, "llrr").rstrip("\n"))
        say()
    if pr := f.get("profile"):
        for line in profile_lines(pr):
            say(line)
        say()
    say("Commands, as each stage ran (its figures kept in <work>/figures/):")
    for name in (*stages, "profile"):
        if name in f:
            say(f"  {name:<10} {f[name]['command']}")
    say()
    return f
