"""05's input: every fold's streamed question rows (04's stream_predictions.parquet),
checked against stage 1's data and the fold (each streamed question row once, labels and
ids as in the data, probabilities), with the keys of 05's slices, the baselines' scores
(common.report.baselines), the trees and the blend as 04 streamed them (05 reads them, never
fits trees nor chooses a weight) and, on demo data, the true probability as the oracle."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from common.data.dataset import Dataset
from common.data.features import QuestionSequences
from common.data.fold_data import Fold, FoldMismatchError, check_fold_fingerprint
from common.data.past_features import past_features
from common.data.schema import QUESTION
from common.errors import UserError
from common.model.registry import ARCH_NAMES
from common.model.trees.blend_bundle import DIGESTS, BlendBundle, BlendFileError, rewrite_in_run
from common.model.trees.blending import BLEND
from common.model.trees.boosting import TREES
from common.report.baselines import BaselineConfig, baseline_scores
from common.workspace import ModelFolder, Run

MODEL = "model"
ORACLE = "oracle"
PREDICTION_COLUMNS = ("row_id", "global_row", "content_id", "answered_correctly", "prediction")


def discover_folds(run: Run) -> list[int]:
    """Fold indices k with the run's fold{k}/stream_predictions.parquet, ascending."""
    return run.folds_holding(ModelFolder.STREAM_PREDICTIONS)


def container_sizes(sequences: QuestionSequences, entries: np.ndarray) -> np.ndarray:
    """Number of questions in the task container of each flat entry."""
    n = len(sequences.row)
    opens = np.ones(n, dtype=bool)
    opens[1:] = sequences.container_first[1:] != sequences.container_first[:-1]
    opens[sequences.offsets[:-1][sequences.offsets[:-1] < n]] = True
    starts = np.flatnonzero(opens)
    ends = np.append(starts[1:], n)
    which = np.searchsorted(starts, entries, side="right") - 1
    return ends[which] - starts[which]


def load_fold_rows(
    fold: Fold,
    folder: ModelFolder,
    data: Dataset,
    baselines: BaselineConfig,
) -> pd.DataFrame:
    """One fold's streamed question rows with labels from the data arrays, the slice
    keys and the baselines; the trees and the blend 04 streamed, where it did (checked
    against the batch computation, `streamed_blend`; none where 04 ran with --no-trees).
    The predictions come from the run's folder. Raises if the predictions file does not match
    `fold` (as Fold.load read it)."""
    path, predictions = _read_predictions(folder, fold)
    arrays, sequences = data.arrays, data.sequences
    global_row = predictions["global_row"].to_numpy().astype(np.int64)
    entries = _question_entries(path, sequences, global_row)
    _check_streamed_once(path, np.asarray(arrays["content_type_id"]), fold, global_row)
    label = sequences.response[entries].astype(np.int8)
    student = np.searchsorted(sequences.offsets, entries, side="right") - 1
    new_student = fold.user_cut[student] == 0
    expected = {
        "row_id": np.asarray(arrays["row_id"])[global_row],
        "content_id": sequences.question[entries],
        "answered_correctly": label,
        "new_student": new_student,  # optional in the file
    }
    for column, values in expected.items():
        if column in predictions.columns:
            _check_agrees(path, column, predictions[column], values)
    # the model's own probabilities (a stream that submitted a blend keeps them apart)
    column = "model_prediction" if "model_prediction" in predictions else "prediction"
    score = predictions[column].to_numpy(dtype=np.float64)
    if not np.all((score >= 0) & (score <= 1)):
        raise ValueError(f"{path}: predictions must be probabilities in [0, 1]")

    rows = pd.DataFrame(
        {
            "fold": fold.index,
            "row_id": predictions["row_id"].to_numpy(),
            "global_row": global_row,
            "user_id": np.asarray(arrays.users)[student],
            "content_id": sequences.question[entries],
            "label": label,
            MODEL: score,
            "new_student": new_student,
            "part": sequences.part[entries],
            "history_length": entries - sequences.offsets[student],
            "container_size": container_sizes(sequences, entries),
        }
    )
    if "group_num" in predictions.columns:
        rows["group_num"] = predictions["group_num"].to_numpy()
    for name, values in member_predictions(path, predictions).items():
        rows[name] = values  # another architecture of the run: a scorer of its own
    return _add_baselines(rows, path, folder, fold, data, entries, predictions, baselines)


def _add_baselines(rows, path, folder, fold, data, entries, predictions, baselines) -> pd.DataFrame:
    """The baselines' columns; the trees and the blend 04 streamed, where it did (checked
    against the batch computation)."""
    groups = rows["group_num"].to_numpy() if "group_num" in rows else None
    columns = baseline_columns(data, fold, entries, baselines, groups)
    for name, values in columns.items():
        rows[name] = values
    if "trees_prediction" in predictions:  # 04 streamed its trees (not --no-trees)
        rows[TREES], blend = streamed_blend(path, folder, data, entries, predictions)
        if blend is not None:
            rows[BLEND] = blend
    return rows


def member_predictions(path: Path, predictions: pd.DataFrame) -> dict[str, np.ndarray]:
    """The other architectures' own probabilities 04 streamed beside the model's (a run of
    several, 03 --arch: common.stream.blend_state.member_column), by name."""
    found = {}
    for name in ARCH_NAMES:
        column = f"{name}_prediction"
        if column in predictions:
            values = predictions[column].to_numpy(dtype=np.float64)
            if not np.all((values >= 0) & (values <= 1)):
                raise ValueError(f"{path}: {column} must hold probabilities in [0, 1]")
            found[name] = values
    return found


AGREE = 1e-6  # how far 05's batch scores may be from the streamed ones


def streamed_blend(
    path: Path, folder: ModelFolder, data: Dataset, entries: np.ndarray, predictions
) -> tuple[np.ndarray, np.ndarray | None]:
    """(trees, blend) of a stream that ran with 04's blend bundle: the bundle's trees
    score the batch past-event features of the streamed rows (common.data.past_features,
    not the online state 04 streamed with), and the blend is the bundle's weight applied
    to the streamed model's probabilities. The bundle's files must be whole and the ones
    04 streamed with (`streamed_bundle`); then each score must agree with what 04
    streamed to AGREE, or the file is refused: the online and batch features, or the
    predictors, have parted."""
    bundle = streamed_bundle(path, folder)
    features = past_features(data.sequences, entries, bundle.skill, bundle.rates)
    trees = bundle.trees.probability(features)
    _check_close(path, "trees_prediction", predictions["trees_prediction"], trees)
    if not bundle.blended:
        return trees, None
    model = predictions["model_prediction"].to_numpy(dtype=np.float64)
    members = member_predictions(path, predictions)
    primary = stream_summary(folder).get("arch", "saint")  # the model's architecture
    blend = bundle.blend(model, trees, {primary: model, **members})
    _check_close(path, "prediction", predictions["prediction"], blend)
    return trees, blend


def streamed_bundle(path: Path, folder: ModelFolder) -> BlendBundle:
    """The fold's blend files (BlendBundle.load's checks), refused (BlendFileError) where
    they are gone, or are not the ones 04 streamed with: blend.json's weight, or an array
    file's digest, is not what the fold's stream_summary.json records."""
    again = rewrite_in_run(folder)
    bundle = BlendBundle.load(folder, again)
    if bundle is None:
        raise BlendFileError(
            f"{path} has trees_prediction, but {folder.path} holds none of "
            f"{', '.join(ModelFolder.BLEND_FILES)}; {again}"
        )
    streamed = stream_summary(folder).get("blend") or {}
    summary = folder.stream_summary.name
    if "weight" in streamed and streamed["weight"] != bundle.weight:
        raise BlendFileError(
            f"{folder.blend}: weight {bundle.weight}, but 04 streamed the fold with "
            f"{streamed['weight']} ({summary}): the weight file changed after 04 streamed; "
            f"{again}"
        )
    if "weights" in streamed and streamed["weights"] != bundle.weights:
        raise BlendFileError(
            f"{folder.blend}: weights {bundle.weights}, but 04 streamed the fold with "
            f"{streamed['weights']} ({summary}): the weight file changed after 04 streamed; "
            f"{again}"
        )
    digests = bundle.record[DIGESTS]
    for name, digest in (streamed.get(DIGESTS) or {}).items():
        if name in digests and digests[name] != digest:
            raise BlendFileError(
                f"{folder.file(name)} is not the file 04 streamed the fold with (its digest "
                f"is not the one {summary} records): it changed after 04 streamed; {again}"
            )
    return bundle


def _check_close(path: Path, column: str, streamed: pd.Series, batch: np.ndarray) -> None:
    gap = np.abs(streamed.to_numpy(dtype=np.float64) - batch)
    if gap.max(initial=0.0) > AGREE:
        i = int(np.argmax(gap))
        raise ValueError(
            f"{path}: column {column!r} is {gap.max():.3g} from 05's batch computation "
            f"(row {i}: streamed {streamed.iloc[i]}, batch {batch[i]}); the online and "
            f"batch past-event features must agree"
        )


def _read_predictions(folder: ModelFolder, fold: Fold) -> tuple[Path, pd.DataFrame]:
    """(path, rows) of a fold's stream predictions: `fold` checked against the
    fingerprint 04 recorded, and the file's rows, checked for the PREDICTION_COLUMNS."""
    path = folder.stream_predictions
    summary = stream_summary(folder)
    check_fold_fingerprint(summary.get("fold_fingerprint"), fold, str(path))
    try:
        predictions = pd.read_parquet(path)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        raise UserError(
            f"{path} cannot be read ({error}): stream the fold again (04_infer.py --fold "
            f"{fold.index})"
        ) from None
    missing = [c for c in PREDICTION_COLUMNS if c not in predictions.columns]
    if missing:
        raise ValueError(f"{path}: columns {missing} missing; found {list(predictions.columns)}")
    return path, predictions


def _question_entries(
    path: Path, sequences: QuestionSequences, global_row: np.ndarray
) -> np.ndarray:
    """The flat question entries of `global_row`; raises if one is not a question row."""
    entries = np.searchsorted(sequences.row, global_row)
    inside = entries < len(sequences.row)
    is_question = np.zeros(len(entries), dtype=bool)
    is_question[inside] = sequences.row[entries[inside]] == global_row[inside]
    if not is_question.all():
        i = int(np.argmin(is_question))
        raise ValueError(f"{path}: global_row {global_row[i]} is not a question row of the data")
    return entries


def streamed_questions(content_type: np.ndarray, fold: Fold) -> np.ndarray:
    """Global rows of the fold's streamed question rows, in stream order."""
    return fold.stream_index[content_type[fold.stream_index] == QUESTION]


def _check_streamed_once(
    path: Path, content_type: np.ndarray, fold: Fold, global_row: np.ndarray
) -> None:
    """Raise unless `global_row` holds each of the fold's streamed question rows once."""
    stream = streamed_questions(content_type, fold)
    if len(global_row) != len(stream) or not np.array_equal(np.sort(global_row), np.sort(stream)):
        unique = len(np.unique(global_row))
        raise ValueError(
            f"{path}: expected each of the fold's {len(stream):,} streamed question rows "
            f"once, found {len(global_row):,} rows ({unique:,} distinct, "
            f"{len(np.setdiff1d(stream, global_row)):,} of the stream missing)"
        )


def streamed_entries(data: Dataset, fold: Fold) -> np.ndarray:
    """Flat entries of the fold's streamed question rows: what 05 scores."""
    stream = streamed_questions(np.asarray(data.arrays["content_type_id"]), fold)
    return np.searchsorted(data.sequences.row, stream)


def baseline_columns(
    data: Dataset,
    fold: Fold,
    entries: np.ndarray,
    baselines: BaselineConfig,
    group_num: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Both baselines' scores of the flat entries (common.report.baselines), with the
    groups they were streamed in (group_num: the API's rule checked first)."""
    cut_row = data.arrays.offsets[:-1] + fold.user_cut
    return baseline_scores(data.sequences, entries, cut_row, data.n_questions, baselines, group_num)


def stream_summary(folder: ModelFolder) -> dict:
    """04's summary of a fold's stream (checkpoint, its selection, fold)."""
    path = folder.stream_summary
    if not path.exists():
        raise FoldMismatchError(
            f"{path} not found: 04_infer.py writes it beside "
            f"{folder.stream_predictions.name}, with the checkpoint and folds the "
            "predictions come from"
        )
    return json.loads(path.read_text())


def selection_note(summaries: dict[int, dict]) -> str:
    """Which checkpoint scored each fold and what chose it, in one sentence."""
    chosen = {
        "inner": "chosen on an inner split of the fold's training students (neither trained "
        "nor selected on the scored rows)",
        "fold": "chosen on these very rows (--select-on fold: optimistic)",
        None: "named by hand",
    }
    parts = []
    for k, summary in sorted(summaries.items()):
        how = chosen.get(summary.get("checkpoint_selected_on"), "unknown")
        name = Path(str(summary.get("checkpoint", "?"))).name
        parts.append(f"fold {k}: {name} (epoch {summary.get('checkpoint_epoch')}), {how}")
    return "Checkpoints: " + "; ".join(parts) + "."


def _check_agrees(path: Path, column: str, given: pd.Series, expected: np.ndarray) -> None:
    given = given.to_numpy()
    differs = given.astype(np.int64) != np.asarray(expected).astype(np.int64)
    if differs.any():
        i = int(np.argmax(differs))
        raise ValueError(
            f"{path}: column {column!r} disagrees with the data arrays on {differs.sum():,} "
            f"rows, e.g. row {i}: file has {given[i]}, data has {expected[i]}"
        )


class TruthFileError(UserError):
    """demo_truth.csv unreadable, or not the truth of the demo 01 read."""


def add_oracle(rows: pd.DataFrame, truth_path: Path, data: Dataset) -> pd.DataFrame:
    """Join demo_truth.csv (row_id, p_true of each question row of 00's demo) as the
    oracle score. Refused (TruthFileError) unless it holds a probability for each question
    row of `data` (what 01 read) and for nothing else: another demo's file is not joined."""
    truth = read_truth(truth_path)
    arrays = data.arrays
    questions = np.asarray(arrays["row_id"])[np.asarray(arrays["content_type_id"]) == QUESTION]
    ids = truth["row_id"].to_numpy()
    unknown, missing = np.setdiff1d(ids, questions), np.setdiff1d(questions, ids)
    if len(unknown) or len(missing):
        example = f"row_id {unknown[0]}" if len(unknown) else f"no row_id {missing[0]}"
        raise TruthFileError(
            f"{truth_path} is not the truth of the demo 01 read: {len(unknown):,} of its "
            f"{len(ids):,} row_ids are not question rows of the data and {len(missing):,} of "
            f"the data's {len(questions):,} question rows have none (e.g. {example}); give "
            "--input-dir the folder 00 wrote this demo in (or one without demo_truth.csv)"
        )
    p_true = truth.set_index("row_id")["p_true"].reindex(rows["row_id"].to_numpy()).to_numpy()
    rows = rows.copy()
    rows[ORACLE] = p_true
    return rows


def read_truth(path: Path) -> pd.DataFrame:
    """demo_truth.csv's row_id (integers, once each) and p_true (probabilities)."""
    try:
        truth = pd.read_csv(path, usecols=["row_id", "p_true"])
    except (OSError, UnicodeDecodeError, ValueError) as error:  # pandas' parse errors
        reason = " ".join(str(error).split())
        raise TruthFileError(
            f"{path} cannot be read as 00's demo_truth.csv, columns row_id and p_true "
            f"({type(error).__name__}: {reason})"
        ) from None
    p_true = pd.to_numeric(truth["p_true"], errors="coerce").to_numpy(dtype=np.float64)
    problem = None
    if not pd.api.types.is_integer_dtype(truth["row_id"]):
        problem = f"row_id of dtype {truth['row_id'].dtype}, expected integers"
    elif truth["row_id"].duplicated().any():
        problem = f"row_id {truth['row_id'][truth['row_id'].duplicated()].iloc[0]} twice"
    elif not np.all((p_true >= 0) & (p_true <= 1)):  # NaN and text included
        problem = "a p_true that is not a probability in [0, 1]"
    if problem:
        raise TruthFileError(f"{path}: {problem} (00 writes demo_truth.csv)")
    return truth.assign(p_true=p_true)
