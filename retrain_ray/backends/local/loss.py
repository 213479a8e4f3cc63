"""Which policy loss the local backend calls, plus a private fallback until the shared one lands.

The shared loss is `retrain_ray.algorithms.loss.policy_loss` (spec 3.1: standard / kl_cov / clip_cov,
sums over the action tokens of one micro-batch). If that module is not importable, the backend uses
`_standard_loss` below, which implements only mode "standard" (PPO-style clip when clip_eps > 0,
dual-clip when clip_ratio_c > 0) and refuses the other modes with a clear error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class LossOutput:
    """Sums over the action tokens of one micro-batch (same fields as the shared loss's output)."""

    loss_sum: torch.Tensor
    num_action_tokens: int
    clip_fraction_sum: float
    cov_fraction_sum: float
    abs_kl_sum: float


def _standard_loss(
    new_logprobs_B_T: torch.Tensor,
    old_logprobs_B_T: torch.Tensor,
    advantages_B_T: torch.Tensor,
    mask_B_T: torch.Tensor,
    *,
    mode: str,
    clip_eps: float,
    clip_eps_high: float,
    clip_ratio_c: float = 0.0,
    **_unused: Any,
) -> LossOutput:
    if mode != "standard":
        raise NotImplementedError(
            f"policy_loss_mode={mode!r} needs retrain_ray.algorithms.loss, which is not installed; "
            "use policy_loss_mode='standard'"
        )
    action_B_T = mask_B_T.bool() & (advantages_B_T != 0)
    delta_B_T = new_logprobs_B_T - old_logprobs_B_T
    ratio_B_T = torch.exp(delta_B_T)
    surrogate_B_T = -ratio_B_T * advantages_B_T
    clipped = torch.zeros_like(action_B_T)
    if clip_eps > 0:
        high = clip_eps_high or clip_eps
        clipped_ratio_B_T = ratio_B_T.clamp(1 - clip_eps, 1 + high)
        surrogate_B_T = torch.maximum(surrogate_B_T, -clipped_ratio_B_T * advantages_B_T)
        clipped = (ratio_B_T < 1 - clip_eps) | (ratio_B_T > 1 + high)
        if clip_ratio_c > 0:
            capped_B_T = torch.minimum(-advantages_B_T * clip_ratio_c, surrogate_B_T)
            surrogate_B_T = torch.where(advantages_B_T < 0, capped_B_T, surrogate_B_T)
    weights_B_T = action_B_T.to(surrogate_B_T.dtype)
    return LossOutput(
        loss_sum=(surrogate_B_T * weights_B_T).sum(),
        num_action_tokens=int(action_B_T.sum()),
        clip_fraction_sum=float((clipped & action_B_T).sum()),
        cov_fraction_sum=0.0,
        abs_kl_sum=float((delta_B_T.detach().abs() * weights_B_T).sum()),
    )


def resolve_policy_loss() -> Callable[..., Any]:
    """The shared `policy_loss` if it is importable, else the standard-only fallback."""
    try:
        from retrain_ray.algorithms.loss import policy_loss
    except ImportError:
        return _standard_loss
    return policy_loss
