"""What produced a run's predictions, for the head of its report: the run, the training
configuration (each fold's config.json), the commit and command line of each stage, the
checkpoint each fold streamed and the environment it ran in. Read from the files 03 and 04
write beside their outputs; nothing is recomputed."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from common.runs.folders import identity
from common.runs.table import config_columns
from common.tables import markdown_table
from common.workspace import Run


def epochs_trained(run: Run, fold: int) -> int | None:
    """The fold's epochs so far (its history.csv; best.pt's history ends at its epoch)."""
    path = run.fold(fold).history
    if not path.exists():
        return None
    return max(0, len(path.read_text().splitlines()) - 1)


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def run_provenance(run: Run, summaries: dict[int, dict]) -> dict:
    """Per fold (summaries: 04's stream_summary.json of each fold scored): the training
    config, the commit that trained it, the commands of 03 and 04, the streamed checkpoint
    and the environment; the run's name."""
    per_fold = {}
    for k, stream in summaries.items():
        folder = run.fold(k)
        config = _read(folder.config)
        recorded = config.pop("recorded", {})
        train_run, infer_run = _read(folder.record("train")), _read(folder.record("infer"))
        per_fold[k] = {
            "config": config,
            "commit": recorded.get("commit", "unknown"),
            "resolved": recorded.get("resolved", {}),
            "train_command": train_run.get("argv"),
            "train_started": train_run.get("started"),
            "infer_command": infer_run.get("argv"),
            "environment": infer_run.get("environment") or train_run.get("environment", {}),
            "checkpoint": Path(str(stream.get("checkpoint", "?"))).name,
            "checkpoint_epoch": stream.get("checkpoint_epoch"),
        }
    return {"run": run.name, "folds": per_fold}


def _command(argv: list[str] | None) -> str:
    if not argv:
        return "not recorded"
    return f"`python {shlex.join([Path(argv[0]).name, *argv[1:]])}`"


def provenance_markdown(provenance: dict) -> str:
    """The report's opening section: the run's key settings per fold, where they differ,
    and how each fold was made."""
    folds = provenance["folds"]
    header = ["fold", "commit", "checkpoint", "model", "d_model", "layers", "heads", "window"]
    header += ["lr", "epochs", "batch", "select on"]
    rows = []
    for k, fold in folds.items():
        config = fold["config"]
        key = config_columns(config) if config else {}
        batch = fold["resolved"].get("batch_size", config.get("batch_size"))
        cells = [k, fold["commit"], f"{fold['checkpoint']} (epoch {fold['checkpoint_epoch']})"]
        cells += [key.get(c, "?") for c in ("model", "d_model", "layers", "heads", "window", "lr")]
        cells += [config.get("epochs", "?"), batch, config.get("select_on", "?")]
        rows.append([str(c) for c in cells])
    lines = [
        f"Run **{provenance['run']}** (`runs/{provenance['run']}/` in the output folder).",
        "",
        markdown_table(header, rows),
        "",
    ]
    configs = {json.dumps(identity(f["config"]), sort_keys=True) for f in folds.values()}
    first = next(iter(folds.values()), None)
    if first is not None:
        same = "every fold" if len(configs) == 1 else f"fold {next(iter(folds))}"
        for what, key in (("Training", "train_command"), ("Streaming", "infer_command")):
            commands = {k: _command(f[key]) for k, f in folds.items()}
            if len(set(commands.values())) == 1:
                lines.append(f"- {what} command (every fold): {commands[next(iter(folds))]}")
            else:
                lines += [f"- {what} command, fold {k}: {c}" for k, c in commands.items()]
        environment = ", ".join(f"{k} {v}" for k, v in sorted(first["environment"].items()))
        lines += [
            f"- Environment: {environment or 'not recorded'}",
            "",
            f"<details><summary>Training configuration ({same}: config.json, which "
            "`03_train.py --config` reads back)</summary>",
            "",
            "```json",
            json.dumps(first["config"], indent=2, sort_keys=True),
            "```",
            "</details>",
            "",
        ]
    if len(configs) > 1:
        lines.append("**The folds were trained with different configurations.**\n")
    return "\n".join(lines)
