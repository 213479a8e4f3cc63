"""ECHO's target selection and loss (algorithms/echo.py). The original's ECHO is not in its 0.3.0
release (the only one installable), so these check the definitions, not values against it."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from retrain_ray.algorithms.echo import EchoSettings, budget_masks, echo_budget, echo_nll, observation_span


def test_the_observation_follows_the_shared_prefix():
    assert observation_span([1, 2, 3, 4], [1, 2, 3, 4, 9, 9], 0.5) == (4, 6)
    assert observation_span([1, 2, 3, 4], [1, 2, 7, 8], 0.5) == (2, 4)  # half shared: still a bridge
    assert observation_span([1, 2, 3, 4], [1, 7, 8], 0.5) is None  # re-rendered prompt: no bridge
    assert observation_span([1, 2], [1, 2], 0.5) is None  # nothing after the prefix


def test_bounded_budget_is_the_smaller_cap():
    s = EchoSettings(max_tokens_per_step=10, max_token_ratio=0.5)
    assert echo_budget(s, 8) == 4 and echo_budget(s, 100) == 10
    assert echo_budget(EchoSettings(target_retention="all", entropy_floor=0.0), 0) is None


@given(st.lists(st.lists(st.sampled_from([0.0, 1.0]), max_size=6), max_size=5), st.integers(0, 20))
def test_budget_keeps_the_first_targets_only(masks, budget):
    kept = budget_masks(masks, budget)
    flat_in = [m for row in masks for m in row]
    flat_out = [m for row in kept for m in row]
    assert sum(flat_out) == min(budget, sum(flat_in))
    assert all(o <= i for i, o in zip(flat_in, flat_out, strict=True))
    first = [k for k, m in enumerate(flat_in) if m][: int(sum(flat_out))]
    assert [k for k, m in enumerate(flat_out) if m] == first


def test_nll_is_the_cross_entropy_of_the_kept_targets():
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 0.0, 0.0], [5.0, -5.0, -5.0]]])
    targets = torch.tensor([[0, 1, 0]])
    mask = torch.tensor([[1.0, 1.0, 1.0]])
    nll, kept = echo_nll(logits, targets, mask, 0.0)
    expected = -(torch.log_softmax(logits[0], -1)[[0, 1, 2], [0, 1, 0]]).sum()
    assert kept == 3 and nll.item() == pytest.approx(expected.item())
    # the nearly certain third position falls under an entropy floor of 0.1
    nll_floor, kept_floor = echo_nll(logits, targets, mask, 0.1)
    assert kept_floor == 2 and nll_floor.item() == pytest.approx(
        -(torch.log_softmax(logits[0], -1)[[0, 1], [0, 1]]).sum().item())
