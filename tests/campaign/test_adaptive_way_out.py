"""Every wait of an adaptive campaign has a way out (issue 34): the scheduler (campaign/adaptive/scheduler.py)
driven with stand-in Tune trials, no Ray. A trial Tune put in ERROR without telling the scheduler is counted
failed and its rung decided without it; a rung waiting for a run no trial runs is decided once nothing can
move; a paused run is named in the manifest and the progress line (campaign/progress_line.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from campaign_helpers import REPO
from helpers import GRPO, TINY_RUN, write_campaign

import retrain_ray.campaign.adaptive.scheduler as scheduler_module
from retrain_ray.campaign.adaptive.scheduler import AdaptiveBook, AdaptiveScheduler
from retrain_ray.campaign.plan import build_plan, run_record
from retrain_ray.campaign.progress_line import paused_summary
from retrain_ray.config import load_config
from retrain_ray.logs.manifest import Manifest

HOPELESS = {"advantage_mode": "zero_advantage.zero", "transform_mode": "none"}
RUNS = ("grpo+none_s1", "grpo+none_s2", "zero_advantage.zero+none_s1", "zero_advantage.zero+none_s2")


class Controller:
    """The part of Tune's controller the scheduler calls."""

    def __init__(self, trials: list[SimpleNamespace]) -> None:
        self.trials = trials
        self.stopped: list[str] = []

    def get_trials(self) -> list[SimpleNamespace]:
        return self.trials

    def stop_trial(self, trial: SimpleNamespace) -> None:
        self.stopped.append(trial.config["run_name"])
        trial.status = "TERMINATED"


def _trial(name: str, status: str = "RUNNING") -> SimpleNamespace:
    return SimpleNamespace(config={"run_name": name}, status=status, error_file=None,
                           is_finished=lambda: status in ("ERROR", "TERMINATED"))


@pytest.fixture
def book(tmp_path, monkeypatch) -> AdaptiveBook:
    monkeypatch.chdir(REPO)  # [plugins] search_paths = ["configs/plugins"] is relative to it
    toml = write_campaign(
        tmp_path / "w.toml", base=TINY_RUN, plugins={"search_paths": ["configs/plugins"]},
        campaign={"name": "w", "seeds": [1, 2], "max_steps": 6, "max_workers": 2,
                  "adaptive": {"metric": "rl/nonzero_advantage_action_tokens", "window": 2, "rungs": [2, 4],
                               "min_seeds": 2, "max_seeds": 2}},
        conditions=(GRPO, HOPELESS))
    plan = build_plan(load_config(toml), root=tmp_path)
    assert plan.adaptive is not None
    tmp_path.joinpath("c").mkdir()
    manifest = Manifest.create(tmp_path / "c", {"name": "w"}, [run_record(r) for r in plan.runs])
    book = AdaptiveBook(plan.adaptive, plan.runs, plan.reserve, SimpleNamespace(manifest=manifest))  # type: ignore[arg-type]
    book.load()
    return book


def _at_rung(scheduler: AdaptiveScheduler, controller: Controller, trial: SimpleNamespace, value: float) -> str:
    return scheduler.on_trial_result(controller, trial, {"step": 1, "adaptive_value": value})  # type: ignore[arg-type]


def test_a_trial_tune_errored_outside_the_run_is_counted_failed_and_the_rung_decided_without_it(book):
    trials = [_trial(n) for n in RUNS]
    controller = Controller(trials)
    scheduler = AdaptiveScheduler(book, max_concurrent=2)
    for t in trials:
        scheduler.on_trial_add(controller, t)  # type: ignore[arg-type]
    for t, value in zip(trials[:3], (120.0, 130.0, 0.0), strict=True):
        assert _at_rung(scheduler, controller, t, value) == "PAUSE"
        t.status = "PAUSED"
    assert book.manifest.run("grpo+none_s1").paused_at_rung == 2  # type: ignore[attr-defined]
    assert "zero_advantage.zero+none_s2" in str(book.manifest.run("grpo+none_s1").paused_why)  # type: ignore[attr-defined]
    assert "paused at rung 2: grpo+none_s1, grpo+none_s2, zero_advantage.zero+none_s1" in \
        paused_summary(book.manifest.record.runs)
    trials[3].status = "ERROR"  # Tune's actor-reuse failure: ERROR, and no scheduler callback
    chosen = scheduler.choose_trial_to_run(controller)  # type: ignore[arg-type]
    failed = book.manifest.run("zero_advantage.zero+none_s2")
    assert failed.status == "failed" and "Tune ended its trial in ERROR" in failed.error
    assert [d.step for d in book.decisions()] == [2]  # decided with the runs that arrived
    assert chosen is not None and chosen.status == "PAUSED"  # a paused run goes on
    assert book.manifest.run(chosen.config["run_name"]).paused_at_rung is None  # type: ignore[attr-defined]


def test_a_rung_waiting_for_a_run_no_trial_runs_is_decided_once_nothing_can_move(book, monkeypatch):
    monkeypatch.setattr(scheduler_module, "STUCK_AFTER_S", 0.0)
    trials = [_trial(n) for n in RUNS[:3]]  # the fourth run never gets a trial
    controller = Controller(trials)
    scheduler = AdaptiveScheduler(book, max_concurrent=2)
    for t in trials:
        scheduler.on_trial_add(controller, t)  # type: ignore[arg-type]
    book.queue.clear()  # and the searcher has nothing left to suggest
    for t, value in zip(trials, (120.0, 130.0, 0.0), strict=True):
        assert _at_rung(scheduler, controller, t, value) == "PAUSE"
        t.status = "PAUSED"
    assert scheduler.choose_trial_to_run(controller) is None  # type: ignore[arg-type]  # stuck: noted
    scheduler.choose_trial_to_run(controller)  # type: ignore[arg-type]  # still stuck: the way out
    missing = book.manifest.run("zero_advantage.zero+none_s2")
    assert missing.status == "failed" and "no trial runs it" in missing.error
    assert [d.step for d in book.decisions()] == [2]
    assert scheduler.choose_trial_to_run(controller) is not None  # type: ignore[arg-type]


def test_a_campaign_with_no_paused_run_has_no_paused_note(book):
    assert paused_summary(book.manifest.record.runs) == ""
    assert Path(book.manifest.path).is_file()
