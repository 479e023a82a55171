"""Checkpoints: saving (atomic, with a digest of the weights), reading with errors that
name the file, rebuilding the model a checkpoint records, and the RNG state a resumed run
continues from."""

from __future__ import annotations

import hashlib
import inspect
import random
from pathlib import Path

import numpy as np
import torch

from common.errors import UserError
from common.files import atomic_file
from common.model.interface import KTModel
from common.model.registry import build_model, checkpoint_arch, config_from_dict

# torch 2.6 made weights_only=True the default (it refuses this project's checkpoints, which
# hold configs and RNG state); torch 1.x, the competition's, has no such argument
LOAD_OPTIONS = (
    {"weights_only": False} if "weights_only" in inspect.signature(torch.load).parameters else {}
)
# what the Kaggle bundle's checkpoint keeps: the model and how it was chosen, in plain
# Python types (a training checkpoint pickles numpy 2 RNG state, which the competition's
# numpy 1.19 cannot unpickle)
INFERENCE_KEYS = (
    "arch", "model_config", "model_state", "epoch", "best_epoch", "fold", "selected_on",
)  # fmt: skip


def rng_state() -> dict:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: Path, payload: dict) -> None:
    """Write a checkpoint atomically, with a digest of its weights that load_model checks
    (damage inside tensor data would otherwise load silently)."""
    payload = {**payload, "model_digest": state_digest(payload["model_state"])}
    with atomic_file(path) as tmp:
        torch.save(payload, tmp)


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be used: missing, unreadable (truncated or corrupted), or
    holding weights of another model config than the one it records. The message names
    the file."""


def save_model(path: Path, model: KTModel, **recorded) -> None:
    """A checkpoint of `model` (its architecture, config and weights) and the `recorded`
    keys: how benchmarks stream a model of fresh weights."""
    state = {
        "arch": model.arch,
        "model_config": model.config.to_dict(),
        "model_state": model.state_dict(),
    }
    save_checkpoint(path, {**state, **recorded})


def save_inference_checkpoint(source: Path, dest: Path):
    """Write the checkpoint `source` as the bundle's: its INFERENCE_KEYS only, readable by
    the competition's torch 1.7 and numpy 1.19, with the same weights digest. Returns the
    model config it records."""
    checkpoint = read_checkpoint(source, "cpu")
    lean = {k: checkpoint[k] for k in INFERENCE_KEYS if k in checkpoint}
    arch = checkpoint_arch(checkpoint)
    config = config_from_dict(arch, checkpoint["model_config"])
    lean["arch"] = arch
    lean["model_config"] = config.to_dict()
    lean["source"] = source.name
    save_checkpoint(dest, lean)
    return config


def read_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> dict:
    """torch.load, with a CheckpointError naming the file when it is missing or is not a
    readable checkpoint of this project."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found (03_train.py writes it)")
    try:
        checkpoint = torch.load(path, map_location=device, **LOAD_OPTIONS)
    # Unpickling a damaged file can raise nearly any exception type (RuntimeError from the
    # zip reader, EOFError, UnpicklingError, UnicodeDecodeError, ...); the cause is chained.
    except Exception as error:
        first_sentence = (str(error).splitlines() or [""])[0].split(". ")[0][:160]
        raise CheckpointError(
            f"{path}: not a readable checkpoint ({path.stat().st_size:,} bytes; truncated or "
            f"corrupted?): {type(error).__name__}: {first_sentence}"
        ) from error
    for key in ("model_config", "model_state"):
        if not isinstance(checkpoint, dict) or key not in checkpoint:
            raise CheckpointError(f"{path}: not a checkpoint of this project (no {key!r})")
    return checkpoint


def state_digest(state: dict[str, torch.Tensor]) -> str:
    """sha256 over a state dict's names, shapes, dtypes and bytes: a checkpoint that
    records it is checked on load, which catches damage inside tensor data that the zip
    reader does not notice."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(_raw_bytes(tensor))
    return digest.hexdigest()


def _raw_bytes(tensor: torch.Tensor) -> bytes:
    """A contiguous CPU tensor's memory (numpy has no bfloat16: that goes through a
    uint8 view, which torch 1.7, the competition's, cannot take of other dtypes)."""
    if tensor.dtype == torch.bfloat16:
        return tensor.view(-1).view(torch.uint8).numpy().tobytes()
    return tensor.numpy().tobytes()


def dict_differences(found: dict, expected: dict, limit: int = 6) -> str:
    """'key: <found> vs <expected>' for each key whose values differ ('<none>' where a
    dict lacks the key), at most `limit` of them; '' when the dicts agree."""

    def shown(values: dict, key) -> str:
        return repr(values[key]) if key in values else "<none>"

    keys = sorted(set(found) | set(expected), key=str)
    parts = [
        f"{k}: {shown(found, k)} vs {shown(expected, k)}"
        for k in keys
        if k not in found or k not in expected or found[k] != expected[k]
    ]
    more = f" (+{len(parts) - limit} more)" if len(parts) > limit else ""
    return "; ".join(parts[:limit]) + more


def state_mismatch(state: dict[str, torch.Tensor], model: torch.nn.Module) -> str:
    """Which weights of `state` do not fit `model` (missing, unexpected, other shape)."""
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in state.items()}
    return dict_differences(found, shapes)


def load_model(path: str | Path, device: torch.device | str = "cpu") -> tuple[KTModel, dict]:
    """Rebuild a model from a checkpoint alone (its architecture, common.model.registry,
    and config); returns (model in eval mode, checkpoint).

    Raises CheckpointError naming the file when it is missing or damaged, or when its
    weights do not fit the model config it records."""
    checkpoint = read_checkpoint(path, device)
    try:
        config = config_from_dict(checkpoint_arch(checkpoint), checkpoint["model_config"])
    except (TypeError, ValueError, UserError) as error:
        raise CheckpointError(
            f"{path}: its model_config does not fit this code: {error}"
        ) from error
    model = build_model(checkpoint_arch(checkpoint), config).to(device)
    state = checkpoint["model_state"]
    mismatch = state_mismatch(state, model)
    if mismatch:
        raise CheckpointError(
            f"{path}: its weights are of another model config than the one it records "
            f"(weight: checkpoint shape vs its config's shape) {mismatch}"
        )
    recorded = checkpoint.get("model_digest")
    if recorded is not None and recorded != state_digest(state):
        raise CheckpointError(f"{path}: its weights do not match their recorded digest (corrupted)")
    model.load_state_dict(state)
    checkpoint["arch"] = checkpoint_arch(checkpoint)
    return model.eval(), checkpoint


def check_resumable(
    path: Path, checkpoint: dict, arch: str, model_config, fingerprint: dict | None
) -> None:
    """Refuse to resume from a checkpoint of another architecture, model config or other
    folds."""
    if checkpoint_arch(checkpoint) != arch:
        raise CheckpointError(
            f"{path} holds a {checkpoint_arch(checkpoint)} model, this run trains {arch}; "
            "resume with the same --arch or start in another --output-dir"
        )
    # through the config class, so that a field added since the checkpoint reads as its
    # default
    recorded = config_from_dict(arch, checkpoint["model_config"]).to_dict()
    differences = dict_differences(recorded, model_config.to_dict())
    if differences:
        raise CheckpointError(
            f"{path} was trained with another model config (key: checkpoint vs this run) "
            f"{differences}; resume with the same flags or start in another --output-dir"
        )
    recorded_folds = checkpoint.get("fold_fingerprint")
    if fingerprint is not None and recorded_folds != fingerprint:
        raise CheckpointError(
            f"{path} was trained on other folds (fingerprint "
            f"{(recorded_folds or {}).get('sha256')}) than those on disk now "
            f"({fingerprint['sha256']}); start in another --output-dir"
        )
