"""04's export for Kaggle: a dataset folder and, beside it, a kernel folder, so that

    kaggle datasets create -p <kaggle-dir>/dataset --dir-mode zip
    kaggle kernels push -p <kaggle-dir>/kernel

is the whole submission.

<kaggle-dir>/dataset/
    dataset-metadata.json      the dataset's id (from --kaggle-dataset-id or $KAGGLE_USERNAME)
    code/common/               common.stream.kaggle_notebook and the modules it imports: the
                               inference code only, written for the competition's Python 3.7
    fold{k}/ or full/best.pt   the checkpoint 04 streamed (or the full-data model), its
                               model and weights only, readable by torch 1.7
    fold{k}/ or full/trees.npz, tree_inputs.npz, blend.json
                               where the run has them: the boosted trees, the inputs of
                               their features and the blend's weight (the notebook then
                               submits the blend)
    state/snapshot.npz         every student's last receptive_field questions (all of
                               train.csv: a test student's train.csv history precedes the test)
    state/features.npz         with the trees: every student's whole question history
    state/parts.npy            part by question id
<kaggle-dir>/kernel/
    submission.ipynb           one cell: common.stream.kaggle_notebook.run_submission
    kernel-metadata.json       the competition and the dataset as sources, internet off
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.data.dataset import Dataset
from common.data.past_features import attach_model_features, question_skills
from common.data.past_state import build_feature_snapshot
from common.errors import UserError
from common.files import atomic_dir, write_json, write_text
from common.model.checkpoint import load_model, save_inference_checkpoint
from common.model.interface import KTModel
from common.model.trees.blend_bundle import BlendBundle, rewrite_in_run
from common.options import option
from common.runs.artefacts import member_names
from common.stream.kaggle_notebook import COMPETITION
from common.stream.online import model_snapshot
from common.workspace import Bundle, KaggleFolder, ModelFolder, Workspace

PACKAGE_DIR = Path(__file__).resolve().parents[1]
PACKAGE = PACKAGE_DIR.name  # "common"
NOTEBOOK_ENTRY = f"{PACKAGE}.stream.kaggle_notebook"
ENTRY_FILE = NOTEBOOK_ENTRY.replace(".", "/") + ".py"  # under the bundle's code/
NOTEBOOK_FILE = KaggleFolder.NOTEBOOK
CODE_SUBDIR = Bundle.CODE
KAGGLE_INPUT = "/kaggle/input"  # where a notebook's datasets and competition data are


DATASET_SLUG = "riiid-saint"  # the dataset's default name under its owner


@dataclass
class KaggleConfig:
    """04's Kaggle export: whether and where it is written, the ids it is uploaded under,
    the kernel's settings."""

    export: bool = option(
        True, "export the Kaggle dataset and notebook after streaming one fold (or --full)"
    )
    kaggle_dir: Path | None = option(
        None,
        "where to export the Kaggle dataset/ and kernel/",
        metavar="DIR",
        shown_default="<run>/kaggle",
    )
    kaggle_dataset_id: str | None = option(
        None,
        "the dataset's id, owner/slug (the owner: $KAGGLE_USERNAME, else the username in "
        "~/.kaggle/kaggle.json)",
        metavar="ID",
        shown_default=f"<owner>/{DATASET_SLUG}",
    )
    kaggle_kernel_id: str | None = option(
        None, "the notebook's id", metavar="ID", shown_default="<dataset id>-submission"
    )
    kaggle_gpu: bool = option(True, "the notebook asks for a GPU")
    kaggle_docker_image: str | None = option(
        None,
        "pin the notebook's environment (kernel-metadata.json's docker_image)",
        metavar="IMAGE",
        shown_default="none: Kaggle's latest image",
    )

    def __post_init__(self) -> None:
        for flag, value in (
            ("--kaggle-dataset-id", self.kaggle_dataset_id),
            ("--kaggle-kernel-id", self.kaggle_kernel_id),
        ):
            if value is not None:
                check_kaggle_id(flag, value)
        if self.export and self.kaggle_dataset_id is None:
            kaggle_owner()  # the owner the export will write, refused now, before 04 works

    def ids(self) -> KaggleIds:
        """The ids the export writes: --kaggle-dataset-id, else the owner found
        (kaggle_owner) with DATASET_SLUG, else a placeholder owner (owner_found False)."""
        owner = kaggle_owner()
        dataset = self.kaggle_dataset_id or f"{owner or NO_OWNER}/{DATASET_SLUG}"
        found = self.kaggle_dataset_id is not None or owner is not None
        return KaggleIds(
            dataset, self.kaggle_kernel_id, self.kaggle_gpu, self.kaggle_docker_image, found
        )


NO_OWNER = "YOUR-KAGGLE-USERNAME"  # written where no owner was found, and said so
# What Kaggle takes: a user name of letters, digits, dashes and underscores; a slug of 3 to
# 50 lowercase letters, digits and dashes, starting and ending with a letter or digit
KAGGLE_OWNER = r"[A-Za-z0-9_-]{1,50}"
KAGGLE_ID = re.compile(KAGGLE_OWNER + r"/[a-z0-9][a-z0-9-]{1,48}[a-z0-9]")


class KaggleCredentialsError(UserError, ValueError):
    """$KAGGLE_USERNAME or kaggle.json that cannot give the export its owner. A ValueError
    too: refused where 04's config is built, it ends like a bad flag (usage, exit 2)."""


def check_kaggle_id(flag: str, value: str) -> None:
    """Refuse (ValueError: a usage error) an id Kaggle would refuse at push time."""
    if not KAGGLE_ID.fullmatch(value):
        raise ValueError(
            f"{flag} {value!r}: Kaggle takes owner/slug, the slug 3 to 50 lowercase letters, "
            "digits and dashes (e.g. someone/riiid-saint)"
        )


def kaggle_owner() -> str | None:
    """The Kaggle user name the kaggle command line would use: $KAGGLE_USERNAME, else
    the username of kaggle.json in $KAGGLE_CONFIG_DIR or ~/.kaggle; None without one.
    KaggleCredentialsError, naming where it came from, for a kaggle.json that is not a
    JSON object and for a user name --kaggle-dataset-id's owner would not take."""
    if os.environ.get("KAGGLE_USERNAME"):
        return checked_owner(os.environ["KAGGLE_USERNAME"], "$KAGGLE_USERNAME")
    folder = Path(os.environ.get("KAGGLE_CONFIG_DIR") or Path.home() / ".kaggle")
    path = folder / "kaggle.json"
    if not path.exists():
        return None
    fix = (
        "fix it (the kaggle command line reads it too), or give --kaggle-dataset-id "
        f"owner/{DATASET_SLUG} (or --no-export)"
    )
    try:
        credentials = json.loads(path.read_text())
    except (OSError, ValueError) as error:  # a folder, unreadable, not UTF-8, not JSON
        reason = " ".join(str(error).split())
        raise KaggleCredentialsError(
            f"{path} cannot be read as Kaggle's credentials ({type(error).__name__}: "
            f"{reason}); {fix}"
        ) from None
    if not isinstance(credentials, dict):
        raise KaggleCredentialsError(
            f"{path} holds a JSON {type(credentials).__name__}, not an object with username "
            f"and key; {fix}"
        )
    username = credentials.get("username")
    return None if username in (None, "") else checked_owner(username, f"{path}'s username")


def checked_owner(owner, where: str) -> str:
    """`owner` if Kaggle takes it as a user name (--kaggle-dataset-id's owner part), else
    KaggleCredentialsError naming `where` it came from."""
    if isinstance(owner, str) and re.fullmatch(KAGGLE_OWNER, owner):
        return owner
    raise KaggleCredentialsError(
        f"{where} {owner!r} is not a Kaggle user name (1 to 50 letters, digits, dashes and "
        "underscores), so the dataset's id would be refused: set it to yours, or give "
        f"--kaggle-dataset-id owner/{DATASET_SLUG} (or --no-export)"
    )


@dataclass
class KaggleIds:
    """Who the upload belongs to: the dataset's id (`user/slug`) and the kernel's."""

    dataset: str
    kernel: str | None = None  # default: <user>/<slug>-submission
    enable_gpu: bool = True
    docker_image: str | None = None  # kernel-metadata's environment pin, when given
    owner_found: bool = True  # False: the dataset id holds NO_OWNER, a placeholder

    @property
    def user(self) -> str:
        return self.dataset.split("/")[0]

    @property
    def slug(self) -> str:
        return self.dataset.split("/")[-1]

    @property
    def kernel_id(self) -> str:
        return self.kernel or f"{self.user}/{self.slug}-submission"


def module_file(module: str) -> Path:
    """The source file of a module of the package ("common.stream.online" ->
    common/stream/online.py; a package -> its __init__.py)."""
    path = PACKAGE_DIR.parent.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def bundle_modules(entry: str = NOTEBOOK_ENTRY) -> list[str]:
    """The package's modules that `entry` imports, directly or not (itself included),
    read from their import statements, and the packages that hold them: what the
    bundle's code/ holds."""
    found: set[str] = set()
    waiting = [entry]
    while waiting:
        module = waiting.pop()
        if module in found:
            continue
        found.add(module)
        parts = module.split(".")
        waiting += [".".join(parts[:i]) for i in range(1, len(parts))]  # its packages
        for node in ast.walk(ast.parse(module_file(module).read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            waiting += [
                name
                for name in names
                if name.split(".")[0] == PACKAGE and module_file(name).is_file()
            ]
    return sorted(found)


def notebook_cell(slug: str, model: str) -> str:
    """The notebook's one cell (Python 3.7): the bundle's code first on the path, then
    run_submission. If the dataset is mounted under another folder name, it is found."""
    return f'''# Riiid! Answer Correctness Prediction: streams the hidden test through the API with
# the SAINT model of the dataset "{slug}" (written by 04_infer.py; inference only).
import glob
import os
import sys

BUNDLE = "{KAGGLE_INPUT}/{slug}"
if not os.path.isdir(os.path.join(BUNDLE, "{CODE_SUBDIR}")):  # mounted under another name
    entry = "{CODE_SUBDIR}/{ENTRY_FILE}"
    found = glob.glob("{KAGGLE_INPUT}/**/" + entry, recursive=True)
    if not found:
        raise FileNotFoundError("add the dataset {slug} to this notebook (Add data)")
    BUNDLE = found[0][: -len("/" + entry)]
sys.path.insert(0, os.path.join(BUNDLE, "{CODE_SUBDIR}"))

from {NOTEBOOK_ENTRY} import run_submission

run_submission(BUNDLE, model="{model}")
'''


def notebook(cell: str) -> dict:
    """An nbformat 4 notebook of one code cell, with a Python 3 kernel."""
    return {
        "nbformat": 4,
        "nbformat_minor": 4,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": cell.splitlines(keepends=True),
            }
        ],
    }


def kernel_metadata(ids: KaggleIds) -> dict:
    """kernel-metadata.json for `kaggle kernels push`: a private notebook over the
    competition's data and the dataset, internet off (the competition requires it)."""
    metadata = {
        "id": ids.kernel_id,
        "title": ids.kernel_id.split("/")[-1],  # Kaggle derives the slug from the title
        "code_file": NOTEBOOK_FILE,
        "language": "python",
        "kernel_type": "notebook",
        "is_private": True,
        "enable_gpu": ids.enable_gpu,
        "enable_tpu": False,
        "enable_internet": False,
        "dataset_sources": [ids.dataset],
        "competition_sources": [COMPETITION],
        "kernel_sources": [],
        "model_sources": [],
    }
    if ids.docker_image:  # "original": later pushes keep this image, not the latest
        metadata["docker_image"] = ids.docker_image
        metadata["docker_image_pinning_type"] = "original"
    return metadata


def write_code(dest: Path) -> None:
    """The bundle's modules under `dest`, in their packages' folders."""
    for module in bundle_modules():
        source = module_file(module)
        target = dest / source.relative_to(PACKAGE_DIR.parent)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def copy_blend_bundle(source: ModelFolder, dest: ModelFolder) -> bool:
    """The trees, their inputs and the blend's weight (common.model.trees.blend_bundle) that 04
    wrote beside the checkpoint, checked (BlendBundle.load: a damaged file is refused, not
    shipped) and copied beside its export; False where there are none."""
    if BlendBundle.load(source, rewrite_in_run(source)) is None:
        return False
    for name in ModelFolder.BLEND_FILES:
        shutil.copy2(source.file(name), dest.file(name))
    return True


def write_members(workspace: Workspace, bundle: Bundle, source: ModelFolder, checkpoint: str):
    """The run's other architectures beside the model (03 --arch: <model>/<arch>/, where
    the source holds `checkpoint` for them): each one's checkpoint and start state."""
    dataset = Dataset.of(workspace)
    for other in member_names(source, checkpoint):
        model = bundle.model(source.name).member(other)
        save_inference_checkpoint(source.member(other).checkpoint(checkpoint), model.checkpoint())
        net = load_model(model.checkpoint())[0]
        sequences = dataset.sequences
        if net.config.past_features != "none":
            attach_model_features(
                sequences, question_skills(dataset.questions, dataset.n_questions)
            )
        snapshot = model_snapshot(net, sequences, dataset.arrays.users, sequences.lengths(), "cpu")
        snapshot.save(bundle.member_snapshot(other))


def write_state(workspace: Workspace, bundle: Bundle, model: KTModel, with_trees: bool):
    """Every student's start state, from every question of the data: the model's last
    ring_context questions (SNAPSHOT_FILE; with their past-event features for a model
    that reads them; a recurrent model's state after each whole history with them),
    part and skill by question (PARTS_FILE, SKILLS_FILE); with the trees or such a
    model, the whole question history the features read (FEATURE_SNAPSHOT_FILE)."""
    dataset = Dataset.of(workspace)
    sequences, users = dataset.sequences, dataset.arrays.users
    skill = question_skills(dataset.questions, dataset.n_questions)
    reads = model.config.past_features != "none"
    if reads:
        attach_model_features(sequences, skill)
    snapshot = model_snapshot(model, sequences, users, sequences.lengths(), "cpu")
    bundle.state.mkdir(parents=True, exist_ok=True)
    snapshot.save(bundle.snapshot)
    del snapshot
    np.save(str(bundle.parts), dataset.parts)
    np.save(str(bundle.skills), skill)
    if with_trees or reads:
        build_feature_snapshot(sequences, users, sequences.lengths()).save(bundle.features)


def export_kaggle(
    workspace: Workspace, source: ModelFolder, checkpoint: str, kaggle: KaggleFolder,
    ids: KaggleIds,
) -> tuple[Path, Path]:  # fmt: skip
    """Write the Kaggle folder's dataset/ (the model `source`/`checkpoint` as
    <model>/best.pt, every student's state, the inference code) and kernel/ (see the
    module docstring); each folder appears whole or not at all. Returns both."""
    with atomic_dir(kaggle.dataset, owns=Bundle.WRITES) as tmp:
        bundle = Bundle(tmp)
        model = bundle.model(source.name)
        save_inference_checkpoint(source.checkpoint(checkpoint), model.checkpoint())
        blend = copy_blend_bundle(source, model)
        write_state(workspace, bundle, load_model(model.checkpoint())[0], with_trees=blend)
        write_members(workspace, bundle, source, checkpoint)
        write_code(bundle.code)
        write_json(
            bundle.metadata,
            {"title": ids.slug, "id": ids.dataset, "licenses": [{"name": "CC0-1.0"}]},
        )
    with atomic_dir(kaggle.kernel, owns=KaggleFolder.KERNEL_WRITES) as tmp:
        cell = notebook_cell(ids.slug, source.name)
        write_text(tmp / KaggleFolder.NOTEBOOK, json.dumps(notebook(cell), indent=1))
        write_json(tmp / KaggleFolder.KERNEL_METADATA, kernel_metadata(ids))
    return kaggle.dataset, kaggle.kernel
