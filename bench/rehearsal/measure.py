"""How the Riiid-size rehearsal (bench/rehearsal/stages.py) measures: a stage's wall time and the
peak memory of its process tree, and the FLOPs, aten ops and bytes of what runs under its
counters (the one-GPU projection's inputs)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from bench.benchlib import peak_rss_bytes, run, shown, with_peak_rss

# ---------------------------------------------------------------------------------------
# running a stage: wall time and peak RSS


def _descendants(root: int) -> set[int]:
    """Process `root` and all its descendants (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
            except (OSError, ValueError):
                continue
    tree, frontier = {root}, [root]
    while frontier:
        frontier = [pid for pid, ppid in parents.items() if ppid in frontier]
        tree.update(frontier)
    return tree


def _pss(pid: int) -> int:
    """Proportional set size of `pid`: its resident bytes, pages shared with other
    processes (a forked worker's copy-on-write pages) divided among them, so a sum over
    processes counts each page once."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class TreeRss:
    """Samples the summed PSS of this process's children and their descendants (every
    `every` s) while the block runs: the memory of a stage that forks workers."""

    def __init__(self, every: float = 0.5) -> None:
        self.every, self.peak, self._stop = every, 0, threading.Event()

    def __enter__(self) -> TreeRss:
        def sample() -> None:
            me = os.getpid()
            while not self._stop.wait(self.every):
                tree = _descendants(me) - {me}
                self.peak = max(self.peak, sum(_pss(pid) for pid in tree))

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Measured:
    """A stage's process: wall seconds, the largest process's peak RSS (/usr/bin/time or
    wait4) and the sampled peak PSS of its whole process tree (workers included)."""

    command: str
    seconds: float
    peak_rss: int
    tree_rss: int
    load: float  # 1-minute load average when the stage began (2 cores: above 2 is contention)

    @property
    def peak(self) -> int:
        return max(self.peak_rss, self.tree_rss)


def measure(command: list, log: Path, env: dict | None = None, say=print) -> Measured:
    """Run `command` (its output to `log`) behind the peak-RSS launcher."""
    command = [str(part) for part in command]
    rss_file = log.with_suffix(".maxrss")
    log.parent.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    with TreeRss() as tree:
        seconds = run(with_peak_rss(command, rss_file), log, env=env, say=lambda *_: None)
    say(f"  $ {shown(command)}  ({seconds:.1f} s)")
    return Measured(shown(command), seconds, peak_rss_bytes(rss_file), tree.peak, load)


# ---------------------------------------------------------------------------------------
# counting FLOPs and bytes


class OpCounter(TorchDispatchMode):
    """Counts the aten operations run and the bytes of their tensor inputs and outputs:
    the memory traffic of eager execution, where each op reads its inputs from memory
    and writes its outputs back (no fusion). Views move nothing and are not counted; a
    broadcast tensor counts its storage, not its logical size."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view:
            return out
        leaves = tree_flatten((args, kwargs or {}))[0] + tree_flatten(out)[0]
        self.ops += 1
        self.bytes += sum(_moved(t) for t in leaves if isinstance(t, torch.Tensor))
        return out


def _moved(tensor: torch.Tensor) -> int:
    return min(tensor.nbytes, tensor.untyped_storage().nbytes())


def counted(fn) -> dict:
    """FLOPs (torch's FlopCounterMode), aten ops and their bytes of one call of `fn`."""
    with FlopCounterMode(display=False) as flops:
        fn()
    with OpCounter() as ops:
        fn()
    return {"flops": flops.get_total_flops(), "ops": ops.ops, "bytes": ops.bytes}


class Counters:
    """FLOPs (FlopCounterMode) and aten ops and bytes (OpCounter) of what runs inside,
    summed into an object's `totals` by add_to."""

    def __enter__(self) -> Counters:
        self.flops, self.ops = FlopCounterMode(display=False), OpCounter()
        self.flops.__enter__()
        self.ops.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.ops.__exit__(*exc)
        self.flops.__exit__(*exc)

    def add_to(self, holder) -> None:
        totals = getattr(holder, "totals", {"flops": 0, "ops": 0, "bytes": 0})
        totals["flops"] += self.flops.get_total_flops()
        totals["ops"] += self.ops.ops
        totals["bytes"] += self.ops.bytes
        holder.totals = totals
