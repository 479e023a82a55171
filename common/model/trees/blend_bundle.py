"""The submission's second scorer, as files beside the checkpoint it is blended with:
the boosted trees (common.model.trees.forest), the inputs their past-event features read (the
training rows' question-rate table, each question's skill) and the blend's weight with how
it was chosen. 04 writes them into fold{k}/ or full/, the Kaggle bundle ships them in
<model>/, and every reader (05, 04's export and --full, the notebook) goes through
`BlendBundle.load`: none of the three files means no trees; one missing beside the others,
a damaged one, or arrays that are not the ones blend.json was written with, is refused
naming the file and the command that writes it again.

This module ships in the Kaggle bundle: Python 3.7, numpy 1.19.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import dataclass, fields

import numpy as np

from common.data.question_rates import QuestionRates
from common.errors import UserError
from common.files import atomic_file, write_json
from common.model.trees.forest import Trees, logit_blend, read_arrays, stacked_blend
from common.workspace import ModelFolder

# blend.json's record of each array file's digest (arrays_digest), by file name: a file
# changed, or copied from another folder, after 04 wrote it is told apart from a damaged one
DIGESTS = "digests"
# what reading an .npz that is damaged or not one raises (numpy, zipfile, the OS)
NPZ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile)
INPUT_ARRAYS = ("rate", "count", "global_rate", "skill")  # tree_inputs.npz
TREES_WEIGHT = "trees"  # the trees' key in a stacked blend's weights
# BlendBundle.load's `again` where its caller names no command (rewrite_in_run does)
REWRITE = "04_infer.py writes them again (the fold streamed, or --full, again)"


class BlendFileError(UserError):
    """A file beside a checkpoint (trees, tree inputs, blend weight) missing beside the
    others, unreadable, not what 04 writes, or changed after 04 wrote or streamed with it.
    The message names the file, what is wrong and the command that writes it again."""


@dataclass
class BlendBundle:
    trees: Trees
    rates: QuestionRates  # of the training rows the trees were fitted on
    skill: np.ndarray  # (n_questions + 1,) each question's first tag, -1: none
    # the model's weight in the logit blend (common.model.trees.logit_blend); None: no
    # weight could be chosen (no inner split), the submission is the model alone
    weight: float | None
    # blend.json: the weight, how it was chosen, what the trees were fitted on, and (added
    # here) the arrays' DIGESTS, which 04's stream summary records with it
    record: dict
    # a run of several architectures (03 --arch): each one's weight and the trees' in the
    # stacked logit blend (common.model.trees.stacked_blend; the members' in --arch's
    # order, then TREES_WEIGHT) and its intercept; None: one model, `weight` blends it
    weights: dict | None = None
    intercept: float = 0.0

    def __post_init__(self) -> None:
        digests = {
            ModelFolder.TREES: arrays_digest(trees_arrays(self.trees)),
            ModelFolder.TREE_INPUTS: arrays_digest(self.input_arrays()),
        }
        self.record = dict(self.record, **{DIGESTS: digests})

    def input_arrays(self) -> dict[str, np.ndarray]:
        """tree_inputs.npz's arrays (INPUT_ARRAYS)."""
        return {
            "rate": self.rates.rate,
            "count": self.rates.count,
            "global_rate": np.float64(self.rates.global_rate),
            "skill": self.skill,
        }

    @property
    def blended(self) -> bool:
        """Whether the submission is a blend (else the model alone)."""
        return self.weight is not None or self.weights is not None

    def save(self, folder: ModelFolder) -> None:
        self.trees.save(folder.trees)
        with atomic_file(folder.tree_inputs) as tmp, open(tmp, "wb") as handle:
            np.savez(handle, **self.input_arrays())
        stacked = {} if self.weights is None else {"weights": self.weights}
        if self.weights is not None:
            stacked["intercept"] = self.intercept
        write_json(folder.blend, dict(self.record, weight=self.weight, **stacked))

    @classmethod
    def load(cls, folder: ModelFolder, again: str = REWRITE) -> BlendBundle | None:
        """The bundle in `folder`, or None where 04 wrote none of its files (the model
        alone). BlendFileError, ending with `again` (what writes the files again:
        rewrite_in_run, rewrite_in_bundle), where a file is missing beside the others,
        unreadable, not what 04 writes, or not the arrays blend.json was written with."""
        present = [name for name in ModelFolder.BLEND_FILES if folder.file(name).exists()]
        if not present:
            return None
        missing = [name for name in ModelFolder.BLEND_FILES if name not in present]
        if missing:
            raise BlendFileError(
                f"{folder.file(missing[0])} is missing beside {', '.join(present)} (04 "
                f"writes the three together); {again}"
            )
        record = read_record(folder.blend, again)
        rates, skill = read_inputs(folder.tree_inputs, again)
        trees = read_trees(folder.trees, again)
        bundle = cls(
            trees, rates, skill, record["weight"], record, record.get("weights"),
            record.get("intercept", 0.0),
        )  # fmt: skip
        written = record.get(DIGESTS) or {}
        for name, digest in bundle.record[DIGESTS].items():
            if name in written and written[name] != digest:
                raise BlendFileError(
                    f"{folder.file(name)} does not hold the arrays whose digest "
                    f"{folder.blend} records: one of the two changed, or came from another "
                    f"folder, after 04 wrote them; {again}"
                )
        return bundle

    def blend(
        self, model: np.ndarray, trees: np.ndarray, members: dict | None = None
    ) -> np.ndarray:
        """What is submitted: the logit blend of the model (the first architecture) and
        the trees; with several architectures the stacked blend of every member's
        probabilities (`members`, by name) and the trees'; the model alone without a
        weight."""
        if self.weights is not None:
            named = dict(members or {}, **{TREES_WEIGHT: trees})
            # in the names' order: blend.json's (its keys sorted), whoever reads it
            columns = [(w, named[name]) for name, w in sorted(self.weights.items())]
            return stacked_blend(columns, self.intercept)
        if self.weight is None:
            return np.asarray(model, dtype=np.float64)
        return logit_blend(model, trees, self.weight)


def infer_command(run: str, model: str) -> str:
    """04's command that writes <model>/'s blend files again (fold{k}: streams the fold
    again; full: fits the full-data trees again) and exports the bundle."""
    if model == ModelFolder.FULL:
        return f"04_infer.py --run {run} --full"
    return f"04_infer.py --run {run} --fold {model[len(ModelFolder.PREFIX) :]}"


def rewrite_in_run(folder: ModelFolder) -> str:
    """`again` for a run's fold{k}/ or full/ (whose parent is the run's folder, runs/NAME/:
    common.workspace.Run)."""
    return f"04 writes them again: {infer_command(folder.path.parent.name, folder.name)}"


def rewrite_in_bundle(model: str) -> str:
    """`again` for the Kaggle bundle's <model>/."""
    return (
        f"export the bundle again ({infer_command('NAME', model)}) and upload it as a new "
        "version of the dataset"
    )


def one_line(error: Exception) -> str:
    """An exception as `Type: message` on one line, for a BlendFileError."""
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def read_record(path, again: str) -> dict:
    """blend.json: a JSON object whose weight is a number in [0, 1], or null (no blend)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as error:
        raise BlendFileError(f"{path} cannot be read ({one_line(error)}); {again}") from None
    except ValueError as error:
        raise BlendFileError(
            f"{path} is not JSON, truncated or damaged ({one_line(error)}); {again}"
        ) from None
    if not isinstance(record, dict) or "weight" not in record:
        found = "no weight" if isinstance(record, dict) else f"a JSON {type(record).__name__}"
        raise BlendFileError(
            f"{path} holds {found}: 04 writes an object with the blend's weight; {again}"
        )
    weight = record["weight"]
    if weight is not None and not (_number(weight) and 0 <= weight <= 1):  # NaN included
        raise BlendFileError(
            f"{path}: weight {weight!r} is not a number in [0, 1] (the model's share of the "
            f"blend; null: the model alone); {again}"
        )
    weights = record.get("weights")
    if weights is not None:
        finite = isinstance(weights, dict) and all(
            isinstance(k, str) and _number(v) and np.isfinite(v) for k, v in weights.items()
        )
        intercept = record.get("intercept", 0.0)
        if (
            not finite
            or TREES_WEIGHT not in weights
            or not _number(intercept)
            or not np.isfinite(intercept)
        ):
            raise BlendFileError(
                f"{path}: weights {weights!r} (intercept {intercept!r}) are not finite "
                f"numbers by member with a {TREES_WEIGHT!r} entry (the stacked blend of "
                f"several architectures); {again}"
            )
    return record


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_inputs(path, again: str) -> tuple[QuestionRates, np.ndarray]:
    """tree_inputs.npz: the question-rate table and each question's skill, checked."""
    try:
        arrays = read_arrays(path)
    except NPZ_ERRORS as error:
        raise BlendFileError(f"{path} is not an .npz ({one_line(error)}); {again}") from None
    problem = inputs_problem(arrays)
    if problem:
        raise BlendFileError(f"{path}: {problem}, not the trees' inputs 04 writes; {again}")
    rates = QuestionRates(arrays["rate"], arrays["count"], float(arrays["global_rate"]))
    return rates, arrays["skill"]


def inputs_problem(arrays: dict[str, np.ndarray]) -> str | None:
    """What is wrong with tree_inputs.npz's arrays, or None."""
    if sorted(arrays) != sorted(INPUT_ARRAYS):
        return f"arrays {sorted(arrays)}, expected {sorted(INPUT_ARRAYS)}"
    rate, count, global_rate, skill = (arrays[name] for name in INPUT_ARRAYS)
    expected = {"rate": (1, "f"), "count": (1, "fiu"), "global_rate": (0, "f"), "skill": (1, "i")}
    kinds = all(
        arrays[name].ndim == ndim and arrays[name].dtype.kind in kind
        for name, (ndim, kind) in expected.items()
    )
    if not kinds or len(rate) != len(count):
        found = ", ".join(f"{n} {arrays[n].dtype} {arrays[n].shape}" for n in INPUT_ARRAYS)
        return f"{found}: expected rate and count (n,) numbers, global_rate () float, skill int"
    rates = np.append(rate, global_rate)
    if not (np.all((rates >= 0) & (rates <= 1)) and np.all(count >= 0) and len(skill)):
        return "rates outside [0, 1], negative counts or no skills"
    return None


def read_trees(path, again: str) -> Trees:
    try:
        return Trees.load(path)
    except NPZ_ERRORS as error:
        raise BlendFileError(
            f"{path} is not 04's trees, damaged or truncated ({one_line(error)}); {again}"
        ) from None


def trees_arrays(trees: Trees) -> dict[str, np.ndarray]:
    return {f.name: getattr(trees, f.name) for f in fields(trees)}


def arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    """A sha256 of named arrays (names, dtypes, shapes and bytes), in name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()
