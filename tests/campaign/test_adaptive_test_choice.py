"""`[campaign.adaptive] test`: the scheduler (campaign/adaptive/scheduler.py), fed recorded rung values with
stand-in Tune trials (no Ray), decides a rung exactly as the pure function of the chosen test does
(`sequential.decide` or `policy.decide`), records the test and its level, and says the decision in a line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from campaign_helpers import REPO
from helpers import GRPO, TINY_RUN, write_campaign

from retrain_ray.campaign.adaptive import policy, sequential
from retrain_ray.campaign.adaptive.scheduler import AdaptiveBook, AdaptiveScheduler
from retrain_ray.campaign.plan import build_plan, run_record
from retrain_ray.config import load_config
from retrain_ray.logs.manifest import Manifest

HOPELESS = {"advantage_mode": "zero_advantage.zero", "transform_mode": "none"}
RUNS = ("grpo+none_s1", "grpo+none_s2", "zero_advantage.zero+none_s1", "zero_advantage.zero+none_s2")


class Controller:
    """The part of Tune's controller the scheduler calls (as in tests/campaign/test_adaptive_way_out.py)."""

    def __init__(self, trials: list[SimpleNamespace]) -> None:
        self.trials = trials

    def get_trials(self) -> list[SimpleNamespace]:
        return self.trials

    def stop_trial(self, trial: SimpleNamespace) -> None:
        trial.status = "TERMINATED"


def _trial(name: str) -> SimpleNamespace:
    return SimpleNamespace(config={"run_name": name}, status="RUNNING", error_file=None, is_finished=lambda: False)


def _at_rung(scheduler: AdaptiveScheduler, controller: Controller, trial: SimpleNamespace, value: float) -> str:
    return scheduler.on_trial_result(controller, trial, {"step": 1, "adaptive_value": value})  # type: ignore[arg-type]
# grpo+none_s1, _s2, zero_advantage.zero+none_s1, _s2 at rung 2: Welch p = 0.024, under the Bonferroni split's
# level (0.05 / 2 looks = 0.025), while the sequential permutation test's smallest p-value with 2 seeds a side is
# 1/3: only "bonferroni" stops
VALUES = (120.0, 130.0, 0.0, 1.0)


def _book(tmp_path, test: str | None) -> tuple[AdaptiveBook, list[str]]:
    adaptive = {"metric": "rl/nonzero_advantage_action_tokens", "window": 2, "rungs": [2, 4], "min_seeds": 2,
                "max_seeds": 2, **({"test": test} if test else {})}
    toml = write_campaign(tmp_path / "t.toml", base=TINY_RUN, plugins={"search_paths": ["configs/plugins"]},
                          campaign={"name": "t", "seeds": [1, 2], "max_steps": 6, "max_workers": 2,
                                    "adaptive": adaptive},
                          conditions=(GRPO, HOPELESS))
    plan = build_plan(load_config(toml), root=tmp_path)
    assert plan.adaptive is not None
    tmp_path.joinpath("c").mkdir()
    manifest = Manifest.create(tmp_path / "c", {"name": "t"}, [run_record(r) for r in plan.runs])
    said: list[str] = []
    book = AdaptiveBook(plan.adaptive, plan.runs, plan.reserve, SimpleNamespace(manifest=manifest),  # type: ignore[arg-type]
                        say=said.append)
    book.load()
    return book, said


def _decide_rung_2(book: AdaptiveBook) -> None:
    trials = [_trial(n) for n in RUNS]
    controller = Controller(trials)
    scheduler = AdaptiveScheduler(book, max_concurrent=4)
    for t in trials:
        scheduler.on_trial_add(controller, t)  # type: ignore[arg-type]
    for t, value in zip(trials, VALUES, strict=True):
        _at_rung(scheduler, controller, t, value)
        t.status = "PAUSED"


@pytest.mark.parametrize("test", [None, "bonferroni", "sequential"])
def test_the_rung_is_decided_by_the_chosen_tests_pure_function(tmp_path, monkeypatch, test):
    monkeypatch.chdir(REPO)  # [plugins] search_paths = ["configs/plugins"] is relative to it
    book, said = _book(tmp_path, test)
    assert book.plan.test == (test or "bonferroni")
    _decide_rung_2(book)
    recorded = book.decisions()[0]
    values = {"grpo+none": [120.0, 130.0], "zero_advantage.zero+none": [0.0, 1.0]}
    seeds = {"grpo+none": 2, "zero_advantage.zero+none": 2}
    if test == "sequential":
        pure = sequential.decide(2, values, seeds_by_condition=seeds, mode="max", alpha=0.05, max_seeds=2,
                                 last_rung=False, can_add_seeds=False, rungs=[2, 4], min_seeds=2)
    else:
        pure = policy.decide(2, values, seeds_by_condition=seeds, mode="max", alpha=0.05, max_seeds=2,
                             last_rung=False, can_add_seeds=False, looks=2)
        assert pure.alpha_per_look == pytest.approx(0.025)
    assert recorded.step == 2 and recorded.values == values and recorded.leader == pure.leader == "grpo+none"
    assert [s.condition for s in recorded.stopped] == [pc.condition for pc in pure.stop] == (
        [] if test == "sequential" else ["zero_advantage.zero+none"])
    assert [c["p_value"] for c in recorded.comparisons] == [pc.p_value for pc in pure.comparisons]
    assert {c["adaptive_test"] for c in recorded.comparisons} == {book.plan.test}
    assert recorded.comparisons[0]["test_level"] == pytest.approx(pure.alpha_per_look)
    head = f"rung 2 ({book.plan.test}, level {pure.alpha_per_look:.2g}): leader grpo+none; "
    said_line = next(line for line in said if line.startswith("rung 2 "))
    assert said_line.startswith(head), said
    for pc in pure.stop:  # the undecided are named with their p-values too
        assert f"stop {pc.condition} (p = {pc.p_value:.2g} against grpo+none)" in said_line
    if not pure.stop:
        assert f"zero_advantage.zero+none undecided (p = {pure.comparisons[0].p_value:.2g})" in said_line
    assert any(line.startswith("grpo+none_s1 paused at rung 2: waiting for ") for line in said), said


def test_the_sequential_test_reads_each_seeds_earlier_rungs_as_one_trajectory(tmp_path, monkeypatch):
    """At the second rung the scheduler hands the sequential test every seed's value at the first rung too
    (same seed order), so the look is tested jointly with the earlier one, not alone."""
    monkeypatch.chdir(REPO)
    book, _ = _book(tmp_path, "sequential")
    handed: list[object] = []
    real = sequential.decide

    def seen(*args, **kwargs):  # the real test, recording what the scheduler hands it
        handed.append(kwargs.get("earlier_values"))
        return real(*args, **kwargs)
    monkeypatch.setattr(sequential, "decide", seen)
    trials = [_trial(n) for n in RUNS]
    controller = Controller(trials)
    scheduler = AdaptiveScheduler(book, max_concurrent=4)
    for t in trials:
        scheduler.on_trial_add(controller, t)  # type: ignore[arg-type]
    for step, values in ((1, VALUES), (3, (125.0, 128.0, 2.0, 3.0))):
        for t, value in zip(trials, values, strict=True):
            t.status = "RUNNING"
            scheduler.on_trial_result(controller, t, {"step": step, "adaptive_value": value})  # type: ignore[arg-type]
            t.status = "PAUSED"
    recorded = [d for d in book.decisions() if d.step == 4]
    assert recorded, book.decisions()
    seeds = {"grpo+none": 2, "zero_advantage.zero+none": 2}
    values = {"grpo+none": [125.0, 128.0], "zero_advantage.zero+none": [2.0, 3.0]}
    earlier = {"grpo+none": [[120.0], [130.0]], "zero_advantage.zero+none": [[0.0], [1.0]]}
    assert handed[-1] == earlier  # 2 seeds a side: the joint and the lone look give the same p here
    joint = real(4, values, seeds_by_condition=seeds, mode="max", alpha=0.05, max_seeds=2,
                              last_rung=True, can_add_seeds=False, rungs=[2, 4], min_seeds=2, earlier_values=earlier)
    assert recorded[0].comparisons[0]["test_level"] == pytest.approx(joint.alpha_per_look)
    assert [c["p_value"] for c in recorded[0].comparisons] == [pc.p_value for pc in joint.comparisons]
