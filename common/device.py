"""Where a model runs: the torch device a --device flag names, and the autocast dtype
an --amp flag gives on it."""

from __future__ import annotations

import torch


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    return torch.device(name)


def autocast_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    if amp == "off" or (amp == "auto" and device.type != "cuda"):
        return None
    if amp == "fp16":
        return torch.float16
    if amp in ("auto", "bf16"):
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            return torch.float16
        return torch.bfloat16
    raise ValueError(f"--amp must be auto, bf16, fp16 or off, got {amp!r}")
