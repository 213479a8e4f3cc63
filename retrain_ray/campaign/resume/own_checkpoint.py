"""A trial that Tune gives no checkpoint resumes from its run's own checkpoints when they are its own.

Tune hands a trial its last reported checkpoint. It has none after a torn experiment state was set
aside and Tune started afresh (campaign/resume/tune_copies.py), nor after a restart that lost its copies;
yet the run's work directory (`<campaign>/runs/<run>/work`) still holds the checkpoints the run wrote
(`checkpoint_step_N`, atomic and checksummed: run/resume/checkpoint.py). `own_checkpoint` picks the newest of
them that verifies (a damaged one is skipped with a warning, as `retrain-ray train --resume` does),
whose step is logged (every step up to it is in the run's metrics log, so no row is lost) and whose
run is this trial's run: `run_meta.json` beside them names the same run and a config that matches the
trial's in every setting that shapes the steps. Settings that do not (`[campaign]`, `[logging]`,
`[resume]`, `[squeeze]`, `training.max_steps`: raising it continues a run) may differ.

A run's work directory lies on the node that wrote it. On a multi-node cluster without a shared file
system a trial placed elsewhere finds none there; `tune_copy` then picks, with the same checks, the
newest of Tune's copies of the run's checkpoints that `tune_state.set_aside` moved into the newest
`tune/.torn-<time>/<run>/` (Tune's storage, which Ray requires every node to reach): the run and
config come from the copy's `.metadata.json` (Ray's `Checkpoint.set_metadata` file, which the trial
writes into every checkpoint it reports) or else the run's `run_meta.json`; a copy with neither is
skipped with a warning.

A run directory (or Tune copy) of another run or config is an error (`ForeignRunDir`), never picked up and never
overwritten: the trial fails naming the directory, the differing settings and the fix.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from retrain_ray.campaign.resume.pointer import resolve
from retrain_ray.campaign.resume.tune_copies import ASIDE_KINDS
from retrain_ray.run.resume.point import (  # (re-exported: campaign/resume/edits.py, the tests)
    RUN_META,
    ForeignRunDir,
    check_meta,
    check_same_run,
    config_differences,
    flat_config,
)

__all__ = ["TUNE_META", "ForeignRunDir", "config_differences", "flat_config", "own_checkpoint", "set_aside_copies",
           "tune_copy"]

log = logging.getLogger(__name__)

# what trial.TuneReporter writes into each reported checkpoint (Ray's `Checkpoint.set_metadata` file)
TUNE_META = ".metadata.json"


def _newest_usable(candidates: list[Path], logged_through: int) -> tuple[Path, int] | None:
    """The first of `candidates` (newest first) that verifies and whose step is <= `logged_through`,
    with its step, warning of each one skipped."""
    from retrain_ray.run.resume.point import newest_logged  # deferred: loads torch

    return newest_logged(candidates, logged_through, warn=log)


def own_checkpoint(work_dir: Path, run_name: str, config: Mapping[str, object],
                   logged_through: int) -> tuple[Path, int] | None:
    """The newest verified checkpoint in `work_dir` whose step is <= `logged_through` (the last step
    such that every step up to it is logged) and its step, after `check_same_run`; None: start from step 0."""
    # deferred: run/resume/checkpoint.py loads torch, which the driver (importing campaign/trial.py) never needs
    from retrain_ray.run.resume.checkpoint import CheckpointManager

    candidates = CheckpointManager(work_dir, keep_last=0).candidates()
    if not candidates:
        return None
    check_same_run(work_dir, run_name, config)
    found = _newest_usable(candidates, logged_through)
    if found is None:
        log.warning("%s: no usable checkpoint of run %s", work_dir, run_name)
    return found


def set_aside_copies(tune_dir: Path, run_name: str) -> list[Path]:
    """Tune's copies of `run_name`'s checkpoints in the newest `tune/.torn-<time>/<run>/` (or
    `.extended-<time>/`: campaign/resume/edits.py), newest first."""
    asides = sorted((p for kind in ASIDE_KINDS for p in tune_dir.glob(f".{kind}-*") if (p / run_name).is_dir()),
                    key=lambda p: p.name.split("-", 1)[1])  # by the time they were set aside
    if not asides:
        return []
    copies = [p for p in (asides[-1] / run_name).glob("checkpoint_*") if p.is_dir()]
    return sorted(copies, key=lambda p: p.name, reverse=True)  # checkpoint_NNNNNN: Tune's report index


def _copy_meta(copy: Path, work_dir: Path) -> tuple[dict[str, object], Path] | None:
    """The run and config a Tune copy belongs to: its `.metadata.json` (trial.TuneReporter writes it),
    else the run's `run_meta.json` when its work directory is on this node; None when neither loads."""
    for path in (copy / TUNE_META, work_dir / RUN_META):
        try:
            meta: object = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(meta, dict) and "run_name" in meta:
            return cast("dict[str, object]", meta), path
    return None


def tune_copy(tune_dir: Path, work_dir: Path, run_name: str, config: Mapping[str, object],
              logged_through: int) -> tuple[Path, int] | None:
    """For a run whose own work directory has no usable checkpoint (on a multi-node cluster it lies on
    the node that wrote it): the newest of Tune's set-aside copies of its checkpoints that verifies, whose
    step is <= `logged_through` and whose run and config match (ForeignRunDir otherwise), with its step;
    None: none."""
    for copy in set_aside_copies(tune_dir, run_name):
        named = resolve(copy)  # a pointer to the run's own checkpoint (campaign/resume/pointer.py), or the copy
        if named is None:
            continue
        found = _newest_usable([named], logged_through)
        if found is None:
            continue
        meta = _copy_meta(copy, work_dir)
        if meta is None:
            log.warning("skipping Tune's copy %s: neither it nor %s says which run and config it is of",
                        copy, work_dir / RUN_META)
            continue
        check_meta(meta[0], meta[1], copy, run_name, config)
        return found
    return None
