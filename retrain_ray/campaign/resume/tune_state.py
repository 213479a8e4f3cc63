"""Is the Tune experiment state in `<campaign>/tune` whole? A driver killed while Tune copied it there
can leave a file cut short.

Tune copies its experiment state from a staging directory to the campaign directory with plain
(non-atomic) file copies every couple of seconds. A driver SIGKILLed during a copy leaves an empty or
truncated file: seen in the fault benchmark as an empty `basic-variant-state-*.json` (the search
algorithm's state). `Tuner.restore` then fails to load it, logs the error, "restarts" the experiment
without its search space and crashes on a trial with no config (`KeyError: 'run_name'`).

`torn_state` names the torn file; `set_aside` moves Tune's experiment-level state and the trial
directories of runs that had not completed into `tune/.torn-<time>/`, so the campaign starts a fresh
Tune experiment. The manifest stays the record: its completed runs are not run again (campaign/trial.py)
and keep their Tune directories (the manifest names their last checkpoint there). The other runs get no
checkpoint from the fresh Tune experiment; each continues after its own newest checkpoint in its work
directory that verifies (checksums), whose step its metrics log holds with every step before it, and
whose `run_meta.json` names the same run and config (campaign/resume/own_checkpoint.py). A run whose work
directory has none (it lies on another node of a cluster without a shared file system) continues after
the newest of Tune's copies of its checkpoints set aside here (`.torn-<time>/<run>/checkpoint_*`, the
newest `.torn-*`), with the same checks, the run and config read from the copy's `.metadata.json`
(campaign/trial.py writes it into every reported checkpoint) or the run's `run_meta.json`. A run with
neither starts from step 0, and a directory of another run or config fails the run with an error naming it.
Rows a resumed run writes again (steps after its checkpoint) go to a new log segment and replace the
killed session's (readers de-duplicate on step, last write wins), as on any resume.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from ray import cloudpickle

# experiment-level files of a Tune run: the controller's state (JSON), the search algorithm's state (a
# pickle despite its name) and the pickled Tuner
_JSON, _PICKLES = ("experiment_state-*.json",), ("basic-variant-state-*.json", "tuner.pkl")


def _newest(tune_dir: Path, pattern: str) -> Path | None:
    found = sorted(tune_dir.glob(pattern))
    return found[-1] if found else None


def torn_state(tune_dir: Path) -> str:
    """'' when Tune's newest experiment-state files in `tune_dir` load; else which file does not, and why."""
    for pattern in (*_JSON, *_PICKLES):
        path = _newest(tune_dir, pattern)
        if path is None:
            continue
        try:
            data = path.read_bytes()
            if not data:
                return f"{path} is empty"
            json.loads(data) if pattern in _JSON else cloudpickle.loads(data)
        except Exception as exc:  # any failure to load is a torn or foreign file
            return f"{path} does not load ({type(exc).__name__}: {exc})"
    return ""


ASIDE_KINDS = ("torn", "extended")  # why a Tune state was set aside: torn, or a campaign extended (campaign/resume/edits.py)


def set_aside(tune_dir: Path, unfinished: Iterable[str], kind: str = "torn") -> Path:
    """Moves the experiment-level state and the unfinished runs' trial dirs into `tune/.<kind>-<time>/`."""
    aside = tune_dir / f".{kind}-{time.strftime('%Y%m%dT%H%M%S')}"
    aside.mkdir(parents=True, exist_ok=True)
    paths = [p for pattern in (*_JSON, *_PICKLES, "search_gen_state-*.json") for p in tune_dir.glob(pattern)]
    paths += [tune_dir / name for name in unfinished if (tune_dir / name).exists()]
    for path in paths:
        shutil.move(str(path), str(aside / path.name))
    return aside
