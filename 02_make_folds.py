"""Stage 2: split students into cross-validation folds (see common/data/folds.py)."""

from __future__ import annotations

import sys

from common import cli
from common.data.folds import FoldConfig, make_folds
from common.files import check_writable
from common.workspace import Workspace


def main(argv: list[str] | None = None) -> int:
    parser = cli.parser(__doc__)
    cli.path_flags(parser, input_help="read for --strategy dataset (user_folds.csv)")
    cli.add_config_flags(parser, FoldConfig)
    config, args = cli.parse_config(parser, FoldConfig, argv, stage="folds")

    def run() -> None:
        workspace = Workspace(args.output_dir)
        check_writable(workspace.path)
        report(make_folds(workspace, config, args.input_dir), config)
        print(f"wrote {workspace.folds.path}")

    return cli.guarded(
        run,
        "nothing was written (folds/ appears whole or not at all); run it again",
        args.output_dir,
    )


def report(stats: list[dict], config: FoldConfig) -> None:
    print(f"strategy {config.strategy}, {config.n_folds} folds, seed {config.seed}")
    for s in stats:
        print(
            f"fold {s['fold']}: train rows {s['train_rows']:,}  valid rows {s['valid_rows']:,}  "
            f"valid students {s['valid_students']:,} (new {s['new_students']:,})  "
            f"questions {s['valid_question_share']:.3f}  correct {s['valid_share_correct']:.3f}"
        )


if __name__ == "__main__":
    sys.exit(main())
