"""`rl_step_flops`: one RL step's sampling and training FLOPs from the parameter count, hand-computed."""

from __future__ import annotations

import pytest

from retrain_ray.models.flops import rl_step_flops


def test_lora_step_counts_two_n_per_sampled_token_and_four_n_per_trained_token() -> None:
    flops = rl_step_flops(1000, prompt_tokens=30, completion_tokens=70, lora=True)
    assert flops.sample == 2 * 1000 * 100
    assert flops.train == 4 * 1000 * 100
    assert flops.total == 6 * 1000 * 100


def test_full_fine_tuning_and_checkpointing_add_their_passes() -> None:
    assert rl_step_flops(10, prompt_tokens=0, completion_tokens=5, lora=False).train == 6 * 10 * 5
    assert rl_step_flops(10, prompt_tokens=0, completion_tokens=5, lora=True, checkpointing=True).train == 6 * 10 * 5


def test_negative_counts_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="completion_tokens=-1"):
        rl_step_flops(10, prompt_tokens=0, completion_tokens=-1, lora=True)
