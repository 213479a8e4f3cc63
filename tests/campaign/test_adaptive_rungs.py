"""The default rung schedule (`[campaign.adaptive] rungs` left out: a rung at every `rung_every` of
max_steps, config/rung_schedule.py) and why it is the default: on the seeded simulation suite's
clearly-worse scenarios the sequential test spends at most 80% of the Bonferroni split's seed-steps there
(benchmarks/adaptive_tests.py measures every scenario at 1000 campaigns; docs/campaigns.md)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
from helpers import TINY_CPU
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from retrain_ray.campaign.adaptive import permutation
from retrain_ray.campaign.adaptive.sequential_simulation import simulate_test
from retrain_ray.campaign.adaptive.simulation import Scenario
from retrain_ray.campaign.plan import build_plan
from retrain_ray.config import CampaignSection, RetrainConfig
from retrain_ray.config.rung_schedule import DEFAULT_RUNG_EVERY, even_rungs

GRPO = {"advantage_mode": "grpo", "transform_mode": "none"}


def test_the_default_rungs_by_hand():
    assert DEFAULT_RUNG_EVERY == 0.04
    assert even_rungs(100) == list(range(4, 101, 4))
    assert even_rungs(500) == list(range(20, 501, 20))
    assert even_rungs(7) == [1, 2, 3, 4, 5, 6, 7]            # 0.28 steps apart: every step, counted once
    assert even_rungs(10, 0.3) == [3, 6, 9, 10]               # 1 / 0.3 is no whole number: the last is max_steps
    assert even_rungs(10, 0.25) == [2, 5, 7, 10]
    assert even_rungs(10, 1.0) == [10]
    assert even_rungs(1) == [1]


@pytest.mark.parametrize(("steps", "every", "named"), [(0, 0.04, "max_steps=0"), (10, 0.0, "rung_every=0.0"),
                                                       (10, 1.5, "rung_every=1.5")])
def test_bad_schedules_name_the_value(steps, every, named):
    with pytest.raises(ValueError, match=named):
        even_rungs(steps, every)


@settings(max_examples=200, deadline=None)
@given(max_steps=st.integers(1, 5000), every=st.floats(0.005, 1.0))
def test_the_schedule_always_ends_at_max_steps_in_increasing_steps(max_steps, every):
    rungs = even_rungs(max_steps, every)
    assert rungs[-1] == max_steps and rungs[0] >= 1
    assert all(b > a for a, b in zip(rungs, rungs[1:], strict=False))
    assert len(rungs) <= math.ceil(1.0 / every - 1e-9)
    assert rungs[0] <= max(1, math.floor(max_steps * every + 1e-9))   # the first look comes early


def _cfg(**campaign: Any) -> RetrainConfig:
    return RetrainConfig.model_validate({**TINY_CPU, "campaign": {"conditions": [GRPO], "seeds": [1, 2, 3],
                                                                  **campaign}})


def test_rungs_left_out_are_filled_from_max_steps(tmp_path: Path):
    camp = _cfg(max_steps=500, adaptive={"min_seeds": 2, "max_seeds": 3}).campaign
    assert camp is not None and camp.adaptive is not None and camp.adaptive.rungs == list(range(20, 501, 20))
    plan = build_plan(_cfg(max_steps=50, adaptive={"min_seeds": 2, "max_seeds": 3, "rung_every": 0.2}),
                      root=tmp_path)
    assert plan.adaptive is not None and plan.adaptive.rungs == (10, 20, 30, 40, 50)
    assert all(set(plan.adaptive.rungs) <= set(r.config.training.checkpoint_steps) | {50} for r in plan.runs)


def test_default_rungs_keep_a_window_apart():
    camp = CampaignSection.model_validate({"max_steps": 160, "adaptive": {"window": 10}})
    assert camp.adaptive is not None and camp.adaptive.rungs == list(range(10, 161, 10))   # 4% = 6.4 steps
    camp = CampaignSection.model_validate({"max_steps": 5, "adaptive": {"window": 10}})
    assert camp.adaptive is not None and camp.adaptive.rungs == [5]


def test_rungs_given_are_kept_and_rung_every_is_then_unused():
    camp = CampaignSection.model_validate({"max_steps": 50, "adaptive": {"rungs": [5, 50], "rung_every": 0.5}})
    assert camp.adaptive is not None and camp.adaptive.rungs == [5, 50]


@pytest.mark.parametrize("every", [0.0, -0.1, 1.5])
def test_a_bad_rung_every_is_refused_naming_the_key(every):
    with pytest.raises(ValidationError, match="rung_every"):
        CampaignSection.model_validate({"max_steps": 50, "adaptive": {"rung_every": every}})


def test_relabellings_are_made_once_and_read_only():
    first = permutation.relabellings([3, 3, 3], 500, seed=4)
    assert permutation.relabellings((3, 3, 3), 500, seed=4) is first
    assert not first.flags.writeable and first.shape == (500, 9) and first[0].tolist() == list(range(9))
    assert permutation.relabellings([3, 3, 3], 500, seed=5) is not first


FOUR_SD_WORSE = Scenario({"a": 0.0, "b": -4.0, "c": -4.0, "d": -4.0}, min_seeds=5, max_seeds=7)
TWO_SD_WORSE = Scenario({"a": 0.0, "b": -2.0, "c": -2.0, "d": -2.0}, min_seeds=10, max_seeds=12)


def _at_default_rungs(scenario: Scenario) -> Scenario:
    return dataclasses.replace(scenario, rungs=tuple(even_rungs(scenario.rungs[-1])))


def _ratio(scenario: Scenario, campaigns: int) -> float:
    bonferroni = simulate_test(scenario, "bonferroni", campaigns, seed=3)
    sequential = simulate_test(scenario, "sequential", campaigns, seed=3)
    assert sequential.summary.best_stopped_rate <= 0.05 and bonferroni.summary.best_stopped_rate <= 0.05
    return sequential.steps_fraction / bonferroni.steps_fraction


def test_at_the_default_rungs_the_sequential_test_spends_at_most_80_percent_on_4_sd_gaps():
    assert _ratio(_at_default_rungs(FOUR_SD_WORSE), 100) <= 0.8
    assert _ratio(FOUR_SD_WORSE, 100) > 0.8   # at the suite's rungs 25, 50, 100 no test can (floor 0.88)


@pytest.mark.extended
def test_at_the_default_rungs_the_sequential_test_spends_at_most_80_percent_on_2_sd_gaps():
    assert _ratio(_at_default_rungs(TWO_SD_WORSE), 200) <= 0.8
