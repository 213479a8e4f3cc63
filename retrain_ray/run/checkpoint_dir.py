"""`[training] checkpoint_dir` (seed 001): checkpoints in a directory of their own, resumed automatically.

The run writes `checkpoint_step_N/` and `final/` directly in `checkpoint_dir` (created if missing),
each atomic and checksummed as under a run directory (run/checkpoint.py), with a copy of the run's
`run_meta.json` that names the run and its config. A run started with a `checkpoint_dir` that holds
checkpoints resumes from the newest one that verifies, when they are of the same run (the run's
name: its log directory's) and a config that matches in every setting that shapes the steps
(run/same_run.py: raising max_steps continues the run); another run's or config's checkpoints are an
error (`ForeignRunDir`) and are never overwritten.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from retrain_ray.run.checkpoint import CheckpointManager
from retrain_ray.run.same_run import check_same_run

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig


def checkpoint_root(cfg: RetrainConfig) -> Path | None:
    """The `checkpoint_dir` of the run (`~` expanded), None when checkpoints live in the run directory."""
    text = cfg.training.checkpoint_dir
    return Path(text).expanduser() if text else None


def checkpoint_dir_resume(cfg: RetrainConfig, run_name: str) -> Path | None:
    """The newest verified checkpoint in `checkpoint_dir` to resume from; None when there is no
    `checkpoint_dir` or it holds no checkpoint. Raises ForeignRunDir for another run's or config's."""
    root = checkpoint_root(cfg)
    if root is None:
        return None
    manager = CheckpointManager(root, keep_last=0, root=root)
    if not manager.candidates():
        return None
    check_same_run(root, run_name, cfg.model_dump(mode="json"))
    found = manager.latest_valid()
    if found is None:
        raise FileNotFoundError(f"checkpoint_dir {root} holds checkpoints of run {run_name!r}, but none verifies "
                                "(each is damaged or incomplete): move them away to start the run from step 0")
    return found
