"""The `final_number` reward: the completion's last number against the reference, by value."""

from __future__ import annotations

import pytest

from retrain_ray.rewards import build_reward
from retrain_ray.rewards.final_number import last_number


@pytest.mark.parametrize(("completion", "reference", "expected"), [
    ("3 + 5 = 8", "8", 1.0),
    ("The sum of 3 and 5 is 8.", "8", 1.0),
    ("\\boxed{8}", "8", 1.0),
    ("3 + 5 = 8, so 8 - 5 = 3", "8", 0.0),  # the last number is the answer a reader takes
    ("3 + 5 = 9", "8", 0.0),
    ("eight", "8", 0.0),
    ("", "8", 0.0),
    ("It is 8.0", "8", 1.0),
    ("about 1,000 apples", "1000", 1.0),
    ("-4", "-4", 1.0),
    ("12", "2", 0.0),  # a number that ends in the reference's digits is still another number
])
def test_scores_the_last_number(completion: str, reference: str, expected: float) -> None:
    assert build_reward("final_number").score_batch([completion], [reference]) == [expected]


def test_last_number_drops_commas_and_finds_none_in_words() -> None:
    assert last_number("from 1,234 to 5,678.") == "5678"
    assert last_number("no digits here") == ""


def test_a_batch_with_a_missing_reference_is_refused() -> None:
    with pytest.raises(ValueError, match="one reference per completion"):
        build_reward("final_number").score_batch(["1", "2"], ["1"])


def test_unknown_reward_names_the_new_type() -> None:
    with pytest.raises(ValueError, match="final_number"):
        build_reward("nope")
