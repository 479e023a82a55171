"""Stage 4: streaming inference under the competition's API rules (see common/stream/infer.py).

Locally it streams fold k's validation rows of a run through an emulator of the
`riiideducation` API, writes output/runs/NAME/fold{k}/validation_predictions.csv, a metric
table and the run's oof.parquet, and exports the Kaggle dataset and notebook
(output/runs/NAME/kaggle/: see common/stream/kaggle_export.py). Where `riiideducation` is
importable (or with --competition) it runs the bundle against the real API instead.

python 04_infer.py --run base --fold 0
python 04_infer.py --run base --fold all      (every fold; those streamed already are kept)
python 04_infer.py --run base --full          (the full-data model's Kaggle bundle)
"""

from __future__ import annotations

import sys

from common import cli
from common.stream.fold_stream import InferConfig
from common.stream.infer import infer
from common.workspace import Workspace


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser(__doc__)
    cli.path_flags(parser)
    cli.run_flag(
        parser,
        "the run under <output-dir>/runs/ (default: the only run, or the latest trained)",
    )
    cli.add_config_flags(parser, InferConfig)
    cli.fold_list_flag(parser)
    config, args = cli.parse_config(parser, InferConfig, argv, stage="infer")
    return cli.guarded(
        lambda: infer(config, Workspace(args.output_dir), args.run),
        "the folds streamed so far are kept; the same command streams the others (with "
        "--fold all, a fold streamed already is kept)",
        args.output_dir,
    )


if __name__ == "__main__":
    sys.exit(main())
