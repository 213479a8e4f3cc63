"""The custom PPO dual-clip loss of the tinker backend (spec 3.3), computed locally on logprobs.

Per token, with ratio r = exp(new_lp - old_lp) and advantage A, the local backend's standard loss
(`algorithms.loss.dual_clip_ppo_token_losses`, one function for both backends):
    clip_eps = 0: L = -A r (no PPO clip)
    clip_eps > 0: surr1 = -A r;  surr2 = -A clamp(r, 1 - eps_lo, 1 + eps_hi);  L = max(surr1, surr2)
    dual clip (clip_ratio_c = c > 0): where A < 0, L = min(-A c, L)
    tokens with A == 0 are not in the loss.

Fix (issue 22): with clip_eps = 0 and clip_ratio_c > 0 this loss used to clamp the ratio to [1, 1]
(L = max(-A r, -A)), and the backend sent the service's plain importance-sampling loss instead, without
the dual clip; now that case has no PPO clip and the dual clip applies, as on the local backend.

Departure from the original: the original averaged L per datum, then over datums (SEQUENCE-mean,
hazard 13.9), so a token of a short completion weighed more than one of a long completion, unlike
the local backend. Here the loss is the TOKEN-mean over every action token of the batch,
`sum(L * mask) / max(sum(mask), 1)`, the same normalisation as the local backend, so a campaign that
compares backends compares the same objective.

The service cannot take this loss directly. The backend does a `forward` to get new_lp, evaluates
this loss and its gradient g_t = dLoss/dnew_lp_t locally, then sends a second `forward_backward` with
loss "importance_sampling", `logprobs = new_lp` (so r = 1) and `advantages = -g_t`: that loss is
-sum r_t A_t, whose gradient at r = 1 is sum g_t d(new_lp_t), the gradient of this loss.

TrainBatch rows -> the SDK's `Datum`s (real `tinker.types` objects, so a schema change shows up).

A row of T tokens becomes a next-token datum: `model_input` = tokens[:-1] and, per target position,
`target_tokens` = tokens[1:], `logprobs` = logprobs[1:], `advantages` = advantages[1:] (the batch holds
per-token values aligned with the token they score; prompt positions carry 0 advantage, so they are
not in the loss). The original passed all tokens as model_input (spec 1.8); the shift is what the
service's next-token losses expect.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from retrain_ray.algorithms.loss import dual_clip_ppo_token_losses
from retrain_ray.backends.types import TrainBatch

if TYPE_CHECKING:
    from tinker.types import Datum, TensorData


@dataclass(frozen=True)
class ClipSettings:
    clip_eps: float = 0.0
    clip_eps_high: float = 0.0
    clip_ratio_c: float = 0.0

    @property
    def eps_high(self) -> float:
        return self.clip_eps_high or self.clip_eps


def dual_clip_token_losses(
    new_lp_T: torch.Tensor, old_lp_T: torch.Tensor, adv_T: torch.Tensor, clip: ClipSettings
) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-token loss L_T, clipped_T bool) for one flat run of tokens."""
    return dual_clip_ppo_token_losses(torch.exp(new_lp_T - old_lp_T), adv_T, clip_eps=clip.clip_eps,
                                      clip_eps_high=clip.clip_eps_high, clip_ratio_c=clip.clip_ratio_c)


def dual_clip_loss_and_grads(
    new_lp_D: list[list[float]], old_lp_D: list[list[float]], adv_D: list[list[float]], clip: ClipSettings
) -> tuple[float, list[list[float]], dict[str, float]]:
    """Token-mean loss, dLoss/dnew_lp per datum and token, and the ppo_* metrics."""
    lengths = [len(row) for row in new_lp_D]
    new_T = torch.tensor([x for row in new_lp_D for x in row], dtype=torch.float64, requires_grad=True)
    old_T = torch.tensor([x for row in old_lp_D for x in row], dtype=torch.float64)
    adv_T = torch.tensor([x for row in adv_D for x in row], dtype=torch.float64)
    mask_T = (adv_T != 0).double()
    loss_T, clipped_T = dual_clip_token_losses(new_T, old_T, adv_T, clip)
    denom = mask_T.sum().clamp_min(1.0)
    loss = (loss_T * mask_T).sum() / denom
    loss.backward()  # pyright: ignore[reportUnknownMemberType]
    grad_T = new_T.grad
    grads: list[float] = [0.0] * len(new_T)
    if grad_T is not None:
        grads = cast("list[float]", grad_T.tolist())  # pyright: ignore[reportUnknownMemberType]
    grads_D: list[list[float]] = []
    start = 0
    for n in lengths:
        grads_D.append(grads[start:start + n])
        start += n
    with torch.no_grad():
        ratio_T = torch.exp(new_T - old_T)
        acted = mask_T > 0
        metrics = {
            "ppo_clip_fraction": float((clipped_T.double() * mask_T).sum() / denom),
            "ppo_mean_ratio": float(ratio_T[acted].mean()) if acted.any() else 1.0,
            "ppo_max_ratio": float(ratio_T[acted].max()) if acted.any() else 1.0,
            "ppo_kl_approx": float(((ratio_T - 1 - (new_T - old_T)) * mask_T).sum() / denom),
        }
    metrics["clip_fraction"] = metrics["ppo_clip_fraction"]
    return float(loss.detach()), grads_D, metrics


def _types() -> ModuleType:
    # deferred: tinker is an optional extra, imported only when used
    from tinker import types

    return types


def tensor(values: list[float] | list[int], dtype: str) -> TensorData:
    return _types().TensorData.from_numpy(np.asarray(values, dtype=np.int64 if dtype == "int64" else np.float32))


def rl_datum(tokens: list[int], logprobs: list[float], advantages: list[float]) -> Datum:
    types = _types()
    return types.Datum(
        model_input=types.ModelInput.from_ints(list(tokens[:-1])),
        loss_fn_inputs={
            "target_tokens": tensor(list(tokens[1:]), "int64"),
            "logprobs": tensor(list(logprobs[1:]), "float32"),
            "advantages": tensor(list(advantages[1:]), "float32"),
        },
    )


def rl_datums(batch: TrainBatch) -> list[Datum]:
    """One datum per row; rows need at least two tokens (one prompt token and one completion token)."""
    for i, row in enumerate(batch.tokens_D):
        if len(row) < 2:
            raise ValueError(f"TrainBatch row {i} has {len(row)} token(s); a datum needs at least 2")
    return [rl_datum(t, lp, a) for t, lp, a in zip(batch.tokens_D, batch.logprobs_D, batch.advantages_D, strict=True)]


def with_inputs(datum: Datum, **inputs: list[float]) -> Datum:
    """A copy of an RL datum with some float loss inputs replaced (e.g. logprobs, advantages)."""
    types = _types()
    new_inputs = dict(datum.loss_fn_inputs)
    for key, values in inputs.items():
        new_inputs[key] = tensor(values, "float32")
    return types.Datum(model_input=datum.model_input, loss_fn_inputs=new_inputs)


def sft_datums(batch: TrainBatch) -> tuple[list[Datum], int]:
    """Warm-start datums whose weights average over the tokens with nonzero advantage: cross-entropy
    weights, or for `sft_loss = "importance_sampling"` RL datums with zero logprobs (the original's)."""
    types = _types()
    count = sum(1 for row in batch.advantages_D for a in row[1:] if a != 0)
    scale = 1.0 / max(count, 1)
    if batch.sft_loss == "importance_sampling":
        return [rl_datum(t, [0.0] * len(t), [scale if a != 0 else 0.0 for a in adv])
                for t, adv in zip(batch.tokens_D, batch.advantages_D, strict=True)], count
    datums = [
        types.Datum(
            model_input=types.ModelInput.from_ints(list(t[:-1])),
            loss_fn_inputs={
                "target_tokens": tensor(list(t[1:]), "int64"),
                "weights": tensor([scale if a != 0 else 0.0 for a in adv[1:]], "float32"),
            },
        )
        for t, adv in zip(batch.tokens_D, batch.advantages_D, strict=True)
    ]
    return datums, count
