"""Tune's copies of run checkpoints, bounded by `[training] keep_last_checkpoints` without breaking restore.

Every checkpoint a run reports goes to Tune's storage (`<campaign>/tune/<run>/checkpoint_NNNNNN`, or
`[campaign] storage`). Tune's own bound (`CheckpointConfig(num_to_keep)`) deletes a copy as soon as a
newer one arrives, while the experiment state a restore reads is synced to storage only every few
seconds: a driver killed in between restores a run from a copy that is gone ("does not exist on
storage anymore"). So Tune keeps everything (`num_to_keep=None`) and `TuneCopyPruner`, a driver-side
Tune callback, deletes a run's copy only when it is older than both

* the run's `keep` newest copies, and
* the copy that the experiment state *on storage* (the newest `experiment_state-*.json`, exactly
  what `Tuner.restore` reads) names as the run's latest checkpoint.

Each later synced state names that copy or a newer one, so no restore can need a deleted copy. The
pruner runs at most every `PRUNE_EVERY_S` (longer with over `TRIALS_PER_PASS` trials) after a new checkpoint, and once more at the end of the
experiment (after Tune's final synchronous state sync): a finished campaign keeps `keep` copies per run.
Between passes a run may hold the copies it reported since the last synced state, a few seconds' worth.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Protocol, cast

import pyarrow.fs as pafs  # pyright: ignore[reportMissingTypeStubs]
from ray import cloudpickle
from ray.tune import Callback, Stopper
from ray.tune.experiment import Trial

# Tune's own reader of its run metadata (Ray is pinned to one minor version in pyproject.toml)
from ray.tune.trainable.metadata import _TrainingRunMetadata  # pyright: ignore[reportPrivateUsage]

from retrain_ray.campaign.observer import CampaignObserver

PRUNE_EVERY_S = 2.0  # as often as Tune syncs its state (STATE_SYNC_S, campaign/experiment.py)
# A pass reads the synced state of every trial (decoding each one's checkpoint record) and lists every
# trial's directory: with more trials than this it runs every PRUNE_EVERY_S x trials / TRIALS_PER_PASS
# instead (a 1,000-run campaign's driver spent 31% of its time here at a pass every 2 s; benchmarks/scale.py).
# The copies are pointers of a few KB (campaign/resume/pointer.py), so a longer wait costs little room.
TRIALS_PER_PASS = 50
STATE_PATTERN = "experiment_state-*.json"
_COPY = re.compile(r"checkpoint_(\d+)$")


class _FileInfo(Protocol):
    @property
    def base_name(self) -> str: ...
    @property
    def type(self) -> object: ...


class _Stream(Protocol):
    def read(self) -> bytes: ...
    def __enter__(self) -> _Stream: ...
    def __exit__(self, *exc: object) -> None: ...


class StorageFS(Protocol):
    """What the pruner uses of a `pyarrow.fs.FileSystem` (pyarrow ships no type stubs)."""

    def get_file_info(self, paths_or_selector: object) -> list[_FileInfo]: ...
    def open_input_stream(self, path: str) -> _Stream: ...
    def delete_dir(self, path: str) -> None: ...


def _listing(fs: StorageFS, path: str) -> list[_FileInfo]:
    """The entries of directory `path` on `fs` (none when it is absent)."""
    selector = cast("object", pafs.FileSelector(path, allow_not_found=True))  # pyright: ignore[reportUnknownMemberType]
    return fs.get_file_info(selector)


_DIRECTORY: object = pafs.FileType.Directory  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]


def prunable(indices: list[int], named: int | None, keep: int) -> list[int]:
    """The copy indices to delete: older than the `keep` newest and than `named` (the synced latest).

    `named` None (no synced state names the run yet) or `keep` <= 0 (keep all): nothing.
    """
    if named is None or keep <= 0 or len(indices) <= keep:
        return []
    ordered = sorted(indices)
    below = min(named, ordered[-keep])
    return [i for i in ordered if i < below]


def synced_latest(fs: StorageFS, experiment_fs_path: str) -> dict[str, int]:
    """{trial fs path: index of its latest checkpoint} from the newest experiment state on storage.

    An unreadable or half-written state gives {} (the caller then deletes nothing).
    """
    try:
        names = sorted(fnmatch.filter([i.base_name for i in _listing(fs, experiment_fs_path)], STATE_PATTERN))
        if not names:
            return {}
        with fs.open_input_stream(f"{experiment_fs_path}/{names[-1]}") as f:
            state = cast("dict[str, list[list[str]]]", json.loads(f.read()))  # Tune's experiment state
        return _latest_by_trial(state)
    except Exception:  # unreadable in any way (I/O, JSON, unpickling): delete nothing this time
        return {}


def _latest_by_trial(state: Mapping[str, list[list[str]]]) -> dict[str, int]:
    latest: dict[str, int] = {}
    for _trial_json, metadata_json in state["trial_data"]:
        manager = _TrainingRunMetadata.from_json_state(metadata_json).checkpoint_manager
        result = manager.latest_checkpoint_result if manager is not None else None
        if result is None or result.checkpoint is None:
            continue
        path = PurePosixPath(str(result.checkpoint.path))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        found = _COPY.match(path.name)
        if found:
            latest[str(path.parent)] = int(found.group(1))
    return latest


def copy_indices(fs: StorageFS, trial_fs_path: str) -> list[int]:
    """Indices of the `checkpoint_NNNNNN` copies under one trial's storage directory."""
    return sorted(int(m.group(1)) for i in _listing(fs, trial_fs_path) if i.type == _DIRECTORY
                  and (m := _COPY.match(i.base_name)))


def prune_trial(fs: StorageFS, trial_fs_path: str, named: int | None, keep: int) -> list[int]:
    """Deletes one trial's prunable copies; returns the indices deleted."""
    doomed = prunable(copy_indices(fs, trial_fs_path), named, keep)
    for index in doomed:
        fs.delete_dir(f"{trial_fs_path}/checkpoint_{index:06d}")
    return doomed


def _run_name(trial: Trial) -> str:
    return str(trial.config.get("run_name", ""))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]  # Tune types config loosely


class TuneCopyPruner(Callback):
    """Deletes Tune's checkpoint copies beyond each run's `keep` (run name -> keep_last_checkpoints)."""

    def __init__(self, keep: Mapping[str, int], every_s: float = PRUNE_EVERY_S,
                 observer: CampaignObserver | None = None) -> None:
        self.keep = dict(keep)
        self.observer = observer or CampaignObserver()
        self.every_s = every_s
        self._dirty = False
        self._last = 0.0

    def setup(self, stop: Stopper | None = None, num_samples: int | None = None,
              total_num_samples: int | None = None, **info: object) -> None:
        """After `Tuner.restore` this is an unpickled copy: its clock reading came from another process."""
        self._dirty, self._last = True, 0.0

    def on_checkpoint(self, iteration: int, trials: list[Trial], trial: Trial, checkpoint: object, **info: object) -> None:
        self._dirty = True

    def on_step_end(self, iteration: int, trials: list[Trial], **info: object) -> None:
        if self._dirty and time.monotonic() - self._last >= self.every_s * max(1.0, len(trials) / TRIALS_PER_PASS):
            self.prune(trials)

    def on_experiment_end(self, trials: list[Trial], **info: object) -> None:
        self.prune(trials)

    def prune(self, trials: list[Trial]) -> None:
        self._dirty, self._last = False, time.monotonic()
        wanted = [(keep, t.storage) for t in trials
                  if (keep := self.keep.get(_run_name(t), 0)) > 0 and t.storage is not None]
        if not wanted:
            return
        storage = wanted[0][1]
        fs = cast("StorageFS", storage.storage_filesystem)  # pyright: ignore[reportUnknownMemberType]  # a pyarrow FileSystem
        named = synced_latest(fs, storage.experiment_fs_path)
        for keep, trial_storage in wanted:
            path = trial_storage.trial_fs_path.rstrip("/")
            try:
                prune_trial(fs, path, named.get(path), keep)
            except OSError as exc:  # storage hiccup: the next pass tries again, the run goes on
                self.observer.on_warning(f"could not prune Tune's checkpoint copies in {path}: {exc}")


# Is the Tune experiment state in `<campaign>/tune` whole? A driver killed while Tune copied it there
# can leave a file cut short.
#
# Tune copies its experiment state from a staging directory to the campaign directory with plain
# (non-atomic) file copies every couple of seconds. A driver SIGKILLed during a copy leaves an empty or
# truncated file: seen in the fault benchmark as an empty `basic-variant-state-*.json` (the search
# algorithm's state). `Tuner.restore` then fails to load it, logs the error, "restarts" the experiment
# without its search space and crashes on a trial with no config (`KeyError: 'run_name'`).
#
# `torn_state` names the torn file; `set_aside` moves Tune's experiment-level state and the trial
# directories of runs that had not completed into `tune/.torn-<time>/`, so the campaign starts a fresh
# Tune experiment. The manifest stays the record: its completed runs are not run again (campaign/trial.py)
# and keep their Tune directories (the manifest names their last checkpoint there). The other runs get no
# checkpoint from the fresh Tune experiment; each continues after its own newest checkpoint in its work
# directory that verifies (checksums), whose step its metrics log holds with every step before it, and
# whose `run_meta.json` names the same run and config (campaign/resume/own_checkpoint.py). A run whose work
# directory has none (it lies on another node of a cluster without a shared file system) continues after
# the newest of Tune's copies of its checkpoints set aside here (`.torn-<time>/<run>/checkpoint_*`, the
# newest `.torn-*`), with the same checks, the run and config read from the copy's `.metadata.json`
# (campaign/trial.py writes it into every reported checkpoint) or the run's `run_meta.json`. A run with
# neither starts from step 0, and a directory of another run or config fails the run with an error naming it.
# Rows a resumed run writes again (steps after its checkpoint) go to a new log segment and replace the
# killed session's (readers de-duplicate on step, last write wins), as on any resume.
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
