"""Local policy-gradient loss on padded tensors (spec 3.1), built for global token-mean aggregation.

Inputs are aligned per action position (the caller has already shifted by one): `new_logprobs_B_T`
(differentiable, T=1 distribution of the trainer), `old_logprobs_B_T` (the sampler's), `advantages_B_T`
and `mask_B_T`. Only tokens with `mask > 0` **and** `advantage != 0` are action tokens.

    ratio = exp(new - old)
    standard, clip_eps = 0:  L = -ratio A
    standard, clip_eps > 0:  L = max(-ratio A, -clip(ratio, 1 - eps, 1 + eps_high) A)   (PPO, asymmetric)
    kl_cov:   L = -ratio A, plus kl_cov_coef |new - old| on the top-k tokens by the centred covariance
              (A - mean A)(new - mean new), k = max(1, int(n * kl_cov_percent / 100))
    clip_cov: PPO surrogate with eps defaulting to 1; a random max(1, int(clip_cov_ratio n)) of the tokens
              with clip_cov_min < cov < clip_cov_max that were not clipped get no gradient (L := 0)
    clip_ratio_c > 0 (dual clip, any mode): L = where(A < 0, min(-A c, L), L)

The standard mode with the dual clip is `dual_clip_ppo_token_losses`, which the tinker backend's loss
(backends/tinker/loss.py) calls too: one PPO loss for both backends.

Aggregation: every call returns *sums*. Over micro-batches, divide each `loss_sum` by the whole batch's
action-token count before backward (`mb.loss_sum / total_tokens`), which weights every action token of
the batch equally (global token mean), exactly as the original's `loss_mb * tokens_mb / total`.
`aggregate_microbatches` turns the sums into the logged metrics.
Departure: the original only has `clip_ratio_c` on its remote backend; here it is local too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LossOutput:
    """Sums over one micro-batch's action tokens (`loss_sum` carries the graph)."""

    loss_sum: torch.Tensor
    num_action_tokens: int
    clip_fraction_sum: float
    cov_fraction_sum: float
    abs_kl_sum: float


@dataclass(frozen=True)
class LossInputs:
    """Flattened action tokens of one call, shared by every loss mode."""

    new_lp: torch.Tensor
    delta: torch.Tensor
    ratio: torch.Tensor
    adv: torch.Tensor
    clip_eps: float
    clip_eps_high: float
    kl_cov_percent: float
    kl_cov_coef: float
    clip_cov_ratio: float
    clip_cov_min: float
    clip_cov_max: float
    generator: torch.Generator | None


ModeResult = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # per-token loss, clipped flags, selected flags


def _ppo(ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    clipped_ratio = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(-ratio * adv, -clipped_ratio * adv)
    out_of_band = (ratio < 1.0 - eps_low) | (ratio > 1.0 + eps_high)
    return loss, out_of_band.detach()


def dual_clip_ppo_token_losses(
    ratio: torch.Tensor, adv: torch.Tensor, *, clip_eps: float, clip_eps_high: float = 0.0, clip_ratio_c: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-token loss, clipped flags) of the standard dual-clip PPO loss, for the local and tinker backends:
    no PPO clip when `clip_eps = 0` (L = -ratio A), the asymmetric clip [1 - eps, 1 + (eps_high or eps)]
    otherwise, and the dual clip `clip_ratio_c > 0` on top where A < 0.

    Fix (issue 22): the tinker backend's copy clamped the ratio to [1, 1] when clip_eps = 0 with
    clip_ratio_c > 0 (L = max(-ratio A, -A), every token with ratio != 1 counted clipped); it now has no
    PPO clip there, as the local backend."""
    if clip_eps <= 0:
        return _dual_clip(-ratio * adv, adv, clip_ratio_c), torch.zeros_like(adv, dtype=torch.bool)
    loss, clipped = _ppo(ratio, adv, clip_eps, clip_eps_high or clip_eps)
    return _dual_clip(loss, adv, clip_ratio_c), clipped


def _centred_cov(x: LossInputs) -> torch.Tensor:
    new = x.new_lp.detach()
    return (x.adv - x.adv.mean()) * (new - new.mean())


def _standard(x: LossInputs) -> ModeResult:
    """The dual clip is applied by `policy_loss` (to every mode), so none here."""
    loss, clipped = dual_clip_ppo_token_losses(x.ratio, x.adv, clip_eps=x.clip_eps, clip_eps_high=x.clip_eps_high)
    return loss, clipped, torch.zeros_like(x.adv, dtype=torch.bool)


def _kl_cov(x: LossInputs) -> ModeResult:
    n = x.adv.numel()
    k = max(1, int(n * x.kl_cov_percent / 100.0))
    selected = torch.zeros(n, dtype=torch.bool)
    selected[torch.topk(_centred_cov(x), min(k, n)).indices] = True
    loss = -x.ratio * x.adv + x.kl_cov_coef * x.delta.abs() * selected
    return loss, torch.zeros_like(selected), selected


def _clip_cov(x: LossInputs) -> ModeResult:
    eps_low = x.clip_eps or 1.0
    eps_high = x.clip_eps_high or eps_low
    loss, out_of_band = _ppo(x.ratio, x.adv, eps_low, eps_high)
    clipped_by_origin = (-torch.clamp(x.ratio, 1.0 - eps_low, 1.0 + eps_high) * x.adv > -x.ratio * x.adv).detach()
    cov = _centred_cov(x)
    eligible = torch.nonzero(~clipped_by_origin & (cov > x.clip_cov_min) & (cov < x.clip_cov_max)).flatten()
    selected = torch.zeros_like(out_of_band)
    if eligible.numel() > 0:
        count = max(int(x.clip_cov_ratio * x.adv.numel()), 1)
        pick = torch.randperm(eligible.numel(), generator=x.generator)[:count]
        selected[eligible[pick]] = True
    return torch.where(selected, torch.zeros_like(loss), loss), out_of_band, selected


LOSS_MODES: dict[str, Callable[[LossInputs], ModeResult]] = {
    "standard": _standard,
    "kl_cov": _kl_cov,
    "clip_cov": _clip_cov,
}


def _dual_clip(loss: torch.Tensor, adv: torch.Tensor, clip_ratio_c: float) -> torch.Tensor:
    if clip_ratio_c <= 0:
        return loss
    return torch.where(adv < 0, torch.minimum(-adv * clip_ratio_c, loss), loss)


def _check_clip_ratio_c(clip_ratio_c: float) -> None:
    if 0 < clip_ratio_c <= 1:
        raise ValueError(f"clip_ratio_c must be > 1 (dual-clip bound on the ratio) or 0 to disable; got {clip_ratio_c}.")


def policy_loss(
    new_logprobs_B_T: torch.Tensor,
    old_logprobs_B_T: torch.Tensor,
    advantages_B_T: torch.Tensor,
    mask_B_T: torch.Tensor,
    *,
    mode: str = "standard",
    clip_eps: float = 0.0,
    clip_eps_high: float = 0.0,
    clip_ratio_c: float = 0.0,
    kl_cov_percent: float = 0.2,
    kl_cov_coef: float = 1.0,
    clip_cov_ratio: float = 2e-4,
    clip_cov_min: float = 1.0,
    clip_cov_max: float = 5.0,
    generator: torch.Generator | None = None,
) -> LossOutput:
    """Per-token policy loss summed over action tokens (mask > 0 and advantage != 0); see module doc."""
    if mode not in LOSS_MODES:
        raise ValueError(f"policy_loss_mode={mode!r} is not known; use one of {sorted(LOSS_MODES)}.")
    shapes = {t.shape for t in (new_logprobs_B_T, old_logprobs_B_T, advantages_B_T, mask_B_T)}
    if len(shapes) != 1:
        raise ValueError(f"policy_loss: inputs must share one shape, got {sorted(map(tuple, shapes))}.")
    action = (mask_B_T > 0) & (advantages_B_T != 0)
    new_lp = new_logprobs_B_T[action]
    delta = new_lp - old_logprobs_B_T[action].to(new_lp.dtype)
    n = int(action.sum())
    if n == 0:
        return LossOutput(new_logprobs_B_T.sum() * 0.0, 0, 0.0, 0.0, 0.0)
    x = LossInputs(
        new_lp, delta, torch.exp(delta), advantages_B_T[action].to(new_lp.dtype), clip_eps, clip_eps_high,
        kl_cov_percent, kl_cov_coef, clip_cov_ratio, clip_cov_min, clip_cov_max, generator,
    )
    loss_T, clipped_T, selected_T = LOSS_MODES[mode](x)
    _check_clip_ratio_c(clip_ratio_c)
    loss_T = _dual_clip(loss_T, x.adv, clip_ratio_c)
    return LossOutput(
        loss_sum=loss_T.sum(),
        num_action_tokens=n,
        clip_fraction_sum=float(clipped_T.sum()),
        cov_fraction_sum=float(selected_T.sum()),
        abs_kl_sum=float(delta.detach().abs().sum()),
    )


def aggregate_microbatches(outputs: Sequence[LossOutput]) -> dict[str, float]:
    """Global token-mean metrics over a batch's micro-batches (`loss`, `clip_fraction`, ...)."""
    total = max(sum(o.num_action_tokens for o in outputs), 1)
    return {
        "loss": sum(float(o.loss_sum.detach()) for o in outputs) / total,
        "clip_fraction": sum(o.clip_fraction_sum for o in outputs) / total,
        "policy/cov_fraction": sum(o.cov_fraction_sum for o in outputs) / total,
        "policy/abs_kl": sum(o.abs_kl_sum for o in outputs) / total,
        "num_action_tokens": float(sum(o.num_action_tokens for o in outputs)),
    }
