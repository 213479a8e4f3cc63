"""Where a campaign trial's run continues from: one decision over the four resume sources, or fresh.

In order:

* `tune`: Tune's last reported checkpoint of the run (a retry, a restored campaign), when every step up
  to it is in the run's metrics log (a pointer to the run's own checkpoint: the checkpoint it names,
  campaign/resume/pointer.py; a pointer whose checkpoint the run has since pruned counts as none);
* `torn_log`: the log was torn before that checkpoint (a recorder cut off mid-write): the run's newest
  checkpoint at or before the last step still logged, so the lost rows are written again (run/resume/point.py);
* `own`: Tune has none (a fresh Tune experiment after a torn or extended state, a restart that lost its
  copies): the run's own newest verified checkpoint in its work directory whose step is logged, when the
  directory is this run's with a matching config (campaign/resume/own_checkpoint.py);
* `tune_copy`: else (the work directory lies on another node) the newest such of Tune's copies set aside
  with the torn state (campaign/resume/tune_copies.py);
* `fresh`: none of them: the run starts from step 0.

Another run's or config's directory is an error (`ForeignRunDir`), never a resume point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from retrain_ray.campaign.resume.own_checkpoint import own_checkpoint, set_aside_copies, tune_copy
from retrain_ray.campaign.resume.pointer import resolve

ResumeSource = Literal["tune", "torn_log", "own", "tune_copy", "fresh"]


class RunLog(Protocol):
    """The owner of the runs' metrics logs (the campaign's recorder: campaign/recorder.py)."""

    def repair_metrics(self, run: str) -> int | None:
        """Cuts the run's torn segments back; the last step still logged, None when nothing was torn."""
        ...

    def logged_through(self, run: str) -> int:
        """Repairs the run's log; the last step logged with every step before it (-1: none)."""
        ...


@dataclass(frozen=True)
class ResumePoint:
    """Where a run continues: `path` (None: from step 0) holding the state after step `step`, and why."""

    source: ResumeSource
    step: int | None
    path: Path | None
    why: str

    def reported(self) -> dict[str, int | str]:
        """What each of the run's reports to Tune carries about a resume Tune did not give it
        (campaign/tracking.py names it when the run completes); {} otherwise."""
        if self.source not in ("own", "tune_copy") or self.path is None or self.step is None:
            return {}
        return {"resumed_own_step": self.step, "resumed_from": self.source, "resumed_path": str(self.path)}


def fresh(why: str) -> ResumePoint:
    return ResumePoint("fresh", None, None, why)


def decide_resume(tune_checkpoint: Path | None, log: RunLog, *, run_name: str, work_dir: Path,
                  tune_dir: Path | None, config: Mapping[str, object]) -> ResumePoint:
    """The resume point of run `run_name`: `tune_checkpoint` is Tune's checkpoint as a local directory
    (None: Tune gave none), `work_dir` the run's own directory, `tune_dir` Tune's experiment directory when
    local (its set-aside copies), `config` the run's config as JSON. Raises ForeignRunDir for a directory
    of another run or config."""
    named = resolve(tune_checkpoint) if tune_checkpoint is not None else None
    if named is not None:
        return _after_tune_checkpoint(named, log.repair_metrics(run_name), work_dir)
    if not (work_dir / "checkpoints").is_dir() and not (tune_dir and set_aside_copies(tune_dir, run_name)):
        return fresh("Tune has no checkpoint of the run and the run has none of its own")
    logged = log.logged_through(run_name)
    found = own_checkpoint(work_dir, run_name, config, logged)
    if found is not None:
        return ResumePoint("own", found[1], found[0], f"Tune has no checkpoint; the run's own of step {found[1]}")
    copied = tune_copy(tune_dir, work_dir, run_name, config, logged) if tune_dir is not None else None
    if copied is not None:
        return ResumePoint("tune_copy", copied[1], copied[0],
                           f"Tune has no checkpoint and {work_dir} none usable; Tune's set-aside copy of step {copied[1]}")
    return fresh(f"Tune has no checkpoint; no usable one of the run's own with every step up to it logged "
                 f"(logged through step {logged})")


def _after_tune_checkpoint(checkpoint: Path, last_logged: int | None, work_dir: Path) -> ResumePoint:
    # deferred: run/resume/point.py and run/resume/checkpoint.py load torch, which the driver never needs
    from retrain_ray.run.resume.checkpoint import load_state
    from retrain_ray.run.resume.point import resume_point

    if last_logged is None:
        return ResumePoint("tune", load_state(checkpoint).step, checkpoint, "Tune's last reported checkpoint")
    chosen = resume_point(checkpoint, last_logged, work_dir)
    if chosen is None:
        return fresh(f"the metrics log was torn after step {last_logged} and no checkpoint is at or before it")
    step = load_state(chosen).step
    if chosen == checkpoint:
        return ResumePoint("tune", step, chosen, f"Tune's last reported checkpoint (the log, torn after step "
                                                 f"{last_logged}, holds every step up to it)")
    return ResumePoint("torn_log", step, chosen,
                       f"the metrics log was torn after step {last_logged}: the newest checkpoint at or before it")
