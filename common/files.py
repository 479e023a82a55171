"""Atomic outputs, run records, locks, and the operating system's write errors.

Every writer in the project goes through `atomic_file` or `atomic_dir`: the content is
written under a temporary name beside its destination and moved into place with
`os.replace`, so an interrupted run leaves either the old output or the new one, never a
half-written file. A temp file or folder a killed run left (`.<name>.tmp-<pid>`, its
process gone) is removed by the next write of the same output. A write the operating
system refuses (a full disk, a read-only folder, ...) becomes a `WriteError` naming the
output and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import glob
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from common.errors import UserError

# what to do about each write error of the operating system (and where a path is read,
# e.g. an unreadable input, the same words hold)
WRITE_ERRORS = {
    errno.ENOSPC: "no space left on the device: free some there, or choose another "
    "--output-dir, and run the command again",
    errno.EDQUOT: "the disk quota is used up: free some space there, or choose another "
    "--output-dir, and run the command again",
    errno.EROFS: "the file system is read-only: choose another --output-dir, or make it writable",
    errno.EACCES: "permission denied: give this user access to it (chmod, chown), or choose "
    "another --output-dir",
    errno.EPERM: "operation not permitted: give this user access to it, or choose another "
    "--output-dir",
    errno.ENAMETOOLONG: "a name on the path is too long for the file system: choose a "
    "shorter --output-dir or --run NAME",
    errno.ENOENT: "its folder vanished while the stage ran (moved or deleted?): put it "
    "back, or run the command again",
}
_ALWAYS_WRITES = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # never a read's error


class WriteError(UserError):
    """The operating system refused to write an output: the path and what to do."""


def write_error(error: OSError, path: object) -> WriteError:
    """`error` (an errno of WRITE_ERRORS) while writing `path`, as one line."""
    advice = WRITE_ERRORS.get(error.errno) or (error.strerror or str(error))
    return WriteError(f"cannot write {path}: {advice}")


def os_error_line(error: OSError) -> str | None:
    """A WRITE_ERRORS error raised outside the atomic writers (a folder made, a file
    opened), as one line naming its path; None for another error."""
    if error.errno not in WRITE_ERRORS:
        return None
    where = error.filename if error.filename is not None else "a file"
    return f"{where}: {error.strerror}; {WRITE_ERRORS[error.errno]}"


def _write_failure(error: Exception, folder: Path) -> OSError | None:
    """The write error behind `error`, raised while writing in `folder`: an OSError of
    WRITE_ERRORS about the destination (a library may raise its own error, or none with
    a path, when a write fails: then a vanished folder or a full disk is looked for);
    None when `error` is something else (a bug, bad input), raised as it is."""
    if isinstance(error, OSError) and error.errno in _ALWAYS_WRITES:
        return error
    if isinstance(error, OSError) and error.errno in WRITE_ERRORS and error.filename:
        if error.errno == errno.ENOENT:  # a missing input is not a vanished folder
            return None if folder.is_dir() else error
        named, within = os.path.abspath(str(error.filename)), os.path.abspath(folder)
        # else another file's error (an input read inside the block): raised as it is
        return error if os.path.commonpath([named, within]) == within else None
    if not folder.is_dir():
        return OSError(errno.ENOENT, os.strerror(errno.ENOENT), str(folder))
    with contextlib.suppress(OSError):
        if os.statvfs(folder).f_bavail == 0:  # torch and matplotlib hide the ENOSPC
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder))
    return None


@contextlib.contextmanager
def writing(path: Path, folder: Path | None = None, shown: object = None) -> Iterator[None]:
    """Turn a write error raised in the block (writing `path`, in `folder`: by default
    its parent) into a WriteError naming `shown` (default `path`)."""
    try:
        yield
    except UserError:
        raise
    except Exception as error:
        failure = _write_failure(error, folder or path.parent)
        if failure is None:
            raise
        raise write_error(failure, shown or path) from error


def check_writable(folder: str | os.PathLike) -> None:
    """Refuse (WriteError) a folder a stage could not write in, before its work: it is
    made (with its parents) and a small file is written there, then removed. A link is
    followed (the stage writes where it points); a file there is refused (check_folders)."""
    given = Path(folder)
    check_folders(given)
    folder = Path(os.path.realpath(given))
    name = "write-check"
    probe = _temp_name(folder / name)
    try:
        with writing(probe, folder, given):
            folder.mkdir(parents=True, exist_ok=True)
            remove_stale_temp_files(folder, name)  # a killed check's
            with open(probe, "wb") as handle:
                handle.write(bytes(4096))
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path`, on error it is
    removed (a write error is raised as a WriteError naming `path`)."""
    path = Path(path)
    tmp = _temp_name(path)
    try:
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            remove_stale_temp_files(path.parent, path.name)
            yield tmp
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):  # never made (its name too long), or its folder gone
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
def atomic_dir(path: str | os.PathLike, owns: Sequence[str] | None = None) -> Iterator[Path]:
    """Yield an empty temporary directory beside `path`; on success it takes the place of
    `path` (an older `path` is removed only after the new one is complete).

    owns: the names (fnmatch patterns) of what the stage writes in `path`. Whatever else
    an older `path` holds (a user's notes, another stage's folder) is kept: hard-linked
    into the temporary folder before the stage writes, so it survives the swap, and a
    stop at any point leaves the original where it was (refused before any work where it
    cannot be linked). None: the stage owns the whole folder. A symbolic link at `path` is
    followed: the folder it points to is replaced, the link stays."""
    link, path = Path(path), _followed(Path(path))
    shown = path if link == path else f"{path} (where the link {link} points)"
    tmp = _temp_name(path)
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    try:
        with writing(path, path.parent, shown):
            path.parent.mkdir(parents=True, exist_ok=True)
            _clear_stale_swaps(path)
            tmp.mkdir()
            _keep_others(path, tmp, owns)
            yield tmp
            if path.exists():
                os.replace(path, old)
            os.replace(tmp, path)
    except WriteError as error:  # of a file in the temporary folder: named where it goes
        raise WriteError(str(error).replace(str(tmp), str(path))) from error
    finally:
        if old.exists() and not path.exists():  # stopped between the two renames
            os.replace(old, path)
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover)


def _followed(path: Path) -> Path:
    """`path`, or the folder the symbolic link at `path` points to (checked: a folder, or
    nothing yet in a folder that exists)."""
    check_folders(path)
    if not path.is_symlink():
        return path
    target = Path(os.path.realpath(path))
    if not target.parent.is_dir():
        raise UserError(
            f"{path} is a link to {target}, whose folder {target.parent} does not exist: "
            "make it, or remove the link"
        )
    return target


def _clear_stale_swaps(path: Path) -> None:
    """What a killed swap of `path` left beside it: its temp folders (removed), and a
    previous folder moved aside (`.<name>.old-<pid>`): put back where `path` is missing
    (the kill fell between the two renames), removed where the new one took its place."""
    remove_stale_temp_files(path.parent, path.name)
    for old in _of_dead_processes(path.parent, f".{glob.escape(path.name)}.old-*"):
        if old.is_symlink() or not old.is_dir():
            continue  # not a folder this module moved aside
        if path.exists() or path.is_symlink():
            shutil.rmtree(old)
        else:
            os.replace(old, path)
            print(f"note: {path} put back from {old.name}, left by a stopped run", file=sys.stderr)


def _keep_others(path: Path, tmp: Path, owns: Sequence[str] | None) -> None:
    """Hard-link into `tmp` each entry of `path` whose name `owns` does not match."""
    if owns is None or not path.is_dir():
        return
    for entry in sorted(path.iterdir()):
        if any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in owns):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.copytree(entry, tmp / entry.name, symlinks=True, copy_function=os.link)
            else:
                os.link(entry, tmp / entry.name, follow_symlinks=False)
        except (OSError, shutil.Error) as error:
            raise UserError(
                f"{path} holds {entry.name}, which this stage does not write, and it cannot "
                f"be kept while the folder is replaced ({error}): move it out of {path}"
            ) from None


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


class LockHeld(UserError):
    """Another process holds the lock (file_lock with a holder file)."""


@contextlib.contextmanager
def file_lock(path: str | os.PathLike, holder: Path | None = None) -> Iterator[None]:
    """An exclusive flock on `path` while the block runs: processes that share a file (the
    runs table, a report folder) take turns. `path` is a file (made if missing) or an
    existing folder (locked in place: nothing is left beside the outputs).

    holder: a file naming the process that holds the lock (pid, command), removed when it
    ends. With it a second process does not wait its turn: it is refused at once
    (LockHeld, naming the holder). A holder killed leaves its file but not its lock (the
    kernel releases it): the next process takes the lock over and says so."""
    path = Path(path)
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY if path.is_dir() else os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if holder is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
            return
        _take(fd, path, holder)
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                holder.unlink()
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _take(fd: int, path: Path, holder: Path) -> None:
    """file_lock's lock without waiting, the holder file written (a dead holder's noted)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise LockHeld(
            f"{path} is in use by {_holder_text(holder)}: one process writes it at a time; "
            "wait for that one to end, or stop it"
        ) from None
    if holder.exists():
        print(
            f"note: took over the lock of {path} from {_holder_text(holder)}, which is "
            "no longer running",
            file=sys.stderr,
        )
    command = " ".join([Path(sys.executable).name, *sys.argv])
    write_json(holder, {"pid": os.getpid(), "command": command, "since": _now()})


def _holder_text(holder: Path) -> str:
    """'pid N (command), since T' from a holder file; what is known where it is unread."""
    try:
        found = json.loads(holder.read_text())
        return f"pid {found['pid']} ({found['command']}), since {found['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return f"another process (its record {holder} is not written yet, or unreadable)"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


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
        "started": _now(),
    }
    write_json(path, record)
    return path


def remove_stale_temp_files(folder: Path, name: str = "*") -> list[Path]:
    """Remove the temp files and folders (common.files' `.name.tmp-PID`; of output `name`,
    or any) whose process is gone: what a run killed while writing leaves beside its
    outputs. Returns what was removed."""
    pattern = f".{'*' if name == '*' else glob.escape(name)}.tmp-*"
    removed = []
    for path in _of_dead_processes(folder, pattern):
        with contextlib.suppress(FileNotFoundError):  # another run removed it first
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
    return removed


def _of_dead_processes(folder: Path, pattern: str) -> list[Path]:
    """The names in `folder` matching `pattern` that end in `-PID` of a process gone."""
    found = []
    for path in folder.glob(pattern):
        pid = path.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _process_alive(int(pid)):
            found.append(path)
    return found


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
