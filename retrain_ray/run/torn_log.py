"""Resuming after a torn metrics log: the checkpoint to continue from so every step is logged once.

A torn `metrics.arrows` (a write cut off by a killed writer, a full disk or a power loss, after a
later checkpoint reached the disk) lost the rows after its last complete batch; resuming from a
checkpoint past them would never write them again. Whoever owns the log cuts its torn segments back
to their complete batches (`retrain-ray train --resume`: `rewind_past_torn_rows` here; a campaign
run: the recorder actor, which writes its runs' logs) and the run resumes from the newest valid
checkpoint at or before the last logged step (None: from the start).
"""

from __future__ import annotations

import logging
from pathlib import Path

from retrain_ray.logs.stream import repair_and_last_step
from retrain_ray.run.checkpoint import CheckpointManager, load_state, verify_checkpoint

log = logging.getLogger(__name__)


def resume_point(checkpoint: Path, last_logged: int, checkpoints_dir: Path, root: Path | None = None) -> Path | None:
    """`checkpoint` if its step is logged, else the newest valid checkpoint of the run in
    `checkpoints_dir` whose step is (None: none is, resume from the start)."""
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
