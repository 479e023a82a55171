"""Runs: one experiment per folder, output/runs/NAME/ (common.workspace.Run), beside the data/
and folds/ every run shares.

A run's name is `03_train.py --run NAME`, or by default one derived from the config
(`run_name`: the model preset, d_model and a digest of the config's identity), so two
configurations never share a folder by accident and the same one finds its own again.
Before training a fold, `claim_fold_dir` refuses a non-empty fold folder unless it holds
the same configuration and --resume was given, or --overwrite was.

The identity of a configuration is every TrainConfig field but those that say how long
or where a run goes (RUN_CONTROL): --resume may extend a run's epochs or move it to
another device; anything else is another experiment.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from common.errors import UserError
from common.files import check_writable, file_lock, json_values
from common.model.checkpoint import dict_differences
from common.model.registry import ARCHITECTURES, DEFAULT_ARCH
from common.model.saint import preset_name
from common.workspace import ModelFolder, Run, Workspace

if TYPE_CHECKING:  # annotations only: training's config is a stage above
    from common.train.config import TrainConfig

# fields that do not change what a run computes, or only how far it goes
RUN_CONTROL = (
    "fold", "full_data", "epochs", "patience", "resume", "device", "threads", "progress",
    "compile", "micro_batch", "valid_batch_size",
)  # fmt: skip
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


class RunClashError(UserError):
    """A fold folder holds another run's files."""


def check_run_name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise UserError(
            f"run name {name!r}: use letters, digits and . _ + - (at most 100, not starting "
            "with a symbol)"
        )
    return name


def identity(train_config: dict) -> dict:
    """The fields of a TrainConfig dict that define the experiment (not RUN_CONTROL), of
    the architectures it trains (trained_fields)."""
    return json_values(
        {k: v for k, v in trained_fields(train_config).items() if k not in RUN_CONTROL}
    )


def trained_fields(train_config: dict) -> dict:
    """A TrainConfig dict less the config sections of architectures it does not train
    (common.model.registry); a run of SAINT alone leaves `arch` out too, so that what
    names it (its identity, a benchmark's settings key) is what it was before runs could
    train several architectures."""
    arch = tuple(train_config.get("arch") or (DEFAULT_ARCH,))
    unused = {a.section for name, a in ARCHITECTURES.items() if name not in arch}
    if arch == (DEFAULT_ARCH,):
        unused.add("arch")
    return {k: v for k, v in train_config.items() if k not in unused}


def run_name(config: TrainConfig) -> str:
    """The default run name: `{preset}-d{d_model}-{digest}`, the digest (8 hex digits) of
    the config's identity."""
    text = json.dumps(identity(asdict(config)), sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{preset_name(config.model.decoder_features)}-d{config.model.d_model}-{digest}"


def fold_lock(folder: ModelFolder):
    """One writer per run and fold (03 training it, 04 streaming it): the folder (made, and
    checked writable, first) locked while the block runs, its holder named in
    `folder.lock`; a second process is refused naming the first (common.files.file_lock)."""
    check_writable(folder.path)
    return file_lock(folder.path, holder=folder.lock)


def recorded_config(folder: ModelFolder) -> dict | None:
    """The TrainConfig dict a fold folder's run recorded (config.json, or train_run.json
    when the first epoch never finished); None when neither exists. A damaged file is
    refused, named."""
    for path, key in ((folder.config, None), (folder.record("train"), "config")):
        if not path.exists():
            continue
        try:
            values = json.loads(path.read_text(encoding="utf-8"))
            values = values if key is None else values.get(key, {})
            if not isinstance(values, dict):
                raise ValueError("not a JSON object of a config's fields")
        except (ValueError, AttributeError) as error:  # UnicodeDecodeError is a ValueError
            raise RunClashError(
                f"{path} is damaged ({type(error).__name__}: {str(error)[:80]}): remove it "
                "(03 --resume writes it again), or --overwrite to start the fold again"
            ) from None
        return {k: v for k, v in values.items() if k not in ("recorded", "model_config")}
    return None


def _check_history(model: ModelFolder) -> None:
    """A resume rewrites history.csv from the checkpoint; a damaged one is named first."""
    try:
        with open(model.history, encoding="utf-8") as handle:
            header = handle.readline()
            handle.read()
    except FileNotFoundError:
        return
    except (OSError, ValueError) as error:
        header = f"unreadable ({type(error).__name__})"
    if not header.startswith("epoch,"):
        raise RunClashError(
            f"{model.history} is damaged (its first line: {header.strip()[:40]!r}, not "
            "history.csv's header): remove it (03 --resume writes it again from the latest "
            "epoch checkpoint), or --overwrite to start the fold again"
        )


def claim_fold_dir(model: ModelFolder, config: TrainConfig, *, overwrite: bool) -> bool:
    """Check that training may write into `model`'s folder: empty, or holding this
    config's run with --resume (from an epoch checkpoint, its files readable; or a run
    of the same config training fewer architectures, --arch's first ones: --resume keeps
    them and trains the others beside them); --overwrite empties it first. Returns True
    when it removed files. Its lock (fold_lock) is not one of its files."""
    folder = model.path
    files = sorted(p for p in folder.iterdir() if p.name != model.LOCK) if folder.exists() else []
    if not files:
        return False
    if overwrite:  # emptied in place: the folder is what fold_lock holds
        for path in files:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        return True
    held = ", ".join(p.name for p in files[:4])
    recorded = recorded_config(model)
    if recorded is None:
        raise RunClashError(
            f"{folder} is not empty ({held}, ...) and records no config: choose another "
            "--run NAME, or --overwrite to replace it"
        )
    # a field the recorded config predates reads as its default
    recorded = asdict(type(config)()) | recorded
    now = asdict(config)
    trained = tuple(recorded["arch"])
    if config.resume and now["arch"][: len(trained)] == trained:  # more architectures now:
        added = now["arch"][len(trained) :]  # those trained are kept, these train beside
        recorded |= {"arch": now["arch"]}
        recorded |= {ARCHITECTURES[a].section: now[ARCHITECTURES[a].section] for a in added}
    differences = dict_differences(identity(recorded), identity(now))
    if differences:
        raise RunClashError(
            f"{folder} holds a run of another config (recorded vs now: {differences}); "
            "choose another --run NAME, or --overwrite to replace it"
        )
    if not config.resume:
        raise RunClashError(
            f"{folder} already holds this config's run ({held}, ...): --resume continues "
            "it, --overwrite starts it again"
        )
    finished = [p.name for p in (model.checkpoint(), model.history) if p.exists()]
    if finished and model.latest_epoch_checkpoint() is None:
        raise RunClashError(
            f"{folder} holds {' and '.join(finished)} but no epoch_NN.pt to resume from: "
            "--resume would train again from epoch 1 and replace them; --overwrite starts "
            "the fold again"
        )
    _check_history(model)
    return False


def choose_run(workspace: Workspace, run: str | None, latest: str | None) -> Run:
    """The run 04 or 05 works on: `run` if given; else the only run, or `latest` (the run
    the runs table names last: trained, for 04; streamed, for 05) among several."""
    if run:
        check_run_name(run)
        if not workspace.run(run).exists():
            known = ", ".join(workspace.run_names()) or "none"
            raise UserError(f"no run {run!r} in {workspace.runs} (runs: {known})")
        return workspace.run(run)
    runs = workspace.run_names()
    if not runs:
        raise UserError(f"no runs in {workspace.runs}: run 03_train.py first")
    if len(runs) == 1:
        return workspace.run(runs[0])
    if latest in runs:
        print(f"run: {latest} (the latest in {workspace.runs_table.name}; --run NAME for another)")
        return workspace.run(latest)
    raise UserError(f"several runs ({', '.join(runs)}): choose one with --run NAME")


@functools.cache
def commit() -> str:
    """The code's git commit (12 digits, '-dirty' with uncommitted changes to tracked
    files), or 'unknown' outside a git checkout."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30
        )
        if done.returncode != 0:
            raise OSError(done.stderr)
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}-dirty" if dirty else head
