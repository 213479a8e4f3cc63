"""`decide_resume` (campaign/resume/point.py) on real directories: real checkpoints written by the run's
CheckpointManager, real Arrow metrics logs written (and torn) through the campaign's recorder, Tune
copies laid out as `tune_state.set_aside` leaves them. One test per resume source, plus fresh."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from recorded_campaign import metrics_row
from test_campaign_torn_log import batch_bounds
from test_own_checkpoint import _plan_config, _run_dir, _tune_copies

from retrain_ray.campaign.recorder import RecorderCore
from retrain_ray.campaign.resume.own_checkpoint import ForeignRunDir
from retrain_ray.campaign.resume.point import ResumePoint, decide_resume
from retrain_ray.util.secrets import redact


class Setup:
    """A campaign directory with one run: its recorder (the RunLog), work directory and Tune directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.plan = _plan_config(tmp_path)
        self.config = self.plan.config.model_dump(mode="json")
        self.name = self.plan.run_name
        self.recorder = RecorderCore(tmp_path / "campaign", parquet_every_s=1e9)
        self.run_dir = tmp_path / "campaign" / "runs" / self.name
        self.work = self.run_dir / "work"
        self.tune = tmp_path / "campaign" / "tune"

    def log_steps(self, *batches: list[int]) -> None:
        for batch in batches:
            self.recorder.append(self.name, "metrics", [metrics_row("grpo", 1, s) for s in batch])

    def decide(self, tune_checkpoint: Path | None = None) -> ResumePoint:
        return decide_resume(tune_checkpoint, self.recorder, run_name=self.name, work_dir=self.work,
                             tune_dir=self.tune, config=self.config)


def test_a_run_with_nothing_to_resume_from_starts_fresh(tmp_path):
    s = Setup(tmp_path)
    point = s.decide()
    assert (point.source, point.step, point.path) == ("fresh", None, None)
    assert point.reported() == {}
    s.log_steps([0, 1])  # checkpoints whose steps are not logged: none is usable, still fresh
    _run_dir(s.work, s.name, s.config, steps=(3, 5))
    assert s.decide().source == "fresh"


def test_tunes_checkpoint_is_used_when_the_log_holds_every_step_up_to_it(tmp_path):
    s = Setup(tmp_path)
    s.log_steps([0, 1, 2], [3, 4, 5])
    checkpoint = _run_dir(tmp_path / "tune-copy", s.name, s.config, steps=(5,)) / "checkpoints" / "checkpoint_step_5"
    point = s.decide(checkpoint)
    assert (point.source, point.step, point.path) == ("tune", 5, checkpoint)
    assert point.reported() == {}  # Tune gave it: nothing to record


def test_a_log_torn_before_tunes_checkpoint_rewinds_to_the_runs_checkpoint_at_or_before_it(tmp_path):
    s = Setup(tmp_path)
    s.log_steps([0, 1], [2, 3], [4, 5])
    s.recorder.close_run(s.name, export=False)
    path = s.run_dir / "metrics.arrows"
    bounds = batch_bounds(path)
    with open(path, "r+b") as f:  # steps 4 and 5 torn off mid-batch
        f.truncate((bounds[-2] + bounds[-1]) // 2)
    _run_dir(s.work, s.name, s.config, steps=(1, 3, 5))
    checkpoint = s.work / "checkpoints" / "checkpoint_step_5"
    point = s.decide(checkpoint)
    assert (point.source, point.step, point.path) == ("torn_log", 3, s.work / "checkpoints" / "checkpoint_step_3")
    assert "torn after step 3" in point.why


def test_without_tunes_checkpoint_the_runs_own_newest_logged_checkpoint_is_used(tmp_path):
    s = Setup(tmp_path)
    s.log_steps([0, 1, 2, 3, 4])
    _run_dir(s.work, s.name, s.config, steps=(1, 3, 5))
    point = s.decide()
    expected = s.work / "checkpoints" / "checkpoint_step_3"  # step 5 is not logged
    assert (point.source, point.step, point.path) == ("own", 3, expected)
    assert point.reported() == {"resumed_own_step": 3, "resumed_from": "own", "resumed_path": str(expected)}


def test_without_a_work_directory_a_set_aside_tune_copy_is_used(tmp_path):
    s = Setup(tmp_path)
    s.log_steps([0, 1, 2, 3])
    source = _run_dir(tmp_path / "other-node", s.name, s.config, steps=(1, 3))
    meta = {"run_name": s.name, "config": redact(s.config)}
    _first, second = _tune_copies(s.tune, ".torn-20261124T010000", s.name, source, meta)
    point = s.decide()
    assert (point.source, point.step, point.path) == ("tune_copy", 3, second)
    assert point.reported()["resumed_from"] == "tune_copy"


def test_a_work_directory_of_another_config_is_an_error_not_a_resume_point(tmp_path):
    s = Setup(tmp_path)
    s.log_steps([0, 1])
    other = _plan_config(tmp_path, lr=1e-2).config.model_dump(mode="json")
    _run_dir(s.work, s.name, other, steps=(1,))
    with pytest.raises(ForeignRunDir):
        s.decide()
    shutil.rmtree(s.work)
    assert s.decide().source == "fresh"
