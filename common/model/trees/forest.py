"""The boosted-features baseline's trees as plain arrays, and the predictor that scores
them: what the Kaggle notebook blends with the model. scikit-learn's pickles do not load
in the competition's 2020 stack, so common.model.trees.boosting converts a fitted
HistGradientBoostingClassifier into `Trees`, saved as one .npz of arrays.

This module ships in the Kaggle bundle: it runs under Python 3.7 with numpy 1.19 and
imports nothing but numpy and common.files.

The predictor mirrors scikit-learn 1.9 (ensemble/_hist_gradient_boosting: `_preprocess_X`,
`_raw_predict`, and `_predict_one_from_raw_data` in _predictor.pyx):

- the fit's input columns pass through its ColumnTransformer, which puts the categorical
  columns first; a categorical value becomes its index among the known categories, and an
  unknown category or NaN becomes NaN;
- at a split, NaN takes the missing branch; a categorical code below 0 takes the missing
  branch, one in the split's left bitset goes left, another known category goes right,
  and an unknown one takes the missing branch; a numeric value goes left when <= the
  threshold;
- the decision function is the baseline plus each tree's leaf value, added tree by tree.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from common.files import atomic_file

EDGE = 1e-6  # probabilities are clipped this far from 0 and 1 before the logit
BITSET_WORDS = 8  # scikit-learn's bitsets: 8 uint32 words, categories 0..255
BITSET_VALUES = 32 * BITSET_WORDS
# (tree, row) pairs walked at once: more rows fall out of the CPU's caches and run slower
WALK_PAIRS = 1 << 18
ZIP_START = b"PK\x03\x04"  # the first bytes of a zip file, so of an .npz


@dataclass
class Trees:
    """A binary HistGradientBoostingClassifier as arrays. Node arrays are flat over every
    tree; their child and bitset indices are global (a tree's local index plus its
    offset), and a leaf's children are -1."""

    columns: np.ndarray  # (n_inputs,) int64: the FEATURE_NAMES column of each fit input
    order: np.ndarray  # (n_inputs,) int64: preprocessed column j is fit input order[j]
    categorical: np.ndarray  # (n_inputs,) bool: preprocessed column j is categorical
    categories: np.ndarray  # (n_known,) float64: each categorical column's known values
    category_offsets: np.ndarray  # (n_categorical + 1,) int64: its slice of `categories`
    baseline: np.ndarray  # () float64: the decision function before any tree
    tree_root: np.ndarray  # (n_trees,) int64: each tree's first node
    tree_bitset: np.ndarray  # (n_trees,) int64: each tree's first row of left_bitsets
    node_feature: np.ndarray  # (n_nodes,) int64: the preprocessed column a split reads
    node_threshold: np.ndarray  # (n_nodes,) float64: numeric splits: <= goes left
    node_left: np.ndarray  # (n_nodes,) int64
    node_right: np.ndarray  # (n_nodes,) int64
    node_missing_left: np.ndarray  # (n_nodes,) bool: the missing branch is the left one
    node_is_leaf: np.ndarray  # (n_nodes,) bool
    node_value: np.ndarray  # (n_nodes,) float64: a leaf's addition to the decision
    node_categorical: np.ndarray  # (n_nodes,) bool
    node_bitset: np.ndarray  # (n_nodes,) int64: a categorical split's row of left_bitsets
    left_bitsets: np.ndarray  # (n_bitsets, 8) uint32: the codes that go left
    known_bitsets: np.ndarray  # (n_categorical, 8) uint32: the codes the fit knew
    known_row: np.ndarray  # (n_inputs,) int64: a preprocessed column's known_bitsets row

    def raw(self, features: np.ndarray) -> np.ndarray:
        """(n,) decision function of a (n, len(FEATURE_NAMES)) float64 feature matrix."""
        inputs = self.preprocess(features)
        rows = max(1, WALK_PAIRS // len(self.tree_root))
        chunks = [inputs[start : start + rows] for start in range(0, max(len(inputs), 1), rows)]
        # summed over the outer axis, numpy adds tree after tree, scikit-learn's order
        sums = [
            np.add.reduce(self.node_value[self.leaves(chunk)], axis=0, initial=float(self.baseline))
            for chunk in chunks
        ]
        return np.concatenate(sums)

    def probability(self, features: np.ndarray) -> np.ndarray:
        """(n,) probability of a correct answer: the sigmoid of `raw`."""
        return 1.0 / (1.0 + np.exp(-self.raw(features)))

    def preprocess(self, features: np.ndarray) -> np.ndarray:
        """(n, n_inputs) what the trees read: the fit's columns reordered as its
        ColumnTransformer orders them, categorical values encoded."""
        features = np.asarray(features, dtype=np.float64)
        if features.ndim != 2 or features.shape[1] <= int(self.columns.max()):
            raise ValueError(
                f"features of shape {features.shape}: expected (n, n_features) with "
                f"column {int(self.columns.max())} among them"
            )
        inputs = features[:, self.columns[self.order]]
        for k, column in enumerate(np.flatnonzero(self.categorical)):
            known = self.categories[self.category_offsets[k] : self.category_offsets[k + 1]]
            inputs[:, column] = encode_categories(inputs[:, column], known)
        return inputs

    def leaves(self, inputs: np.ndarray) -> np.ndarray:
        """(n_trees, n) the leaf each preprocessed row reaches in each tree. Every (tree,
        row) pair walks down at once, one level per step; pairs leave when at a leaf."""
        n = len(inputs)
        column_major = np.ascontiguousarray(inputs.T).ravel()  # [f * n + r]: column f, row r
        node = np.repeat(self.tree_root, n)  # (n_trees * n,) tree-major, like the result
        row = np.tile(np.arange(n), len(self.tree_root))
        slot = np.arange(len(node))
        leaf = np.empty(len(node), dtype=np.int64)
        for _ in range(len(self.node_is_leaf) + 1):  # a path visits each node once at most
            done = self.node_is_leaf[node]
            leaf[slot[done]] = node[done]
            walking = ~done
            if not walking.any():
                return leaf.reshape(len(self.tree_root), n)
            node, row, slot = node[walking], row[walking], slot[walking]
            node = self.step(node, column_major[self.node_feature[node] * n + row])
        raise ValueError("the trees hold a cycle: a path never reached a leaf")

    def step(self, node: np.ndarray, value: np.ndarray) -> np.ndarray:
        """The child each split node `node` sends its row's `value` to."""
        go_left = value <= self.node_threshold[node]
        missing = np.isnan(value)
        categorical = np.flatnonzero(self.node_categorical[node])
        if len(categorical):
            left, known = self.categorical_rules(node[categorical], value[categorical])
            go_left[categorical] = left
            missing[categorical] = ~left & ~known  # NaN included: neither left nor known
        go_left = np.where(missing, self.node_missing_left[node], go_left)
        return np.where(go_left, self.node_left[node], self.node_right[node])

    def categorical_rules(self, node: np.ndarray, value: np.ndarray):
        """(goes left, known) of categorical codes at categorical splits. Codes outside the
        bitsets' 0..255 (below 0, or too large for scikit-learn's uint8 cast) are neither."""
        inside = (value >= 0) & (value < BITSET_VALUES)
        code = np.where(inside, value, 0).astype(np.int64)
        left = inside & in_bitsets(self.left_bitsets, self.node_bitset[node], code)
        known_row = self.known_row[self.node_feature[node]]
        known = inside & in_bitsets(self.known_bitsets, known_row, code)
        return left, known

    def save(self, path) -> None:
        """One .npz of the arrays (no pickle), written beside `path` and moved into place."""
        with atomic_file(path) as tmp, open(str(tmp), "wb") as file:
            # a file object: given a name, np.savez would append ".npz" to the temp name
            np.savez(file, **{f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def load(cls, path) -> Trees:
        """The trees `save` wrote, checked (`check`); ValueError where the arrays are not
        Trees', and read_arrays' errors where the file is not an .npz."""
        names = [f.name for f in fields(cls)]
        saved = read_arrays(path)
        if sorted(saved) != sorted(names):
            raise ValueError(f"arrays {sorted(saved)}, expected Trees' {sorted(names)}")
        trees = cls(**saved)
        trees.check()
        return trees

    def check(self) -> None:
        """Raise ValueError unless the arrays have the kinds and shapes of FIELDS and hold
        trees the predictor can walk: every index in range, and each split's children
        after it (scikit-learn numbers nodes depth first), so no path loops."""
        for name, (ndim, kinds) in FIELDS.items():
            array = getattr(self, name)
            if not isinstance(array, np.ndarray) or array.ndim != ndim:
                raise ValueError(f"{name}: expected {ndim} dimension(s), found {describe(array)}")
            if array.dtype.kind not in kinds:
                raise ValueError(f"{name}: expected dtype kind {kinds!r}, found {array.dtype}")
        sizes = {
            "n_inputs": ("columns", "order", "categorical", "known_row"),
            "n_trees": ("tree_root", "tree_bitset"),
            "n_nodes": tuple(name for name in FIELDS if name.startswith("node_")),
        }
        for size, names in sizes.items():
            lengths = {len(getattr(self, name)) for name in names}
            if len(lengths) != 1 or 0 in lengths:
                raise ValueError(f"{', '.join(names)}: expected one length ({size}) over 0")
        for name in ("left_bitsets", "known_bitsets"):
            if getattr(self, name).shape[1] != BITSET_WORDS:
                raise ValueError(f"{name}: expected {BITSET_WORDS} words a row")
        self.check_indices()

    def check_indices(self) -> None:
        """`check`'s indices: the column order, category slices, roots, children, split
        columns and bitset rows in range; leaf values and the baseline finite. In order:
        each check may index with what the checks before it passed."""
        n_inputs, n_nodes = len(self.columns), len(self.node_is_leaf)
        split = np.flatnonzero(~self.node_is_leaf)
        categorical = split[self.node_categorical[split]]
        offsets = self.category_offsets
        slices = len(offsets) == int(self.categorical.sum()) + 1 and offsets[0] == 0
        wrong = None
        if not np.array_equal(np.sort(self.order), np.arange(n_inputs)):
            wrong = "order"
        elif np.any(self.columns < 0):
            wrong = "columns"
        elif not slices or np.any(np.diff(offsets) < 0) or offsets[-1] != len(self.categories):
            wrong = "category_offsets"
        elif not in_range(self.tree_root, 0, n_nodes):
            wrong = "tree_root"
        elif not in_range(self.node_left[split] - split, 1, n_nodes - split):
            wrong = "node_left"
        elif not in_range(self.node_right[split] - split, 1, n_nodes - split):
            wrong = "node_right"
        elif not in_range(self.node_feature[split], 0, n_inputs):
            wrong = "node_feature"
        elif not in_range(self.node_bitset[categorical], 0, len(self.left_bitsets)):
            wrong = "node_bitset"
        elif not in_range(
            self.known_row[self.node_feature[categorical]], 0, len(self.known_bitsets)
        ):
            wrong = "known_row"
        elif not np.all(np.isfinite(self.node_value[self.node_is_leaf])):
            wrong = "node_value"
        elif not np.isfinite(self.baseline):
            wrong = "baseline"
        if wrong:
            raise ValueError(f"{wrong}: values out of range for these trees")


# each field's dimensions and numpy dtype kinds (b: bool, i: signed, u: unsigned, f: float)
FIELDS = {f.name: (1, "i") for f in fields(Trees)}
FIELDS.update(
    categorical=(1, "b"), categories=(1, "f"), baseline=(0, "f"), node_threshold=(1, "f"),
    node_missing_left=(1, "b"), node_is_leaf=(1, "b"), node_value=(1, "f"),
    node_categorical=(1, "b"), left_bitsets=(2, "u"), known_bitsets=(2, "u"),
)  # fmt: skip


def read_arrays(path) -> dict[str, np.ndarray]:
    """Every array of an .npz file, read whole (no pickles). Where the file is not an .npz
    of plain arrays: ValueError, or what numpy and zipfile raise (OSError, EOFError,
    zipfile.BadZipFile, ...: common.model.trees.blend_bundle.NPZ_ERRORS)."""
    with open(str(path), "rb") as file:
        if file.read(len(ZIP_START)) != ZIP_START:  # else np.load would try it as a pickle
            raise ValueError("it does not start as an .npz (a zip file) does")
    with np.load(str(path), allow_pickle=False) as saved:
        return {name: saved[name] for name in saved.files}


def describe(array) -> str:
    """An array's dtype and shape, or what else it is, for an error."""
    if isinstance(array, np.ndarray):
        return f"{array.dtype} of shape {array.shape}"
    return type(array).__name__


def in_range(values: np.ndarray, low, high) -> bool:
    """Whether every value lies in [low, high) (bounds: numbers or arrays like `values`)."""
    return bool(np.all((values >= low) & (values < high)))


def encode_categories(values: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Each value's index in the sorted `known` categories; NaN where it is not one of them
    (scikit-learn's OrdinalEncoder with unknown and missing values encoded as NaN)."""
    if len(known) == 0:
        return np.full(len(values), np.nan)
    index = np.searchsorted(known, values)  # NaN sorts last: index len(known)
    found = known[np.minimum(index, len(known) - 1)] == values
    return np.where(found, index, np.nan)


def in_bitsets(bitsets: np.ndarray, row: np.ndarray, code: np.ndarray) -> np.ndarray:
    """Whether `code` (int64, 0..255) is set in bitsets[row] (scikit-learn's layout: bit
    code % 32 of word code // 32)."""
    word = bitsets[row, code >> 5].astype(np.int64)
    return ((word >> (code & 31)) & 1).astype(bool)


def clipped_logit(p) -> np.ndarray:
    """logit(p) of probabilities clipped EDGE from 0 and 1."""
    p = np.clip(np.asarray(p, dtype=np.float64), EDGE, 1 - EDGE)
    return np.log(p) - np.log1p(-p)


def logit_blend(model: np.ndarray, features: np.ndarray, weight: float) -> np.ndarray:
    """sigmoid(weight * logit(model) + (1 - weight) * logit(features)) of two
    probabilities, each clipped EDGE from 0 and 1 first."""
    return stacked_blend([(weight, model), (1 - weight, features)])


def stacked_blend(columns: list, intercept: float = 0.0) -> np.ndarray:
    """sigmoid(sum of weight * logit(p) over the (weight, p) columns, in their order, +
    intercept): the blend of several models and the trees (logit_blend: two columns
    whose weights add to 1, no intercept)."""
    total = None
    for weight, p in columns:
        term = weight * clipped_logit(p)
        total = term if total is None else total + term
    return 1.0 / (1.0 + np.exp(-(total + intercept)))
