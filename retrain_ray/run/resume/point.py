"""Where a run resumes: its `[training] checkpoint_dir`, the same-run check of a directory of checkpoints, and
the rewind past a torn metrics log (each in a section below).

`[training] checkpoint_dir` (seed 001): checkpoints in a directory of their own, resumed automatically.
The run writes `checkpoint_step_N/` and `final/` directly in `checkpoint_dir` (created if missing),
each atomic and checksummed as under a run directory (run/resume/checkpoint.py), with a copy of the run's
`run_meta.json` that names the run and its config. A run started with a `checkpoint_dir` that holds
checkpoints resumes from the newest one that verifies, when they are of the same run (the run's
name: its log directory's) and a config that matches in every setting that shapes the steps
(the same-run check below: raising max_steps continues the run); another run's or config's checkpoints are an
error (`ForeignRunDir`) and are never overwritten.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from retrain_ray.logs.stream import repair_and_last_step
from retrain_ray.util.secrets import redact

if TYPE_CHECKING:
    from retrain_ray.config.sections_training import TrainingSection


def checkpoint_root(training: TrainingSection) -> Path | None:
    """The `checkpoint_dir` of the run (`~` expanded), None when checkpoints live in the run directory."""
    text = training.checkpoint_dir
    return Path(text).expanduser() if text else None


def checkpoint_dir_resume(training: TrainingSection, config: Mapping[str, object], run_name: str) -> Path | None:
    """The newest verified checkpoint in `checkpoint_dir` to resume from; None when there is no
    `checkpoint_dir` or it holds no checkpoint. Raises ForeignRunDir for another run's or config's
    (`config`: the run's whole config as JSON, compared with the one the checkpoints' run recorded)."""
    # deferred: checkpoint.py loads torch (run/state.py); the campaign driver imports this module without it
    from retrain_ray.run.resume.checkpoint import CheckpointManager

    root = checkpoint_root(training)
    if root is None:
        return None
    manager = CheckpointManager(root, keep_last=0, root=root)
    if not manager.candidates():
        return None
    check_same_run(root, run_name, config)
    found = manager.latest_valid()
    if found is None:
        raise FileNotFoundError(f"checkpoint_dir {root} holds checkpoints of run {run_name!r}, but none verifies "
                                "(each is damaged or incomplete): move them away to start the run from step 0")
    return found


# ----------------------------------------------------------------------------------------------------
# Is a directory of checkpoints this run's? The run name and config its `run_meta.json` records.
#
# A run's checkpoints are resumed only by the same run with a config that matches in every setting that
# shapes the steps: a campaign trial picking up its work directory (campaign/resume/own_checkpoint.py) and a run
# started with a `[training] checkpoint_dir` that holds checkpoints already (above).
# Settings that do not shape the steps (`[campaign]`, `[logging]`, `[resume]`, `[squeeze]`,
# `training.max_steps`: raising it continues a run) may differ. Pure: no Ray, no torch.
RUN_META = "run_meta.json"
# config keys a run may change between its attempts: they do not change what its steps compute
IGNORED = ("campaign", "logging", "resume", "squeeze", "training.max_steps")


class ForeignRunDir(RuntimeError):
    """The run directory holds checkpoints of another run or config."""


def flat_config(data: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flat_config(cast("Mapping[str, object]", value), f"{name}."))
        else:
            flat[name] = value
    return flat


def _ignored(key: str) -> bool:
    return any(key == i or key.startswith(f"{i}.") for i in IGNORED)


def config_differences(recorded: Mapping[str, object], current: Mapping[str, object]) -> list[str]:
    """Dotted keys whose values differ between two (redacted) config dumps, ignoring `IGNORED`."""
    old, new = flat_config(recorded), flat_config(current)
    return sorted(k for k in old.keys() | new.keys() if not _ignored(k) and old.get(k) != new.get(k))


def foreign(work_dir: Path, what: str) -> ForeignRunDir:
    return ForeignRunDir(
        f"{work_dir} holds checkpoints of {what}; they are not resumed and not overwritten. Move the directory "
        "away (or delete it) to start this run from step 0, or run with the config that wrote it")


def check_meta(meta: object, meta_path: Path, where: Path, run_name: str, config: Mapping[str, object]) -> None:
    if not isinstance(meta, dict) or not isinstance(cast("dict[str, object]", meta).get("config"), dict):
        raise foreign(where, f"an unknown run ({meta_path} records no config)")
    recorded = cast("dict[str, object]", meta)
    if recorded.get("run_name") != run_name:
        raise foreign(where, f"run {recorded.get('run_name')!r}, not {run_name!r}")
    differ = config_differences(cast("Mapping[str, object]", recorded["config"]), redact(dict(config)))
    if differ:
        shown = ", ".join(differ[:8]) + (f" and {len(differ) - 8} more" if len(differ) > 8 else "")
        raise foreign(where, f"run {run_name!r} with another config (differs in {shown})")


def check_same_run(work_dir: Path, run_name: str, config: Mapping[str, object]) -> None:
    """Raises ForeignRunDir unless `work_dir/run_meta.json` records `run_name` and a matching config
    (`config`: the trial's `model_dump(mode="json")`, redacted here as run_meta's is)."""
    meta_path = work_dir / RUN_META
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise foreign(work_dir, f"an unknown run ({meta_path} does not load: {exc})") from exc
    check_meta(meta, meta_path, work_dir, run_name, config)


# ----------------------------------------------------------------------------------------------------
# Resuming after a torn metrics log: the checkpoint to continue from so every step is logged once.
#
# A torn `metrics.arrows` (a write cut off by a killed writer, a full disk or a power loss, after a
# later checkpoint reached the disk) lost the rows after its last complete batch; resuming from a
# checkpoint past them would never write them again. Whoever owns the log cuts its torn segments back
# to their complete batches (`retrain-ray train --resume`: `rewind_past_torn_rows` here; a campaign
# run: the recorder actor, which writes its runs' logs) and the run resumes from the newest valid
# checkpoint at or before the last logged step (None: from the start).
log = logging.getLogger(__name__)


def resume_point(checkpoint: Path, last_logged: int, checkpoints_dir: Path, root: Path | None = None) -> Path | None:
    """`checkpoint` if its step is logged, else the newest valid checkpoint of the run in
    `checkpoints_dir` whose step is (None: none is, resume from the start)."""
    # deferred: checkpoint.py loads torch (run/state.py); the campaign driver imports this module without it
    from retrain_ray.run.resume.checkpoint import CheckpointManager, load_state

    if load_state(checkpoint).step <= last_logged:
        return checkpoint
    earlier = newest_logged(CheckpointManager(checkpoints_dir, root=root).candidates(), last_logged)
    chosen = earlier[0] if earlier else None
    log.warning("%s: the metrics log was torn after step %d; resuming from %s so the lost rows are written again",
                checkpoints_dir, last_logged, chosen or "the start")
    return chosen


def newest_logged(candidates: list[Path], last_logged: int,
                  warn: logging.Logger | None = None) -> tuple[Path, int] | None:
    """The first of `candidates` (newest first) that verifies and whose step is <= `last_logged`, with
    its step (None: none is); `warn`: the logger that says why each one before it was skipped."""
    # deferred: checkpoint.py loads torch (run/state.py); the campaign driver imports this module without it
    from retrain_ray.run.resume.checkpoint import load_state, verify_checkpoint

    for candidate in candidates:
        problem = verify_checkpoint(candidate)
        if problem:
            if warn:
                warn.warning("skipping damaged checkpoint %s: %s; trying the previous one", candidate, problem)
            continue
        step = load_state(candidate).step
        if step <= last_logged:
            return candidate, step
        if warn:
            warn.warning("skipping checkpoint %s: its step %d is past the last step logged without a gap (%d)",
                         candidate, step, last_logged)
    return None


def rewind_past_torn_rows(run_dir: Path, checkpoint: Path) -> Path | None:
    """For a run that writes its own log into `run_dir` (`retrain-ray train --resume`)."""
    last_logged = repair_and_last_step(run_dir)
    if last_logged is None:
        return checkpoint
    return resume_point(checkpoint, last_logged, run_dir, checkpoint.parent)
