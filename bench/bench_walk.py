"""How the output folder moves through the calls of one 03 and one 04 run (issue 36's
"climbs"), measured by tracing the calls themselves on a small demo.

Each folder a call receives is put on a floor: the output folder itself (a Workspace, or
its path) is floor 0; anything directly under it (data/, folds/, runs/NAME: a Run, a
DataFolder) floor 1; a run's fold{k}/ or full/ (a ModelFolder, or its path) floor 2.
Below the stage's entry (`train` for 03, `infer` for 04), the data stands on the deepest
floor its nearest caller that received a folder was handed; a *climb* is a call that
receives a folder on a floor above where the data stood: it had gone down and is fetched
back up. Counted once per call site (caller, callee). Also counted: the functions that
received a bare folder path (not a workspace object), and the disk reads of the data
set, the folds' manifest and a fold.

The script names nothing of the code's internals but its entry points' names and the
stage folders' names, so the same command measures an older checkout (run it there with
`PYTHONPATH=<checkout> python <this file> --code <checkout>`).

python -m bench.bench_walk                      (bench/results/walk.txt)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import sys
import tempfile
from collections import Counter
from pathlib import Path

ENTRIES = {"03": "train", "04": "infer"}
OBJECT_FLOORS = {"Workspace": 0, "Run": 1, "DataFolder": 1, "FoldsFolder": 1, "ModelFolder": 2}
# the disk reads counted; the folds' manifest is read by _read_fold_config where
# load_fold_config keeps what it read, by load_fold_config itself in the older code
READS = {("dataset", "load"): "data set", ("fold_data", "_read_fold_config"): "manifest"}
READS |= {("fold_data", "load_fold_config"): "manifest calls"}
DEMO = ("--users", "120", "--seed", "0")
TRAIN = ("--run", "walk", "--fold", "0", "--d-model", "16", "--layers", "1", "--heads", "2")
TRAIN += ("--window", "20", "--batch-size", "32", "--epochs", "1", "--no-progress")


class Tracer:
    """sys.settrace hook (on calls only: it returns no local tracer, so no line events):
    for each call in common/ below the entry, the floor of the folders it received, and
    where the data stood (the floor of the nearest caller that received one)."""

    def __init__(self, package: Path, output: Path, entry: str):
        self.package, self.output, self.entry = str(package), output.resolve(), entry
        self.root = str(self.output)
        self.floors: dict[int, tuple[object, int]] = {}  # id(frame): (frame, deepest floor)
        self.climbs: Counter[tuple[str, str]] = Counter()
        self.bare: set[str] = set()
        self.reads: Counter[str] = Counter()

    def floor(self, value: object) -> int | None:
        floor = OBJECT_FLOORS.get(type(value).__name__)
        if floor is not None or not isinstance(value, (str, Path)):
            return floor
        text = str(value)  # the scripts get the output folder as an absolute path
        if not text.startswith(self.root):
            return None
        parts = Path(text).relative_to(self.output).parts
        if len(parts) > 3 or "." in "".join(parts[-1:]):
            return None  # a file, or deeper than a fold folder
        return min(len(parts), 2) if parts[:1] != ("runs",) else min(len(parts) - 1, 2)

    def standing(self, frame) -> tuple[object, int] | None:
        """(the nearest caller frame that received a folder, its floor), or None above
        the entry."""
        caller = frame.f_back
        while caller is not None:
            held = self.floors.get(id(caller))
            if held is not None and held[0] is caller:
                return held
            if caller.f_code.co_name == self.entry and caller.f_code.co_filename.startswith(
                self.package
            ):
                return None
            caller = caller.f_back
        return None

    def __call__(self, frame, event, arg) -> None:
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(self.package):
            return None
        module, name = Path(code.co_filename).stem, code.co_name
        if (module, name) in READS:
            self.reads[READS[(module, name)]] += 1
        if module == "fold_data" and name == "load" and "index" in code.co_varnames:
            self.reads["fold"] += 1
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        values = [frame.f_locals.get(n) for n in names if n != "self"]
        received = [(v, f) for v in values if (f := self.floor(v)) is not None]
        if not received:
            return None
        where = f"{module}.{name}"
        if any(isinstance(v, (str, Path)) for v, _ in received):
            self.bare.add(where)
        floors = [f for _, f in received]
        held = self.standing(frame) if name != self.entry else None
        if held is not None and min(floors) < held[1]:
            caller = held[0].f_code
            self.climbs[(f"{Path(caller.co_filename).stem}.{caller.co_name}", where)] += 1
        self.floors[id(frame)] = (frame, max(floors))
        return None


def script(code: Path, name: str):
    path = next(code.glob(f"{name}_*.py"))
    spec = importlib.util.spec_from_file_location(f"stage_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_quietly(code: Path, name: str, argv: list[str]) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        status = script(code, name).main(argv)
    if status:
        raise SystemExit(f"{name} failed ({status})")


def traced(code: Path, stage: str, output: Path, argv: list[str]) -> Tracer:
    print(f"tracing {stage}", file=sys.stderr, flush=True)
    tracer = Tracer(code / "common", output, ENTRIES[stage])
    sys.settrace(tracer)
    try:
        run_quietly(code, stage, argv)
    finally:
        sys.settrace(None)
    return tracer


def measure(code: Path, work: Path) -> dict[str, Tracer]:
    inputs, output = work / "input", (work / "output").resolve()
    run_quietly(code, "00", [*DEMO, "--output-dir", str(inputs)])
    paths = ["--output-dir", str(output)]
    run_quietly(code, "01", ["--input-dir", str(inputs), *paths, "--no-progress"])
    run_quietly(code, "02", [*paths, "--n-folds", "5", "--seed", "0"])
    train = traced(code, "03", output, [*paths, *TRAIN])
    infer = traced(code, "04", output, [*paths, "--run", "walk", "--fold", "0", "--no-progress"])
    return {"03": train, "04": infer}


def report(found: dict[str, Tracer], code: Path) -> list[str]:
    lines = [f"code: {code.name or code}", ""]
    for stage, tracer in found.items():
        calls = tracer.reads.pop("manifest calls", 0)
        tracer.reads["manifest"] = tracer.reads.get("manifest") or calls
        lines.append(
            f"{stage} (from {ENTRIES[stage]}): {len(tracer.climbs)} climbs back up; "
            f"{len(tracer.bare)} functions received a bare folder path; reads: "
            + ", ".join(f"{k} {v}" for k, v in sorted(tracer.reads.items()))
        )
        lines += [f"    climb: {caller} -> {callee}" for caller, callee in sorted(tracer.climbs)]
        lines += [f"    bare path: {where}" for where in sorted(tracer.bare)]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = Path(__file__).resolve().parents[1]
    parser.add_argument("--code", type=Path, default=here, help="the checkout measured")
    parser.add_argument(
        "--results", type=Path, default=here / "bench" / "results" / "walk.txt", help="kept here"
    )
    args = parser.parse_args(argv)
    code = args.code.resolve()
    with tempfile.TemporaryDirectory() as work:
        work = Path(work).resolve()
        lines = report(measure(code, Path(work)), code)
    print("\n".join(lines))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
