"""The KT benchmark's results (bench/kt/run.py): each fold's scores read back from
05_evaluate.py, and the section it writes to bench/results/kt.txt (or its --results): the
config and machine, the table of finished folds (AUC and accuracy, mean ± std over folds,
with 05's baselines), the published AUCs of bench/kt/published_kt_results.csv with their
protocols, the protocol notes, and the commands of one fold. It takes the script's
context and plans (bench/kt/plans.py), never the script itself."""

from __future__ import annotations

import csv
import json
import re
import statistics
import time
from pathlib import Path

import pandas as pd

from bench.benchlib import bench_run, relative, shown
from bench.kt.plans import BASELINES_ONLY, Context, DatasetPlan
from common.model.trees.blending import BLEND
from common.model.trees.boosting import TREES
from common.report.baselines import BASELINE_NAMES
from common.tables import markdown_table
from common.workspace import Workspace

BASELINES = (*BASELINE_NAMES, TREES)
SCORERS = (BLEND, *BASELINES)  # beside the model, each where 05 scored it


def finished_results(model_dir: Path) -> list[dict]:
    paths = sorted((model_dir / "results").glob("fold*.json"), key=lambda p: int(p.stem[4:]))
    return [json.loads(p.read_text()) for p in paths]


def fold_metrics(workspace: Workspace, k: int) -> dict:
    """AUC and accuracy at 0.5 of the model, the blend and the baselines on fold k (05's
    metrics.csv in the model's workspace; the blend and the trees where 05
    scored them)."""
    metrics = bench_run(workspace).report.table("metrics", "csv")
    table = pd.read_csv(metrics, dtype={"fold": str})
    rows = table[table["fold"] == str(k)].set_index("scorer")
    scores = {}
    for scorer in ("model", *SCORERS):
        if scorer not in rows.index:
            continue
        scores[scorer] = {
            "auc": float(rows.loc[scorer, "auc"]),
            "accuracy": float(rows.loc[scorer, "accuracy_at_half"]),
            "rows": int(rows.loc[scorer, "rows"]),
        }
    return scores


def mean_std(values: list[float], digits: int = 4) -> str:
    if not values:
        return "—"
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def score_row(dataset: str, name: str, results: list[dict], scorer: str) -> list[str]:
    """A table row: `scorer`'s AUC and accuracy over the folds of `results` (and, for the
    model, its training time and streaming rate)."""
    auc = [r["scores"][scorer]["auc"] for r in results]
    accuracy = [r["scores"][scorer]["accuracy"] for r in results]
    folds = ",".join(str(r["fold"]) for r in results)
    if scorer != "model":
        return [dataset, name, mean_std(auc), mean_std(accuracy), "—", "—", folds]
    train = statistics.fmean(r["train_seconds"] for r in results)
    wall = statistics.fmean(r["wall_seconds"]["train"] for r in results)
    stream = statistics.fmean(r["stream_rows_per_s"] for r in results)
    timing = [f"{train:,.0f} ({wall:,.0f})", f"{stream:,.0f}"]
    return [dataset, name, mean_std(auc), mean_std(accuracy), *timing, folds]


def result_rows(finished: dict) -> list[list[str]]:
    """One row per (dataset, model) with finished folds, then the baselines per dataset
    (the same fold rows for every model: taken from the first model's folds)."""
    rows = []
    for plan, by_model in finished.items():
        label = f"{plan.preset} ({plan.split})"
        by_model = dict(by_model)
        baselines_only = by_model.pop(BASELINES_ONLY, None)
        for name, results in by_model.items():
            rows.append(score_row(label, name, results, "model"))
            if all(BLEND in r["scores"] for r in results):
                rows.append(score_row(label, f"{name}, {BLEND}", results, BLEND))
        source = baselines_only or next(iter(by_model.values()), None)
        if source:
            names = [b for b in BASELINES if all(b in r["scores"] for r in source)]
            rows += [score_row(label, f"baseline: {b}", source, b) for b in names]
    return rows


def read_published(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def short_source(source: str) -> str:
    """The address or arXiv id of a source, for the table."""
    found = re.search(r"https?://\S+|arXiv:[0-9.]+", source)
    short = found.group(0) if found else source
    if "third-party" in source:
        short += " (third-party reimplementation)"
    if "secondary copy" in source:
        short += " (read in a secondary copy)"
    return short


def published_section(published: list[dict], datasets: list[str]) -> str:
    """The verified published AUCs (protocols as numbered notes), and which named sources
    could not be verified."""
    chosen = [p for p in published if p["dataset"] in datasets]
    notes: dict[str, int] = {}
    rows = []
    for p in (p for p in chosen if p["auc"]):
        std = f" ± {float(p['auc_std']):.4f}" if p["auc_std"] else ""
        note = notes.setdefault(p["protocol_note"], len(notes) + 1)
        auc = f"{float(p['auc']):.4f}{std}"
        rows.append([p["dataset"], p["model"], auc, short_source(p["source"]), f"[{note}]"])
    text = (
        "Published ROC AUCs (bench/kt/published_kt_results.csv; only numbers read in a source):\n\n"
    )
    if rows:
        text += markdown_table(["dataset", "model", "AUC", "source", "protocol"], rows, "lllll")
        text += "\n" + "".join(f"[{n}] {note}\n\n" for note, n in notes.items())
    else:
        text += "(none verified)\n\n"
    named: dict[str, list[str]] = {}
    for p in (p for p in chosen if not p["auc"]):
        named.setdefault(short_source(p["source"]), []).append(f"{p['model']} ({p['dataset']})")
    if named:
        listed = "; ".join(f"{source}: {', '.join(items)}" for source, items in named.items())
        text += (
            "Named in the CSV but not verified (their tables were not readable in the stored "
            f"sources, so no number is recorded): {listed}.\n"
        )
    return text


def protocol_notes(ctx: Context, plans: list[DatasetPlan]) -> str:
    s, m = ctx.settings, ctx.settings.train.model
    lines = [f"- {p.preset}: {p.note}." for p in plans]
    lines += [
        f"- Multi-skill rows: `{ctx.args.multi_skill_rows}`. With `keep` (as AKT), a response to a "
        "problem with several skills appears once per skill on consecutive rows, so every copy "
        "after the first follows its own answer one step earlier: an easy target that lifts AUC "
        "on assist2009_pid (`bundle` predicts the copies together, before feedback; `merge` "
        "keeps one row).",
        "- AKT trains each fold with a separate validation file and picks the epoch on it; here "
        f"every fold trains {s.train.epochs} epoch(s) on the fold's training students and is "
        f"scored from `{s.checkpoint_file()}` (no selection on the test fold: "
        + (
            "best.pt is chosen on an inner split of the training students"
            if s.checkpoint == "best"
            else "the last epoch, no early stopping; 03's per-epoch AUC on the fold is only logged"
        )
        + "). AKT cuts students into independent sequences of 200; here each prediction "
        f"depends on the student's last {m.receptive_field} questions (banded attention "
        f"over {m.window}, {m.encoder_layers + m.decoder_layers} layers deep, over the whole "
        "history, streamed through the API emulator).",
        "- AUC is pooled over every response of a fold's students (as AKT/DKVMN compute it), "
        "then averaged over folds; ± is the standard deviation over folds (n-1).",
        "- These datasets have no times: 00 fills a constant 60 s step and empty elapsed times, "
        "so SAINT+'s extra decoder inputs (elapsed, lag) carry no signal and SAINT+ should "
        "match SAINT up to noise.",
        "- Rows beyond the papers' SAINT: `SAINT + skill tags` adds the mean embedding of "
        "the question's skills (00 writes them as tags) to the encoder input (03_train.py "
        "`--tags`); `... + interaction decoder` also embeds each answered question per "
        "(question, response) and (skill, response) pair in the decoder (`--decoder-features "
        "question`). `SAINT + Rasch skill embeddings (encoder)` replaces the vector per "
        "question by AKT's Rasch form: the mean skill embedding plus a learned scalar "
        "difficulty of the question times a variation vector of its skills (`--tags "
        "--question-embedding rasch`); `... (encoder and decoder)` gives the (skill, response) "
        "pairs in the decoder the same form (`--decoder-features question`). "
        "assist2015's questions are its skills, so tags add nothing there.",
        "- Baselines are 05_evaluate.py's: each question's correct rate on the fold's training "
        "rows, that combined with the student's running correct rate, and trees "
        "(scikit-learn's histogram gradient boosting over common/data/past_features.py's "
        "past-event features, fitted on the fold's training rows). Their rows come from the "
        "`baselines` runs (no model) where they exist. A model's blend row: its logit blend "
        "with the trees, the weight chosen on the fold's inner split "
        "(03 --select-on inner).",
    ]
    if ctx.args.slice_students:
        lines.append(
            f"- **Slice run**: only {ctx.args.slice_students} students per dataset; the numbers "
            "prove the pipeline runs and are not comparable with published AUCs."
        )
    return "\n".join(lines) + "\n"


def first_results(finished: dict) -> list[dict]:
    """The finished folds of the first (dataset, model) that has any, a trained model's
    before the baselines'."""
    found = [(name, r) for by_model in finished.values() for name, r in by_model.items()]
    found.sort(key=lambda pair: pair[0] == BASELINES_ONLY)
    return found[0][1] if found else []


def example_commands(finished: dict) -> str:
    results = first_results(finished)
    return "".join(relative(c) + "\n" for c in results[0]["commands"]) if results else ""


def machine_line(finished: dict) -> str:
    results = first_results(finished)
    if not results:
        return "?"
    env = results[-1]["environment"]
    return (
        f"{env.get('platform', '?')}, {results[-1].get('cpus', '?')} CPUs, device "
        f"{env.get('device', '?')}, torch {env.get('torch', '?')} "
        f"({env.get('torch_threads', '?')} threads), Python {env.get('python', '?')}"
    )


def render_section(ctx: Context, finished: dict[DatasetPlan, dict[str, list[dict]]]) -> str:
    """The section: config and machine, the table of `finished` ({plan: {model's name:
    its finished folds}}), the published AUCs, the protocol and one fold's commands."""
    s, plans = ctx.settings, list(finished)
    t, m = s.train, s.train.model
    header = "dataset|model|AUC mean ± std|accuracy mean ± std|train s/fold (03 wall)"
    header = [*header.split("|"), "stream rows/s", "folds"]
    config = (
        f"d_model {m.d_model}, {m.encoder_layers}+{m.decoder_layers} layers, {m.n_heads} heads, "
        f"window {m.window}, batch {t.batch_size}, {t.epochs} epoch(s), lr {t.lr} ({t.schedule}, "
        f"warm-up {t.warmup}), dropout {m.dropout}, seed {t.seed}, device {t.device}, "
        f"scored from {s.checkpoint_file()}" + (f", extra {' '.join(s.extra)}" if s.extra else "")
    )
    parts = [
        "## Public knowledge-tracing datasets (bench/kt/run.py)\n",
        f"Written {time.strftime('%Y-%m-%d %H:%M')} by `{shown(ctx.argv)}`.\n",
        f"Config ({s.key()}): {config}. Machine: {machine_line(finished)}.\n",
        markdown_table(header, result_rows(finished), "l" * len(header)),
        published_section(read_published(ctx.args.published), [p.preset for p in plans]),
        "Protocol notes:\n\n" + protocol_notes(ctx, plans),
    ]
    commands = example_commands(finished)
    if commands:
        parts.append(
            "Commands of one fold (every fold's are in its results JSON):\n\n```\n"
            + commands
            + "```\n"
        )
    return "\n".join(parts)
