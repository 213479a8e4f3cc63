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


def _book(tmp_path, test: str | None, seeds: int = 2, alpha: float = 0.05) -> tuple[AdaptiveBook, list[str]]:
    adaptive = {"metric": "rl/nonzero_advantage_action_tokens", "window": 2, "rungs": [2, 4], "min_seeds": seeds,
                "max_seeds": seeds, "alpha": alpha, **({"test": test} if test else {})}
    toml = write_campaign(tmp_path / "t.toml", base=TINY_RUN, plugins={"search_paths": ["configs/plugins"]},
                          campaign={"name": "t", "seeds": list(range(1, seeds + 1)), "max_steps": 6,
                                    "max_workers": 2, "adaptive": adaptive},
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


# 3 seeds a side, alpha 0.2, rungs 2 and 4 (no re-looks): the rungs' share 0.2 is spent 0.168 at rung 2
# (0.2 * (1/2) ** 0.25) and 0.032 more at rung 4. Of the 20 splits of 3 + 3 seeds, the observed one is the most
# extreme at rung 4 (p = 2/20) but not at rung 2 (p = 6/20): tested jointly with rung 2 (the splits that crossed
# rung 2's boundary count against rung 4's 0.2 * 20 = 4), rung 4 stops the hopeless condition; rung 4 alone has
# 0.032 * 20 < 1 split to spend and stops nothing.
SEED_RUNS = tuple(f"{c}_s{s}" for c in ("grpo+none", "zero_advantage.zero+none") for s in (1, 2, 3))
AT_RUNG_2 = (5.0, 0.5, 6.0, 0.0, 4.0, 1.0)
AT_RUNG_4 = (10.0, 11.0, 12.0, 0.0, 1.0, 2.0)


def test_the_sequential_test_reads_each_seeds_earlier_rungs_as_one_trajectory(tmp_path, monkeypatch):
    """At the second rung the scheduler hands the sequential test every seed's value at the first rung too
    (same seed order), so the look is tested jointly with the earlier one, not alone: with 3 seeds a side
    the joint test stops where a lone look cannot."""
    monkeypatch.chdir(REPO)
    book, _ = _book(tmp_path, "sequential", seeds=3, alpha=0.2)
    trials = [_trial(n) for n in SEED_RUNS]
    controller = Controller(trials)
    scheduler = AdaptiveScheduler(book, max_concurrent=6)
    for t in trials:
        scheduler.on_trial_add(controller, t)  # type: ignore[arg-type]
    for step, values in ((1, AT_RUNG_2), (3, AT_RUNG_4)):
        for t, value in zip(trials, values, strict=True):
            t.status = "RUNNING"
            scheduler.on_trial_result(controller, t, {"step": step, "adaptive_value": value})  # type: ignore[arg-type]
            t.status = "PAUSED"
    first, second = (next(d for d in book.decisions() if d.step == step) for step in (2, 4))
    assert not first.stopped and first.comparisons[0]["p_value"] == pytest.approx(6 / 20)
    seeds = {"grpo+none": 3, "zero_advantage.zero+none": 3}
    values = {"grpo+none": list(AT_RUNG_4[:3]), "zero_advantage.zero+none": list(AT_RUNG_4[3:])}
    earlier = {"grpo+none": [[v] for v in AT_RUNG_2[:3]], "zero_advantage.zero+none": [[v] for v in AT_RUNG_2[3:]]}
    settings = {"seeds_by_condition": seeds, "mode": "max", "alpha": 0.2, "max_seeds": 3, "last_rung": True,
                "can_add_seeds": False, "rungs": [2, 4], "min_seeds": 3}
    joint = sequential.decide(4, values, earlier_values=earlier, **settings)
    alone = sequential.decide(4, values, **settings)
    assert [pc.condition for pc in joint.stop] == ["zero_advantage.zero+none"] and not alone.stop
    assert [s.condition for s in second.stopped] == ["zero_advantage.zero+none"]
    assert second.comparisons[0]["test_level"] == pytest.approx(joint.alpha_per_look) != alone.alpha_per_look
    assert [c["p_value"] for c in second.comparisons] == [pc.p_value for pc in joint.comparisons]
