"""The `addition` task: prompts chat models read, held-out split, sentence answers for a warm start."""

from __future__ import annotations

import random

import pytest

from retrain_ray.data import load_task
from retrain_ray.data.addition import addition, sentence_answer
from retrain_ray.rewards.final_number import FinalNumberReward


@pytest.mark.parametrize(("level", "low", "high"), [(1, 0, 9), (2, 10, 99), (3, 100, 999)])
def test_operands_stay_in_the_level_range_and_the_reference_is_their_sum(level: int, low: int, high: int) -> None:
    rng = random.Random(0)
    for _ in range(200):
        example = addition(rng, level)
        a, b = (int(x) for x in example.prompt.removeprefix("What is ").removesuffix("?").split(" + "))
        assert low <= a <= high and low <= b <= high
        assert example.reference == str(a + b)


def test_level_one_eval_prompts_never_appear_in_train() -> None:
    data = load_task("addition", level=1, seed=3, num_train=128, num_eval=32)
    eval_prompts = {e.prompt for e in data.eval}
    assert len(eval_prompts) == 32
    assert not eval_prompts & {e.prompt for e in data.train}
    assert len({e.prompt for e in data.train}) == 100 - 32  # the rest of the 10 x 10 prompts, cycled


def test_the_split_is_the_same_for_a_seed_and_differs_across_seeds() -> None:
    first = load_task("addition", level=2, seed=1, num_train=16, num_eval=8)
    again = load_task("addition", level=2, seed=1, num_train=16, num_eval=8)
    other = load_task("addition", level=2, seed=2, num_train=16, num_eval=8)
    assert first == again
    assert first.eval != other.eval


def test_the_warm_start_answer_scores_full_reward() -> None:
    data = load_task("addition", level=1, seed=0, num_train=8, num_eval=4)
    reward = FinalNumberReward()
    for example in data.train:
        assert data.format_answer is sentence_answer
        assert reward.score(data.format_answer(example.reference), example.reference) == 1.0
