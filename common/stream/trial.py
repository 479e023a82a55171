"""The exported notebook, tried locally before it is pushed (04_infer.py --test-csv FILE):
its own cell, in a fresh Python process, reading the exported dataset as Kaggle mounts
it, with a stand-in for the competition's API (common.stream.local_api) serving FILE;
it writes submission.csv as it would on Kaggle.

The process sees only the bundle's code: the cell puts the dataset's code/ first on the
path, and the launcher drops this checkout's editable install from the import system, so
the trial runs what Kaggle will run (in this Python and its packages; the competition's
own 2020 stack is checked by tests/test_kaggle.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from common.errors import UserError
from common.stream import local_api
from common.stream.kaggle_export import KAGGLE_INPUT
from common.workspace import KaggleFolder

LAUNCHER = """
import sys
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, sys.argv[2])  # the stand-in riiideducation
cell = open(sys.argv[1]).read()
try:
    exec(compile(cell, "submission.ipynb", "exec"), {"__name__": "__main__"})
except KeyboardInterrupt:  # Ctrl-C reached 04 too, which says it in one line
    sys.exit(130)
"""


def try_notebook(kaggle: KaggleFolder, test_csv: Path, slug: str) -> Path:
    """Run the Kaggle folder's kernel/ notebook on its dataset/ against `test_csv` (the
    dataset mounted as /kaggle/input/<slug> would be); returns the submission.csv it
    wrote, in its trial/working/."""
    test_csv = Path(test_csv).resolve()  # checked whole by 04 first (common.data.api_file)
    trial = kaggle.trial
    if trial.exists():
        shutil.rmtree(trial)
    mounted = trial / "input"
    mounted.mkdir(parents=True)
    (mounted / slug).symlink_to(kaggle.dataset.resolve())
    api = trial / "api" / "riiideducation"
    api.mkdir(parents=True)
    shutil.copyfile(local_api.__file__, api / "__init__.py")
    notebook = json.loads((kaggle.kernel / KaggleFolder.NOTEBOOK).read_text())
    cell = "".join(notebook["cells"][0]["source"]).replace(KAGGLE_INPUT, str(mounted.resolve()))
    (trial / "cell.py").write_text(cell)
    (trial / "launcher.py").write_text(LAUNCHER)
    working = trial / "working"
    working.mkdir()
    env = dict(os.environ, **{local_api.STREAM_VARIABLE: str(test_csv)})
    command = [sys.executable, str(trial / "launcher.py"), str(trial / "cell.py")]
    done = subprocess.run([*command, str(api.parent)], cwd=working, env=env, check=False)
    if done.returncode != 0:
        raise UserError(f"the notebook failed on {test_csv} (exit {done.returncode}; see above)")
    return working / "submission.csv"
