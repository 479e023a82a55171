"""What the benchmark scripts share: the repository's places, the machine, the numbered
scripts (and the benchmarks' own modules) run as subprocesses, demo data, peak RSS of a
child, and each script's one results file, bench/results/<name>.txt, written atomically
with repository-relative paths.

The scripts import this module as `bench.benchlib` (they run as modules of the package
`bench` from the repository root) and the project as `common` (installed by
scripts/setup_env.sh with `pip install -e .`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from common import cli
from common.data.folds import FoldConfig
from common.files import cpu_model, write_text
from common.inputs.demo import DemoConfig
from common.train.config import TrainConfig
from common.workspace import ModelFolder, Run, Workspace, record_file

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
WORK = REPO / "bench" / "out"  # git-ignored
SHARED_DATA = REPO.parent / "shared" / "data"
GB = 1e9
# the GPU this project may be lent (an H200) and its free memory when a run starts: the
# CUDA batch plan is computed for it on the CPU (the plan needs no GPU)
H200_FREE_BYTES = 139 * 2**30

# (folder, what it is shown as, what a path below it starts with): the repository's own
# paths are shown relative to its root
_PLACES = (
    (REPO, ".", ""),
    (REPO.parent, "..", "../"),
    (Path.home(), "~", "~/"),
    (Path(tempfile.gettempdir()), "<tmp>", "<tmp>/"),
)


def relative(text: object) -> str:
    """`text` with no machine paths: the repository's root is '.' (paths below it are
    relative to it), its parent '..', the home folder '~' and the temp folder '<tmp>'."""
    text = str(text)
    for folder, bare, prefix in _PLACES:
        if len(folder.parts) > 1:  # never the root folder itself
            # a whole path only: not the tail of a longer one (a temp dir's .../work/x)
            pattern = r"(?<![\w./-])" + re.escape(str(folder)) + r"(/|(?![\w.-]))"
            text = re.sub(pattern, lambda m, b=bare, p=prefix: p if m[1] else b, text)
    return text


# ---------------------------------------------------------------------------------------
# the machine


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def memory_total_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024 / GB
    except OSError:
        pass
    return float("nan")


def load_average() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def machine(*packages: str) -> str:
    """CPU, cores, memory and the versions of Python and `packages` (default: torch)."""
    usable = len(os.sched_getaffinity(0))
    software = [f"Python {platform.python_version()}"]
    software += [f"{p} {version(p)}" for p in packages or ("torch",)]
    return (
        f"{cpu_model()}, {os.cpu_count()} cores ({usable} usable), "
        f"{memory_total_gb():.1f} GB; {', '.join(software)}"
    )


# ---------------------------------------------------------------------------------------
# the results file


class Report:
    """print() that keeps what it prints, machine paths made relative, for the script's
    results file (bench/results/<name>.txt unless another path is given)."""

    def __init__(self, name: str, path: Path | None = None) -> None:
        self.path = RESULTS / f"{name}.txt" if path is None else path
        self.lines: list[str] = []

    def __call__(self, *parts: object) -> None:
        line = relative(" ".join(map(str, parts)))
        print(line, flush=True)
        self.lines.append(line)

    def header(self, title: str, *packages: str) -> None:
        """The title, date, machine, command and load average."""
        self(title)
        self(f"date        {time.strftime('%Y-%m-%d %H:%M:%S %z')}")
        self(f"machine     {machine(*packages)}")
        self(f"command     {shown(this_command())}")
        self(f"load avg    {load_average()} (1, 5, 15 min) at start")
        self()

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def write(self) -> Path:
        write_text(self.path, self.text())
        print(f"wrote {relative(self.path)}", flush=True)
        return self.path


def results_flag(parser: argparse.ArgumentParser, name: str) -> None:
    """--results: where the script keeps what it printed."""
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS / f"{name}.txt",
        help=f"the output kept (default: bench/results/{name}.txt)",
    )


# ---------------------------------------------------------------------------------------
# subprocesses


def script(name: str, *args: object, code: Path = REPO) -> list[str]:
    """The command that runs the numbered script `name` of the checkout `code`."""
    return [sys.executable, str(code / name), *map(str, args)]


def module(name: str, *args: object) -> list[str]:
    """The command that runs the benchmark module `name` (e.g. bench.bench_train) as a
    script; run it from the repository root (benchlib.run's default cwd)."""
    return [sys.executable, "-m", name, *map(str, args)]


def this_command() -> list[str]:
    """How this process was started, as it can be typed again: a benchmark run as a module
    is `python -m bench.x ...`, not the path of its file (which would not import)."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    head = ["-m", spec.name] if spec is not None else sys.argv[:1]
    return [sys.executable, *head, *sys.argv[1:]]


def flags(**named: object) -> list[str]:
    """Command-line flags from keywords: output_dir=x gives `--output-dir x`, True a bare
    switch, False and None nothing."""
    out = []
    for name, value in named.items():
        if value is not None and value is not False:
            out += ["--" + name.replace("_", "-")] + ([] if value is True else [str(value)])
    return out


def shown(command: list[str]) -> str:
    """A command as printed: this Python as `python`, no machine paths."""
    if command[0] == sys.executable:
        command = ["python", *command[1:]]
    return relative(shlex.join(map(str, command)))


def run(
    command: list[str],
    log: Path | None = None,
    *,
    label: str | None = None,
    cwd: Path = REPO,
    env: dict | None = None,
    append: bool = False,
    say=print,
) -> float:
    """Run `command` from `cwd` (printed through `say` as `$ command`, or `  label:
    command` and its time), its output to `log` (appended with `append`) or to this
    process's. Returns its wall time in seconds; raises with the log's tail on failure."""
    say(f"  {label}: {shown(command)}" if label else f"$ {shown(command)}")
    begin = time.perf_counter()
    if log is None:
        done = subprocess.run(command, cwd=cwd, env=env, check=False)
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a" if append else "w") as out:
            done = subprocess.run(
                command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False
            )
    seconds = time.perf_counter() - begin
    if done.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:]) if log else ""
        where = f"; {relative(log)}" if log else ""
        raise RuntimeError(f"{shown(command)} failed (exit {done.returncode}){where}:\n{tail}")
    if label:
        say(f"  {label}: done in {seconds:.1f} s")
    return seconds


# Peak RSS comes from a small launcher between this process and the child: Linux carries
# the exec-ing process's high-water mark into the child's ru_maxrss, and this process holds
# far more than the launcher does. /usr/bin/time is that launcher where it exists; else a
# bare Python that reads the child's rusage with os.wait4. Both write KiB to a file.
TIME = Path("/usr/bin/time")
WAIT4_LAUNCHER = (
    "import os, subprocess, sys\n"
    "child = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(child.pid, 0)\n"
    "open(sys.argv[1], 'w').write(f'{usage.ru_maxrss}\\n')\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)
RSS_SOURCE = f"{TIME} -f %M" if TIME.exists() else "a Python launcher's os.wait4"


def with_peak_rss(command: list[str], rss_file: Path) -> list[str]:
    """`command` behind the launcher that writes its peak RSS to `rss_file`."""
    if TIME.exists():
        return [str(TIME), "-f", "%M", "-o", str(rss_file), *command]
    return [sys.executable, "-c", WAIT4_LAUNCHER, str(rss_file), *command]


def peak_gb() -> float:
    """This process's peak RSS so far, GB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def peak_rss_bytes(rss_file: Path) -> int:
    return int(rss_file.read_text().split()[-1]) * 1024  # KiB on Linux


# ---------------------------------------------------------------------------------------
# data


BENCH_RUN = "bench"  # the run a benchmark's output dir holds (03_train.py --run bench)

RECIPES = REPO / "configs"  # every pipeline's settings, a table per script (common/recipe.py)
DEMO_RECIPE = RECIPES / "demo.toml"  # run_demo.sh's


def recipe_flags(path: Path, stage: str, cls: type, leave_out=()) -> tuple[str, ...]:
    """The flags that set what the recipe's [stage] table sets of `cls`'s fields (its
    folders and run, and `leave_out`, left aside): a benchmark runs a script with a
    recipe's settings in folders of its own."""
    config, paths = cli.recipe_config(path, stage, cls, leave_out)
    return tuple(cli.to_argv(config, only=paths))


# the README's recipe for small data sets: run_demo.sh's training settings (03's table of
# its recipe, without the demo's fold and progress bars)
SMALL_DATA_RECIPE = recipe_flags(DEMO_RECIPE, "train", TrainConfig, ("fold", "progress"))
# the quick start's demo: its students (00's table) and folds (02's table)
DEMO, _ = cli.recipe_config(DEMO_RECIPE, "demo", DemoConfig)
DEMO_FLAGS = recipe_flags(DEMO_RECIPE, "demo", DemoConfig)
DEMO_FOLD_FLAGS = recipe_flags(DEMO_RECIPE, "folds", FoldConfig)


def bench_run(workspace: Workspace) -> Run:
    """The benchmark run of `workspace` (what 03_train.py --run bench writes)."""
    return workspace.run(BENCH_RUN)


def bench_fold(workspace: Workspace, k: int = 0) -> ModelFolder:
    """Fold `k` of the benchmark run of `workspace`."""
    return bench_run(workspace).fold(k)


def link_data(out: Path, prep: Workspace, folds: bool = True) -> Workspace:
    """The workspace `out` (made if missing) with data/ (and folds/ unless `folds` is
    false) linked (relative links) to those of the workspace `prep`: 03 and 04 run in
    `out` on shared preprocessing and folds."""
    out.mkdir(parents=True, exist_ok=True)
    workspace, shared = Workspace(out), Workspace(prep.path.resolve())
    pairs = [(workspace.data.path, shared.data.path)]
    if folds:
        pairs.append((workspace.folds.path, shared.folds.path))
    for link, target in pairs:
        if not link.is_symlink() and not link.exists():
            link.symlink_to(os.path.relpath(target, out.resolve()), target_is_directory=True)
    return workspace


def make_demo_input(folder: Path, users: int, seed: int, log: Path | None = None, say=print):
    """00_make_demo_input.py's demo of `users` students in `folder`, unless a demo of that
    size and seed is there."""
    record = record_file(folder, "demo")
    if record.exists() and (folder / "train.csv").exists():
        config = json.loads(record.read_text())["config"]
        if (config["n_users"], config["seed"]) == (users, seed):
            say(f"reusing {relative(folder)} ({users:,} students, seed {seed})")
            return
    demo = script("00_make_demo_input.py", "--users", users, "--seed", seed, "--output-dir", folder)
    run(demo, log, say=say)


def make_demo(
    input_dir: Path,
    prep_dir: Path,
    users: int,
    seed: int,
    fold_flags: tuple[str, ...] = (),
    logs: Path | None = None,
    say=print,
    code: Path = REPO,
) -> Workspace:
    """A demo of `users` students in `input_dir` (this repository's 00), preprocessed (01)
    and split (02 with `fold_flags`) into `prep_dir` by the checkout `code`'s scripts, each
    step's output in logs/0N.log (or printed); nothing is done when the folds are there.
    Returns the workspace `prep_dir`."""
    workspace = Workspace(prep_dir)
    if not workspace.folds.fold(0).exists():
        log = (lambda n: logs / f"{n}.log") if logs else (lambda n: None)
        make_demo_input(input_dir, users, seed, log("00"), say)
        flags = ("--input-dir", input_dir, "--output-dir", prep_dir, "--no-progress")
        run(script("01_preprocess.py", *flags, code=code), log("01"), say=say)
        folds = script("02_make_folds.py", "--output-dir", prep_dir, *fold_flags, code=code)
        run(folds, log("02"), say=say)
    return workspace
