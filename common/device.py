"""Where a model runs: the torch device a --device flag names, the CPU threads a --threads
flag gives, the autocast dtype an --amp flag gives on the device, and the processes of a
distributed run (torchrun's environment)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from common.options import at_least, option


def device_option():
    """The `--device` field of the training and streaming configs."""
    return option("auto", "auto: CUDA when present", choices=("auto", "cpu", "cuda"))


def check_device(name: str) -> None:
    """Refuse (ValueError, which a script's flag parsing turns into a usage error) a
    --device this machine does not have."""
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device here (--device cpu or auto)")


def threads_option():
    """The `--threads` field of the training and streaming configs."""
    return option(
        0,
        "CPU threads of torch and of the trees' fit (0: torch's default, one per core). On a "
        "machine other work shares, give the cores it leaves free: threads waiting on a busy "
        "core slow every step several times (bench/bench_threads.py)",
        range=at_least(0),
    )


def use_threads(n: int) -> None:
    """--threads n (0: left as they are): torch's CPU threads, and the OpenMP threads of
    scikit-learn's trees, limited now where its runtime is loaded and through
    OMP_NUM_THREADS (read when it loads: scikit-learn is imported at the first fit) where
    not; processes started from here inherit the variable."""
    if n == 0:
        return
    torch.set_num_threads(n)
    os.environ["OMP_NUM_THREADS"] = str(n)
    from threadpoolctl import threadpool_limits  # scikit-learn's own dependency

    threadpool_limits(n, user_api="openmp")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    return torch.device(name)


# bf16 tensor cores arrive with compute capability 8.0 (Ampere: A100, then H100, H200).
# torch.cuda.is_bf16_supported() also counts emulated bf16 (Kaggle's T4 is 7.5, its
# P100 6.0), which runs slower than fp32 there.
NATIVE_BF16_CAPABILITY = (8, 0)


def native_bf16(device: torch.device) -> bool:
    """Whether the CUDA device computes bf16 in hardware (not emulated)."""
    return torch.cuda.get_device_capability(device) >= NATIVE_BF16_CAPABILITY


def autocast_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for --amp: auto is off on CPU, bf16 where the GPU computes it
    natively, fp16 (with a gradient scaler, see common/train/trainer.py) on older GPUs; bf16
    asked for on a GPU without it is refused rather than emulated."""
    if amp not in ("auto", "bf16", "fp16", "off"):
        raise ValueError(f"--amp must be auto, bf16, fp16 or off, got {amp!r}")
    if amp == "off" or (amp == "auto" and device.type != "cuda"):
        return None
    if amp == "fp16":
        return torch.float16
    if device.type == "cuda" and not native_bf16(device):
        if amp == "bf16":
            capability = ".".join(map(str, torch.cuda.get_device_capability(device)))
            raise ValueError(
                f"--amp bf16: this GPU (compute capability {capability}) has no native bf16; "
                "use --amp fp16 or auto"
            )
        return torch.float16
    return torch.bfloat16


@dataclass
class Distributed:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls) -> Distributed:
        if "WORLD_SIZE" not in os.environ or int(os.environ["WORLD_SIZE"]) == 1:
            return cls()
        return cls(
            int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
        )

    def init(self, device: torch.device) -> None:
        """Join the process group (once per process: 03 trains several folds in it)."""
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")

    def close(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def broadcast(self, value: float) -> float:
        if self.world == 1:
            return value
        # NCCL moves CUDA tensors only
        on = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
        tensor = torch.tensor([value], dtype=torch.float64, device=on)
        dist.broadcast(tensor, 0)
        return float(tensor.item())
