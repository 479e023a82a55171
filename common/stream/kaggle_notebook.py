"""What the Kaggle notebook's cell runs, in the kernel's own Python: find the competition's
`riiideducation` module, load the bundle's model and every student's state, and stream the
hidden test through the API (common.stream.api_loop), which writes submission.csv itself.

This module and every module it imports ship in the bundle's code/ (common.stream.kaggle_export
copies exactly that set) and must run where the API runs: the competition's pinned 2020
environment, Python 3.7 with torch 1.7, pandas 1.1 and numpy 1.19 (tests run the exported
cell there, and check the code with a minimum-version checker).
"""

from __future__ import annotations

import importlib
import json
import sys
from functools import partial
from pathlib import Path

import numpy as np

from common.data.past_state import FeatureSnapshot
from common.device import resolve_device
from common.errors import UserError
from common.model.checkpoint import load_model
from common.model.registry import ARCH_NAMES
from common.model.trees.blend_bundle import BlendBundle, rewrite_in_bundle
from common.stream.api_loop import stream_loop
from common.stream.blend_state import BlendState, feature_state_budget
from common.stream.online import OnlineState, Snapshot, run_states
from common.workspace import Bundle

COMPETITION = "riiid-test-answer-prediction"  # its data folder: /kaggle/input/<this>
API_MODULE = "riiideducation"
# Kaggle's notebooks have 13 GB of RAM. Besides the online state (rings for every student
# and the model's cache pool, which this budget sizes) the process holds Python, torch
# (and a CUDA context on a GPU notebook), the model, each group's frames and, while the
# state is filled, the snapshot it is filled from.
COMPETITION_STATE_GB = 9.0


class ApiNotFound(UserError, ImportError):
    """The competition's API module cannot be imported; the message says what to do."""


def import_api(competition_dir: Path):
    """`riiideducation`: importable as it is in the competition's notebooks, or from the
    competition's data folder (where Kaggle ships it: riiideducation/ with a module
    compiled for Python 3.7)."""
    try:
        return importlib.import_module(API_MODULE)
    except ImportError as error:
        first = error
    shipped = (competition_dir / API_MODULE, competition_dir / f"{API_MODULE}.py")
    if not any(path.exists() for path in shipped):
        raise ApiNotFound(
            f"{API_MODULE} is not importable ({first}) and {competition_dir} holds no "
            f"{API_MODULE}/: add the competition's data to the notebook (Add data -> "
            f"Competition -> Riiid! Answer Correctness Prediction)"
        )
    sys.path.insert(0, str(competition_dir))
    try:
        return importlib.import_module(API_MODULE)
    except ImportError as error:
        version = "{}.{}".format(*sys.version_info[:2])
        raise ApiNotFound(
            f"{competition_dir / API_MODULE} does not import on Python {version} ({error}): "
            "the module is compiled for Python 3.7, so pin the notebook to the "
            "competition's original environment (Settings -> Environment)"
        ) from error


def run_submission(
    bundle,
    model: str = "fold0",
    device: str = "auto",
    max_state_gb: float | None = None,
    cache_students: int = 4096,
    competition_dir=None,
    progress: bool = False,
) -> dict:
    """Stream the competition's test through its API with the bundle's model
    (<bundle>/<model>/best.pt: fold{k} or full) and state. The state may take
    `max_state_gb` (default COMPETITION_STATE_GB), which sizes the cache pool; the
    competition's data folder is looked for beside the bundle unless given."""
    bundle = Bundle(bundle)
    where = Path(competition_dir) if competition_dir else bundle.path.parent / COMPETITION
    api = import_api(where)
    torch_device = resolve_device(device)
    checkpoint_path = bundle.model(model).checkpoint()
    net, checkpoint = load_model(checkpoint_path, torch_device)
    budget = int((COMPETITION_STATE_GB if max_state_gb is None else max_state_gb) * 1e9)
    state = bundle_state(bundle, model, net, torch_device, cache_students, budget)
    timing = stream_loop(api.make_env(), state, progress)
    summary = dict(
        timing,
        checkpoint=str(checkpoint_path),
        epoch=checkpoint.get("epoch"),
        submits="blend" if getattr(state, "bundle", None) else "model",
        state_bytes=state.state_bytes(),
        device=str(torch_device),
    )
    print(json.dumps(summary))
    return summary


def bundle_state(bundle: Bundle, model: str, net, device, cache_students: int, budget: int):
    """The state the bundle streams with: the model's online state and, where the bundle
    ships trees for <model>/ (common.model.trees.blend_bundle), the feature state beside it
    (common.stream.blend_state.BlendState: the blend is submitted) with the other
    architectures' states (common.stream.online.run_states). The feature state's planned
    bytes come out of `budget` first; the rest sizes the model's cache pool."""
    parts = np.load(str(bundle.parts))
    snapshot = Snapshot.load(bundle.snapshot)
    blend = BlendBundle.load(bundle.model(model), rewrite_in_bundle(model))
    if blend is None and net.config.past_features == "none":
        return OnlineState(net, parts, device, snapshot, cache_students, budget)
    features = FeatureSnapshot.load(bundle.features)
    members = member_models(bundle, model, device)
    model_state, others = run_states(
        net, snapshot, members, parts, device, cache_students, budget,
        feature_state_budget(features),
    )  # fmt: skip
    skills = np.load(str(bundle.skills))
    return BlendState(
        model_state, blend, parts, skills, features, others=others, primary=net.arch
    )  # fmt: skip


def member_models(bundle: Bundle, model: str, device) -> dict:
    """The other architectures the bundle ships beside <model>/'s (<model>/<arch>/best.pt,
    state/snapshot-<arch>.npz), by name: each one's model and a function that reads its
    snapshot (common.stream.online.run_states)."""
    members = {}
    for arch in ARCH_NAMES:
        path = bundle.model(model).member(arch).checkpoint()
        if path.exists():
            net, _ = load_model(path, device)
            members[arch] = (net, partial(Snapshot.load, bundle.member_snapshot(arch)))
    return members
