"""Stage 1's peak memory (common.data.preprocess), estimated from train.csv's size before
anything is read in full or written, and the check that refuses an input whose estimate
exceeds the budget. `config` is the run's PreprocessConfig (common.data.preprocess, which
imports this module, so the type is not named here).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path

from common.data.schema import InputError

# Measured (bench/results/preprocess.txt, peak RSS of 01_preprocess.py on 1M-10M demo rows):
# start-up and the per-block working set 0.20-0.31 GB; pyarrow's readahead, up to 32 blocks
# of raw text (the whole file when smaller); ~100 B per student (the seen-user set and the
# student index); and, only when row_ids are not increasing, 17 B per row for the
# duplicate check (a sorted copy 8, flags 1, the memory-mapped row_id 8). Every term is
# taken at or above its measured value, then a margin on the sum.
MEMORY_FIXED_BYTES = 400_000_000  # start-up and working set: 0.31 GB measured at 10M rows
# pyarrow's kDefaultBackgroundMaxQ (see common.data.preprocess.PreprocessConfig.block_size)
READAHEAD_BLOCKS = 32
MEMORY_PER_STUDENT = 200  # ~100 B measured
MEMORY_PER_ROW_ID_CHECK = 17  # bytes per row when row_ids are not increasing
MEMORY_MARGIN = 1.25
SAMPLE_BYTES = 4 << 20  # head of train.csv read for bytes per row and students per byte


@dataclass
class MemoryEstimate:
    file_bytes: int
    rows: int  # the file's size over the sample's bytes per row
    students: int  # twice the sample's students per byte, over the whole file
    peak_bytes: int

    def describe(self) -> str:
        return (
            f"{self.file_bytes / 1e9:.2f} GB of CSV, ~{self.rows:,} rows, "
            f"~{self.students:,} students: estimated peak {self.peak_bytes / 1e9:.2f} GB"
        )


def estimate_peak_memory(path: Path, config) -> MemoryEstimate:
    """A conservative estimate of the run's peak memory from train.csv's size and its
    first SAMPLE_BYTES: rows from the head's bytes per row (row_id and timestamp only grow
    longer further down, so this overcounts), students at twice the head's rate, and the
    row_id duplicate check counted unless --assign-row-ids numbers the rows."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        header = handle.readline()
        head = handle.read(SAMPLE_BYTES)
    lines = head.split(b"\n")[:-1] if len(head) == SAMPLE_BYTES else head.splitlines()
    body = size - len(header)
    if not lines or body <= 0:
        return MemoryEstimate(size, 0, 0, int(MEMORY_MARGIN * MEMORY_FIXED_BYTES))
    sampled = sum(len(line) + 1 for line in lines)
    rows = math.ceil(body * len(lines) / sampled)
    columns = header.decode("utf-8", errors="replace").strip().split(",")
    column = columns.index("user_id") if "user_id" in columns else 0
    users = {line.split(b",")[column] for line in lines if line.count(b",") >= column}
    students = min(rows, math.ceil(2 * len(users) * body / sampled))
    row_id_check = 0 if config.assign_row_ids else MEMORY_PER_ROW_ID_CHECK * rows
    peak = MEMORY_MARGIN * (
        MEMORY_FIXED_BYTES
        + min(size, READAHEAD_BLOCKS * config.block_size)
        + MEMORY_PER_STUDENT * students
        + row_id_check
    )
    return MemoryEstimate(size, rows, students, int(peak))


def available_memory() -> int | None:
    """Bytes this process can still take: MemAvailable, lowered to the cgroup's free
    limit inside a container (where the OOM killer acts); None when unknown."""
    candidates = []
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                candidates.append(int(line.split()[1]) * 1024)
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        with contextlib.suppress(OSError, ValueError):
            limit = Path(limit_file).read_text().strip()
            if limit != "max" and int(limit) < 1 << 60:
                candidates.append(int(limit) - int(Path(usage_file).read_text()))
    return min(candidates) if candidates else None


def check_memory(path: Path, config) -> MemoryEstimate | None:
    """Raise InputError when train.csv's estimated peak exceeds the budget."""
    if not path.is_file() or config.max_memory == 0:
        return None
    estimate = estimate_peak_memory(path, config)
    if config.max_memory is None:
        budget, source = available_memory(), "the memory available now"
        if budget is None:
            return estimate
    else:
        budget, source = int(config.max_memory * 1e9), "--max-memory"
    if estimate.peak_bytes > budget:
        raise InputError(
            str(path),
            f"an estimated peak within {budget / 1e9:.2f} GB ({source}); pass a larger "
            "--max-memory if the machine has it, or --max-memory 0 to skip this check",
            value=estimate.describe(),
        )
    return estimate
