"""TL-GRPO and MT-GRPO turn-level credit (algorithms/turns.py) equal the original on held-out cases.

`tests/reference/turns_reference.json` holds retrain 0.3.0's own branch rewards
(`_run_tl_grpo_branching`, action_space mode, with and without lookahead) and turn advantages
(`_compute_tl_grpo_advantages`, with the EMA baseline and with the environment's advantage) for a toy
kernel and episodes written for this test; `tests/reference/make_turns_reference.py` made it.
Comparisons are exact. Property tests cover the MT-GRPO cut and the EMA.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrain_ray.algorithms.turns import (
    TurnAction,
    action_space_alternatives,
    branch_rewards,
    ema_update,
    outcome_advantages,
    tl_grpo_turn_advantages,
    turn_token_advantages,
)

REFERENCE = json.loads((Path(__file__).parents[1] / "reference" / "turns_reference.json").read_text())
VALUES = {"a": 1.0, "b": 0.25, "c": -0.5, "wait": 0.0}
LEGAL = ["a", "b", "c", "wait"]  # the original offers the kernel's actions, then "wait"


def kernel_cumulative(names) -> float:  # the generator's toy kernel
    total, prev = 0.0, ""
    for i, name in enumerate(names):
        total += VALUES[name] + (0.75 if prev == "c" and name == "a" else 0.0) - 0.1 * i
        prev = name
    return total


@pytest.mark.parametrize("case", REFERENCE["branch_cases"],
                         ids=[f"{c['episode']}-b{c['branch_size']}-k{c['lookahead_steps']}"
                              for c in REFERENCE["branch_cases"]])
def test_branch_rewards_equal_the_original(case):
    turns = [TurnAction(t["action"], t["reward_delta"], t["cumulative_reward"]) for t in case["turn_log"]]
    pick = action_space_alternatives(lambda before: list(LEGAL), [t.action for t in turns], case["branch_size"],
                                     random.Random(0))
    got = branch_rewards(turns, kernel_cumulative, pick, lookahead_steps=case["lookahead_steps"])
    assert got == case["branch_rewards"]


@pytest.mark.parametrize("case", REFERENCE["advantage_cases"])
def test_turn_advantages_equal_the_original(case):
    if case["baseline"] is None:
        outcomes = case["env_advantages"]
    else:
        outcomes = outcome_advantages(case["rewards"], case["baseline"])
    got = [tl_grpo_turn_advantages(case["branch_rewards"], o) for o in outcomes]
    assert got == case["turn_advantages"]


def test_ema_follows_each_reward_in_order():
    assert ema_update(0.5, [1.0, 0.0], 0.9) == pytest.approx(0.9 * (0.9 * 0.5 + 0.1) + 0.0)
    assert ema_update(0.3, [], 0.9) == 0.3


def test_alternatives_are_capped_and_exclude_the_primary():
    pick = action_space_alternatives(lambda before: [str(d) for d in range(10)], ["3"], 4, random.Random(1))
    chosen = pick(0, [])
    assert len(chosen) == 3 and "3" not in chosen and len(set(chosen)) == 3


floats = st.floats(min_value=-10, max_value=10, allow_nan=False)


@given(st.lists(st.integers(0, 6), min_size=1, max_size=5), st.data())
def test_episode_advantages_are_cut_in_turn_order(lengths, data):
    token_advs = data.draw(st.lists(floats, min_size=sum(lengths), max_size=sum(lengths)))
    cut = turn_token_advantages(lengths, token_advs, None)
    assert [len(t) for t in cut] == lengths
    assert [a for t in cut for a in t] == token_advs


@given(st.lists(st.integers(0, 6), min_size=1, max_size=5), st.data())
def test_env_turn_advantages_replace_the_episode_only_when_they_cover_every_turn(lengths, data):
    token_advs = [0.0] * sum(lengths)
    covering = data.draw(st.lists(floats, min_size=len(lengths), max_size=len(lengths) + 2))
    cut = turn_token_advantages(lengths, token_advs, covering)
    assert cut == [[covering[t]] * n for t, n in enumerate(lengths)]
    short = covering[: len(lengths) - 1]
    assert turn_token_advantages(lengths, token_advs, short) == [[0.0] * n for n in lengths]


@given(st.floats(0, 1), st.lists(st.floats(0, 1), max_size=20), st.floats(0.01, 0.99))
def test_ema_stays_within_the_rewards_range(start, rewards, decay):
    ema = ema_update(start, rewards, decay)
    values = [start, *rewards]
    assert min(values) - 1e-12 <= ema <= max(values) + 1e-12


@given(st.lists(floats, min_size=2, max_size=8), floats)
def test_a_turn_is_scored_against_its_own_branches(rewards, outcome):
    (adv,) = tl_grpo_turn_advantages([rewards], outcome)
    shifted = [r + 3.0 for r in rewards]  # a constant shift of every branch changes nothing
    (again,) = tl_grpo_turn_advantages([shifted], outcome)
    assert again == pytest.approx(adv, abs=1e-6)
    assert tl_grpo_turn_advantages([[rewards[0]]], outcome) == [0.5 * outcome]
