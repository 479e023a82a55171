"""The Riiid-size rehearsal's report (bench/rehearsal/full_scale.py): the generated data
beside the real train.csv, each stage's figures against its target, and each stage
projected to one GPU (bench/rehearsal/projection.py); all from the figures the stages
(bench/rehearsal/stages.py) kept in the work folder."""

from __future__ import annotations

import pstats

from bench.benchlib import GB
from bench.rehearsal.projection import H200, Gpu, gpu_rows
from bench.rehearsal.stages import STAGES, Places, cumulative_seconds, profile_shares
from common.tables import markdown_table

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


def generate_row(g: dict) -> list:
    what = f"{g['n_jobs']} joblib processes, {g['chunks']} chunk(s) of "
    what += f"{g['chunk_users']:,} students"
    return _row("00 demo data (parallel)", what, g, f"{g['rows'] / g['seconds']:,.0f} rows/s")


def preprocess_row(p: dict) -> list:
    rate = p["rows"] / p["seconds"]
    return _row(
        "01 preprocess",
        f"{p['rows']:,} rows, {p['csv_bytes'] / GB:.1f} GB of CSV",
        p,
        f"{rate:,.0f} rows/s",
        f"≥ 1M rows/s; ≤ {MACHINE_GB:.0f} GB",
        rate >= TARGET_PREPROCESS and p["peak_rss"] <= MACHINE_GB * GB,
    )


def folds_row(d: dict) -> list:
    rows = f"{d['fold']['train_rows'] + d['fold']['valid_rows']:,} rows"
    return _row("02 folds", f"virtual-time, 1 fold, tail share {d['valid_share']}", d, rows)


def train_row(t: dict) -> list:
    return _row(
        f"03 training, d256 2+2, batch {t.get('batch_size', 512)}",
        f"{t['steps_timed']} steps after {t['warmup_steps']} of warm-up, "
        f"{t['threads']} threads; epoch: {t['epoch_steps']:,} steps, "
        f"{t['epoch_interactions']:,} interactions, {t['epoch_hours']:.1f} h projected",
        t,
        f"{t['interactions_per_s']:,.0f} interactions/s",
    )


def batches_row(b: dict) -> list:
    """The builder's rate in one process and in forked workers; the best counts."""
    best = max(
        (v for k, v in b.items() if k.endswith("_workers") or k == "one_process"),
        key=lambda v: v["interactions_per_s"],
    )
    workers = [k for k in b if k.endswith("_workers")]
    rates = [f"{b['one_process']['interactions_per_s']:,.0f} (1 process)"]
    rates += [f"{b[k]['interactions_per_s']:,.0f} ({k.replace('_', ' ')})" for k in workers]
    return _row(
        "03's batch builder alone",
        f"batch_inputs + to_tensors, no model; per trained interaction "
        f"{b.get('padded_per_interaction', float('nan')):.1f} padded positions and "
        f"{b['bytes_per_interaction']:.0f} B of tensors",
        b,
        "; ".join(rates) + " interactions/s",
        "≥ 2M interactions/s",
        best["interactions_per_s"] >= TARGET_BUILDER,
    )


def whole_stream_rate(timing: dict, whole: dict | None) -> str:
    """The measured sample's cache builds and steps apart, and the rate they project for
    the whole stream (`whole`: its question rows and students; every continuing student
    built once, as in a pool that never evicts): a sample of the stream's first rows
    meets most of its students for the first time, so it holds more builds per row than
    the whole. Empty for figures measured before the split was recorded."""
    builds, build_s = timing.get("cache_builds"), timing.get("build_seconds")
    steps_rate = timing.get("rows_per_s_without_builds")  # common.stream.api_loop's
    if steps_rate is None or not whole:
        return ""
    step_s_per_row = 1 / steps_rate
    each = f" ({build_s / builds * 1e3:,.0f} ms each)" if builds else ""
    text = (
        f"; {builds:,} cache builds took {build_s:.0f} s{each}, the steps alone "
        f"{1 / step_s_per_row:,.0f} rows/s"
    )
    whole_builds = whole["students"] - whole["new_students"]
    if whole_builds and not builds:
        return text + f"; the whole stream's {whole_builds:,} builds not timed (none here)"
    build_s_each = build_s / builds if builds else 0.0
    seconds = whole["question_rows"] * step_s_per_row + whole_builds * build_s_each
    return text + (
        f"; the whole stream ({whole['question_rows']:,} rows, {whole_builds:,} builds) "
        f"projected at {whole['question_rows'] / seconds:,.0f} rows/s"
    )


def stream_row(s: dict) -> list:
    """04 on the emulated API: its rate against the hidden test's 2.5M rows in 45 min."""
    q = s["summary"]
    state = q["state_bytes"]
    minutes = s["whole"]["question_rows"] / q["rows_per_s"] / 60
    full = TEST_ROWS / q["rows_per_s"] / 60
    ok = q["rows_per_s"] >= TARGET_STREAM and s["peak_rss"] <= MACHINE_GB * GB
    return _row(
        "04 streaming, emulated API (d256)",
        f"{q['rows']:,} of the stream's {s['whole']['question_rows']:,} question rows "
        f"in {q['groups']:,} groups; online state {_gb(state['total'])} GB (rings of "
        f"{state['capacity']:,} slots {_gb(state['student_state'])}, a pool of "
        f"{state['cache_students']:,} caches {_gb(state['cache_pool'])}); the whole "
        f"stream {minutes:.0f} min at the sample's rate" + whole_stream_rate(q, s["whole"]),
        s,
        f"{q['rows_per_s']:,.0f} rows/s",
        f"≥ 1,000 rows/s; 2.5M rows < 45 min; ≤ {MACHINE_GB:.0f} GB",
        ok and full < TARGET_STREAM_MINUTES,
    )


def trees_row(t: dict) -> list:
    """The trees the bundle ships and the export with them: they must fit this machine."""
    return _row(
        "04's trees and Kaggle export",
        f"trees as 04 fits them ({t['rounds']} rounds) on {t['rows']:,} of the training rows "
        f"of {t['students']:,} students drawn at random ({t['questions']:,} questions: the "
        f"batch features cover them all); blend weight {t['weight']:g}; then 04's export "
        f"with every student's whole history (features.npz "
        f"{t['features_bytes'] / GB:.2f} GB compressed)",
        t,
        f"fit {t['fit_s']:.0f} s (its arrays {_fit_gb(t)}); export {t['export_s']:.0f} s",
    )


def _fit_gb(t: dict) -> str:
    """The fit's own arrays at their peak, and per question of the sequences it read."""
    traced = t.get("fit_traced_bytes")
    if traced is None:
        return "not traced"
    return f"{traced / GB:.2f} GB, {traced / t['questions']:.0f} B per question"


def kaggle_row(k: dict, whole: dict | None = None) -> list:
    """04's Kaggle path: it must fit a Kaggle notebook's memory. `whole`: the stream
    stage's whole stream, of which the Kaggle path streams the first rows."""
    submits = k["timing"].get("submits", "model")
    features = k.get("features_bytes")
    history = f" and history ({features / GB:.2f} GB)" if features else ""
    return _row(
        "04 streaming, Kaggle path (d256)",
        f"--competition, submitting the {submits}: the bundle's snapshot of every student "
        f"({k['snapshot_bytes'] / GB:.2f} GB compressed){history}, "
        f"{k['timing']['rows']:,} rows"
        + _kaggle_state(k["timing"].get("state_bytes"))
        + whole_stream_rate(k["timing"], whole)
        + _feature_split(k["timing"]),
        k,
        f"{k['timing']['rows_per_s']:,.0f} rows/s",
        f"≤ {KAGGLE_GB:.0f} GB",
        k["peak_rss"] <= KAGGLE_GB * GB,
    )


def _feature_split(timing: dict) -> str:
    if timing.get("feature_seconds") is None:
        return ""
    return (
        f"; the feature state took {timing['feature_seconds']:.0f} s, the trees "
        f"{timing['trees_seconds']:.0f} s"
    )


def _kaggle_state(state: dict | None) -> str:
    if not state:
        return ""
    budget = state.get("max_bytes")
    limit = f" (budget {budget / GB:.0f} GB)" if budget else ""
    features = state.get("feature_state")
    feature_state = f", the trees' feature state {_gb(features)}" if features else ""
    return (
        f"; online state {_gb(state['total'])} GB{limit}: rings of {state['students']:,} "
        f"students {_gb(state['student_state'])}, a pool of {state['cache_students']:,} caches "
        f"{_gb(state['cache_pool'])}{feature_state}"
    )


STAGE_ROWS = {
    "generate": generate_row,
    "preprocess": preprocess_row,
    "folds": folds_row,
    "train": train_row,
    "batches": batches_row,
    "stream": stream_row,
    "trees": trees_row,
    "kaggle": kaggle_row,
}


def stage_rows(f: dict) -> list[list[str]]:
    """One line per stage measured: what ran, wall, rate, peak RSS, target, met."""
    whole = (f.get("stream") or {}).get("whole")
    rows = []
    for stage, row in STAGE_ROWS.items():
        if f.get(stage):
            rows.append(row(f[stage], whole) if stage == "kaggle" else row(f[stage]))
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
            lines.append(f"  {label:<48} {part['seconds']:8.1f} s  {part['share']:6.1%}")
    lines.append("  most own time (the whole process: start-up and the snapshot's load too):")
    for item in pr["where"]["top_own_time"]:
        lines.append(f"    {item['seconds']:8.2f} s  {item['function']}")
    return lines


def load_figures(places: Places) -> dict:
    """{stage: its figures} of every stage that kept some; the profile's shares read again
    from its cProfile file, so that they are the parts PROFILED names now."""
    f = {name: places.load(name) for name in STAGES}
    f = {k: v for k, v in f.items() if v is not None}
    profile = places.work / "profile" / "stream.prof"
    if "profile" in f and profile.exists():
        stats = pstats.Stats(str(profile))
        loop = cumulative_seconds(stats, ".py", "stream_loop")
        f["profile"]["where"] = profile_shares(stats, loop or f["profile"]["profiled"]["seconds"])
    return f


def say_stage_table(say, f: dict) -> None:
    say("Stages (each a fresh process; wall s of the process; peak RSS in GB: the larger of")
    say("/usr/bin/time's peak of the largest process and the sampled PSS sum over its")
    say("workers; load: the 1-minute load average when the stage began, 2 cores)")
    header = ["stage", "what ran", "wall s", "rate", "peak RSS GB", "load", "target", "met?"]
    say(markdown_table(header, stage_rows(f), "llrrrrll").rstrip("\n"))
    say()


def say_stream_notes(say, s: dict) -> None:
    """04's stream: its students, the model caches and what was streamed of it."""
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


def say_gpu_table(say, rows: list[list[str]], gpu: Gpu) -> None:
    say(
        f"One GPU, projected (assumes an {gpu.name}: {gpu.bf16_flops / 1e12:.0f} TFLOP/s "
        f"dense bf16 at {gpu.flop_use:.0%}, {gpu.memory_bandwidth / 1e12:.1f} TB/s HBM at "
        f"{gpu.bandwidth_use:.0%}, {gpu.launch_s * 1e6:.0f} µs per eager aten launch, "
        f"a {gpu.host_link / 1e9:.0f} GB/s host link)"
    )
    header = ["stage", "measured here, per unit", "projected rate", "projected time"]
    say(markdown_table(header, rows, "llrr").rstrip("\n"))
    say()


def report(say, places: Places, scale: float, gpu: Gpu = H200) -> dict:
    """Print the rehearsal's tables from the figures kept in the work folder."""
    f = load_figures(places)
    if g := f.get("generate"):
        say(f"Data: {scale:g} of the real train.csv's students")
        say(data_table(g, f.get("preprocess")).rstrip("\n"))
        say()
    say_stage_table(say, f)
    if s := f.get("stream"):
        say_stream_notes(say, s)
    if rows := gpu_rows(f, gpu):
        say_gpu_table(say, rows, gpu)
    if pr := f.get("profile"):
        for line in profile_lines(pr):
            say(line)
        say()
    say("Commands, as each stage ran (its figures kept in <work>/figures/):")
    for name in STAGES:
        if name in f:
            say(f"  {name:<10} {f[name]['command']}")
    say()
    return f
