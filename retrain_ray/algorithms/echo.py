"""ECHO: cross-entropy on the environment's own tokens of a multi-turn rollout (spec feature 32, `[echo]`).

In an episode, turn t+1's prompt repeats turn t's prompt and completion and then adds what the
environment answered (the observation). ECHO trains the policy to predict those observation tokens,
in the same forward pass as the RL loss of the turn's datum (they sit in its prompt, where the RL loss
is zero), weighted by `[echo] weight`. This module finds and budgets the target tokens; the local
backend computes the loss (`echo_nll`).

  * The *observation bridge*: the next prompt shares a prefix with the previous prompt + completion;
    when that prefix covers at least `min_prompt_overlap` of it, the tokens after the prefix are the
    observation (a prompt re-rendered from scratch has no bridge, and no targets).
  * `target_retention = "bounded"` keeps at most `max_tokens_per_step` target tokens a step and at most
    `max_token_ratio` times the step's RL action tokens (in datum order); the backend then drops the
    targets where the policy's entropy is below `entropy_floor` (nothing left to learn there).
    `"all"` keeps every observation token (and needs `entropy_floor = 0`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class EchoSettings:
    """`[echo]` of a run."""

    weight: float = 0.05
    target_retention: str = "bounded"
    max_tokens_per_step: int = 2048
    max_token_ratio: float = 0.5
    entropy_floor: float = 0.01
    min_prompt_overlap: float = 0.5
    require_live_observation_bridge: bool = False


def observation_span(previous: Sequence[int], next_prompt: Sequence[int], min_overlap: float) -> tuple[int, int] | None:
    """Positions [start, end) of the observation in `next_prompt`, given the previous turn's prompt +
    completion `previous`; None when the shared prefix covers less than `min_overlap` of `previous` or
    nothing follows it."""
    prefix = 0
    for a, b in zip(previous, next_prompt, strict=False):
        if a != b:
            break
        prefix += 1
    if not previous or prefix / len(previous) < min_overlap or prefix >= len(next_prompt):
        return None
    return prefix, len(next_prompt)


def echo_budget(settings: EchoSettings, rl_action_tokens: int) -> int | None:
    """How many target tokens a step keeps (None: all)."""
    if settings.target_retention == "all":
        return None
    return min(settings.max_tokens_per_step, math.floor(settings.max_token_ratio * rl_action_tokens))


def budget_masks(masks_D: list[list[float]], budget: int | None) -> list[list[float]]:
    """`masks_D` with only the first `budget` marked tokens kept, in datum order (None: all)."""
    if budget is None:
        return [list(m) for m in masks_D]
    left = max(0, budget)
    out: list[list[float]] = []
    for mask in masks_D:
        row: list[float] = []
        for m in mask:
            keep = m != 0.0 and left > 0
            left -= int(keep)
            row.append(1.0 if keep else 0.0)
        out.append(row)
    return out


def echo_nll(logits_B_S_V: torch.Tensor, targets_B_S: torch.Tensor, mask_B_S: torch.Tensor,
             entropy_floor: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy (T = 1) of the targets at the masked positions whose predictive entropy is
    at least `entropy_floor`, and the number of such positions."""
    logp_B_S_V = torch.log_softmax(logits_B_S_V.float(), dim=-1)
    keep_B_S = mask_B_S.bool()
    if entropy_floor > 0:
        entropy_B_S = -(logp_B_S_V.exp() * logp_B_S_V).sum(-1)
        keep_B_S = keep_B_S & (entropy_B_S.detach() >= entropy_floor)
    target_lp_B_S = logp_B_S_V.gather(-1, targets_B_S.unsqueeze(-1)).squeeze(-1)
    return -(target_lp_B_S * keep_B_S.to(target_lp_B_S.dtype)).sum(), keep_B_S.sum()
