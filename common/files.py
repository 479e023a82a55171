"""Atomic outputs and run records.

Every writer in the project goes through `atomic_file` or `atomic_dir`: the content is
written under a temporary name beside its destination and moved into place with
`os.replace`, so an interrupted run leaves either the old output or the new one, never a
half-written file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common.errors import UserError


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path`, on error it is
    removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def check_folders(*paths: Path) -> None:
    """Refuse (UserError, before any work) a file, or anything but a folder, where one of
    `paths` names a folder a stage reads or writes: it would fail there later, half-way,
    or send the user back a stage that fails on the same file."""
    for path in paths:
        if path.exists() and not path.is_dir():
            raise UserError(
                f"{path} is a file where the pipeline keeps a folder: move or delete it"
            )


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory beside `path`; on success it takes the place of
    `path` (an older `path` is removed only after the new one is complete)."""
    path = Path(path)
    check_folders(path)  # before anything is written
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(path)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    try:
        yield tmp
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    finally:
        if old.exists() and not path.exists():  # stopped between the two renames
            os.replace(old, path)
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover)


@contextlib.contextmanager
def no_new_empty_folders(root: str | os.PathLike) -> Iterator[None]:
    """If the block fails (a refusal, an error, Ctrl-C), the folders it made under `root`
    (`root` included) that hold nothing are removed again: a refused stage leaves no empty
    output or run folder for later stages to take for a run. Folders that hold a file (a
    finished epoch, to resume from) stay."""
    root = Path(root)
    before = _folders(root)
    try:
        yield
    except BaseException:
        for folder in sorted(_folders(root) - before, key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):  # not empty: kept
                folder.rmdir()
        raise


def _folders(root: Path) -> set[Path]:
    if not root.is_dir():
        return set()
    found = {root}
    for parent, names, _ in os.walk(root):
        found.update(Path(parent) / name for name in names)
    return found


@contextlib.contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive flock on `path` while the block runs: processes that share a file (the
    runs table, a report folder) take turns. `path` is a file (made if missing) or an
    existing folder (locked in place: nothing is left beside the outputs)."""
    path = Path(path)
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY if path.is_dir() else os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(text)


def json_values(value: Any) -> Any:
    """`value` as JSON reads it back (tuples become lists, sorted keys), so a config from
    a file and one from flags, or a recorded one and the current one, compare equal."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), for benchmark headers."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment() -> dict[str, str]:
    """Versions of what shapes numerical results, recorded beside every run's outputs."""
    import numpy
    import pandas
    import pyarrow

    versions = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": numpy.__version__,
        "pandas": pandas.__version__,
        "pyarrow": pyarrow.__version__,
    }
    torch = sys.modules.get("torch")
    if torch is None:  # 00 to 02 compute nothing with torch (importing it costs them a second)
        versions["torch"] = "not used"
    else:
        versions["torch"] = torch.__version__
        versions["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        versions["torch_threads"] = str(torch.get_num_threads())
    return versions


def write_run_record(path: Path, config: Any) -> Path:
    """Write a stage's record (argv, resolved config, versions, start time) to `path` (a
    folder's `record(stage)` in common.workspace) and return it."""
    record = {
        "argv": sys.argv,
        "config": config,
        "environment": environment(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_json(path, record)
    return path


def remove_stale_temp_files(folder: Path) -> list[Path]:
    """Remove temp files (common.files' `.name.tmp-PID`) whose process is gone: what a
    run killed while writing leaves beside its outputs. Returns what was removed."""
    removed = []
    for path in folder.glob(".*.tmp-*"):
        pid = path.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _process_alive(int(pid)) and path.is_file():
            path.unlink()
            removed.append(path)
    return removed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
