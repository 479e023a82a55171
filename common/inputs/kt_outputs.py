"""What a conversion (common.inputs.kt_datasets) produces, as frames, and writing it: one
output directory, replaced atomically.

Outputs (one directory, written atomically): train.csv, questions.csv, lectures.csv;
question_map.csv (raw_problem_id -> content_id), skill_map.csv (raw_skill_id -> tag),
user_map.csv (user_id -> raw ids, source file and line, fold, the source's own fold);
user_folds.csv (user_id,fold) when the dataset ships user folds, listing only students in a
held-out fold; and
conversion.json (inputs with sha256, counts, share correct, `filled_in`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from common.errors import UserError
from common.files import atomic_dir

OUTPUT_FILES: tuple[str, ...] = (
    "train.csv",
    "questions.csv",
    "lectures.csv",
    "question_map.csv",
    "skill_map.csv",
    "user_map.csv",
    "conversion.json",
)  # plus user_folds.csv when the dataset ships folds
USER_FOLDS = "user_folds.csv"


@dataclass
class ConvertedDataset:
    """Everything written to the output directory, as frames, plus the record."""

    train: pd.DataFrame
    questions: pd.DataFrame
    lectures: pd.DataFrame
    question_map: pd.DataFrame
    skill_map: pd.DataFrame
    user_map: pd.DataFrame
    user_folds: pd.DataFrame | None
    record: dict = field(default_factory=dict)


def write_train_csv(train: pd.DataFrame, path: Path) -> None:
    """train.csv as the competition writes it (plain integers, empty for missing), through
    pyarrow: about 20x faster than DataFrame.to_csv on these all-integer rows."""
    table = pa.Table.from_pandas(train, preserve_index=False)
    with open(path, "wb") as handle:
        handle.write((",".join(train.columns) + "\n").encode())  # pyarrow would quote it
        pacsv.write_csv(table, handle, pacsv.WriteOptions(include_header=False))


def write_converted(converted: ConvertedDataset, output_dir: str | Path) -> Path:
    """Write every output file into `output_dir`, atomically as one directory. The
    conversion owns its output files there (an earlier conversion's are replaced); what
    else the folder holds (notes, 01's output) is kept. Files of those names that no
    conversion wrote (no conversion.json beside them) are refused."""
    output_dir = Path(output_dir)
    owned = (*OUTPUT_FILES, USER_FOLDS)
    if output_dir.is_dir() and not (output_dir / "conversion.json").exists():
        found = [name for name in owned if (output_dir / name).exists()]
        if found:
            raise UserError(
                f"{output_dir} holds {', '.join(found)} but no conversion.json: not an "
                "earlier conversion's files, so they are not replaced; choose another "
                "--output-dir, or move them out"
            )
    with atomic_dir(output_dir, owns=owned) as tmp:
        write_train_csv(converted.train, tmp / "train.csv")
        converted.questions.to_csv(tmp / "questions.csv", index=False)
        converted.lectures.to_csv(tmp / "lectures.csv", index=False)
        converted.question_map.to_csv(tmp / "question_map.csv", index=False)
        converted.skill_map.to_csv(tmp / "skill_map.csv", index=False)
        converted.user_map.to_csv(tmp / "user_map.csv", index=False)
        if converted.user_folds is not None:
            converted.user_folds.to_csv(tmp / USER_FOLDS, index=False)
        text = json.dumps(converted.record, indent=2, sort_keys=True) + "\n"
        (tmp / "conversion.json").write_text(text)
    return output_dir
