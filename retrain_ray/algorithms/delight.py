"""Delight gating (spec 2.4/2.5 table; Osband 2026, "Delightful Policy Gradient").

Each token of completion i gets A_i scaled by a gate on its surprisal s (capped at 50):

    delight:       A_i * sigmoid(A_i * s' / eta)
    delight_sepa:  A_i * [(1 - lam) + lam * sigmoid(A_i * s' / eta)]       lam: SEPA ramp or delight_lambda
    hard_delight:  A_i * [(1 - lam) + lam * keep_k(t)]                      keep the k = max(1, int(n k_frac))
                   highest-surprisal tokens when A_i > 0, the lowest when A_i < 0

s' is s scaled without centering (`delight_norm_mode`): "none", "scale" (s / population std of the
completion) or "mad_scale" (s / (1.4826 MAD), falling back to "scale" when the MAD is ~0); scaling
keeps s' >= 0, so the gate opens on surprising tokens of good completions and closes on bad ones.
`delight` defaults to "none", `delight_sepa` to "scale". A completion with A_i = 0 gets zeros.

eta is `delight_eta` ("fixed"), or with `delight_eta_mode = "adaptive"` the quantile
`delight_eta_target_neutral_frac` of |A_i s'| over the group divided by log(1.5), clamped to
[delight_eta_min, delight_eta_max], then sharpened towards `delight_eta_target_ordering_gap`, then
smoothed with the previous step's eta (`delight_eta_prev`, the run's EMA state) by
`delight_eta_ema_decay`. The run keeps the mean over groups of the `dg_eta` metric as that state.
Surprisal statistics are the pre-transform ones; the post-transform ones stay 0, as in the original.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from retrain_ray.algorithms.types import (
    MAX_SURPRISAL,
    GroupAdvantages,
    SplitCollector,
    TransformContext,
    entropy_stats,
    param_number,
)

NORM_MODES = ("none", "scale", "mad_scale")
ETA_MODES = ("fixed", "adaptive")
NEUTRAL_LOGIT = math.log(0.6 / 0.4)
ETA_FLOOR = 1e-8
PREV_ETA_PARAM = "delight_eta_prev"

Rollout = tuple[float, list[float]]


def sigmoid(x: float) -> float:
    """The logistic function, saturated to exactly 0 / 1 beyond |x| > 20."""
    if x > 20:
        return 1.0
    if x < -20:
        return 0.0
    return 1.0 / (1.0 + math.exp(-x))


def _std_scaled(s_T: list[float]) -> list[float]:
    n = len(s_T)
    if n < 2:
        return list(s_T)
    mean = sum(s_T) / n
    std = (sum((s - mean) ** 2 for s in s_T) / n) ** 0.5
    return list(s_T) if std < 1e-8 else [s / std for s in s_T]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def _mad_scaled(s_T: list[float]) -> list[float]:
    if len(s_T) < 2:
        return list(s_T)
    med = _median(s_T)
    robust_std = 1.4826 * _median([abs(s - med) for s in s_T])
    return _std_scaled(s_T) if robust_std < 1e-8 else [s / robust_std for s in s_T]


def scale_surprisals(s_T: list[float], norm_mode: str) -> list[float]:
    """Scale one completion's surprisals by `norm_mode` (never centred)."""
    if norm_mode == "none":
        return list(s_T)
    if norm_mode == "scale":
        return _std_scaled(s_T)
    if norm_mode == "mad_scale":
        return _mad_scaled(s_T)
    raise ValueError(f"delight_norm_mode={norm_mode!r} is not known; use one of {list(NORM_MODES)}.")


def quantile(values: list[float], q: float) -> float:
    """Linearly interpolated quantile, q in [0, 1]."""
    if not values:
        return 0.0
    ordered = sorted(values)
    if q <= 0.0:
        return ordered[0]
    if q >= 1.0:
        return ordered[-1]
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi:
        return ordered[lo]
    frac = pos - lo
    return ordered[lo] * (1.0 - frac) + ordered[hi] * frac


def norm_mode_of(params: Mapping[str, object], default: str) -> str:
    """`delight_norm_mode`, else the boolean `delight_normalize` (true: "scale"), else `default`."""
    raw = params.get("delight_norm_mode")
    if raw is not None:
        if not isinstance(raw, str) or raw.strip().lower() not in NORM_MODES:
            raise ValueError(f"transform_params.delight_norm_mode={raw!r}: use one of {list(NORM_MODES)}.")
        return raw.strip().lower()
    flag = params.get("delight_normalize")
    if flag is not None:
        if not isinstance(flag, bool):
            raise ValueError(f"transform_params.delight_normalize={flag!r} must be true or false.")
        return "scale" if flag else "none"
    return default


def eta_mode_of(params: Mapping[str, object]) -> str:
    """`delight_eta_mode`, else the boolean `delight_eta_adaptive`, else "fixed"."""
    raw = params.get("delight_eta_mode")
    if raw is None:
        flag = params.get("delight_eta_adaptive")
        if flag is None:
            return "fixed"
        if not isinstance(flag, bool):
            raise ValueError(f"transform_params.delight_eta_adaptive={flag!r} must be true or false.")
        return "adaptive" if flag else "fixed"
    if not isinstance(raw, str) or raw.strip().lower() not in ETA_MODES:
        raise ValueError(f"transform_params.delight_eta_mode={raw!r}: use one of {list(ETA_MODES)}.")
    return raw.strip().lower()


def is_adaptive(params: Mapping[str, object]) -> bool:
    """Whether these transform params ask for an adaptive eta (the run then carries its EMA)."""
    raw = params.get("delight_eta_mode")
    if isinstance(raw, str):
        return raw.strip().lower() == "adaptive"
    return params.get("delight_eta_adaptive") is True


def capped_surprisals(logprobs_T: list[float]) -> list[float]:
    return [min(-lp, MAX_SURPRISAL) for lp in logprobs_T]


def active_rollouts(ctx: TransformContext, norm_mode: str) -> list[Rollout]:
    """(A_i, scaled surprisals) of every completion with a nonzero advantage."""
    return [
        (a, scale_surprisals(capped_surprisals(lp), norm_mode))
        for a, lp in zip(ctx.advantages_G, ctx.logprobs_G_T, strict=True)
        if a != 0.0
    ]


def ordering_gaps(rollouts: list[Rollout], eta: float) -> tuple[list[float], list[float], list[float]]:
    """Per completion: mean gate of its high-surprisal half minus its low half, sign-corrected by A.

    Positive when the gate orders tokens as intended. Returns (all, A > 0, A < 0).
    """
    inv_eta = 1.0 / max(eta, ETA_FLOOR)
    all_gaps: list[float] = []
    pos: list[float] = []
    neg: list[float] = []
    for a, s_T in rollouts:
        half = len(s_T) // 2
        if half == 0:
            continue
        ordered = sorted(((s, sigmoid(a * s * inv_eta)) for s in s_T), key=lambda pair: pair[0])
        gap = sum(g for _, g in ordered[-half:]) / half - sum(g for _, g in ordered[:half]) / half
        corrected = gap if a > 0 else -gap
        all_gaps.append(corrected)
        (pos if a > 0 else neg).append(corrected)
    return all_gaps, pos, neg


def _num(params: Mapping[str, object], key: str, default: float) -> float:
    return param_number(params.get(key, default))


def _ema(prev: float, now: float, decay: float) -> float:
    return decay * prev + (1.0 - decay) * now


def resolve_eta(ctx: TransformContext, norm_mode: str) -> tuple[float, dict[str, float]]:
    """The gate temperature of this group and its `dg_eta*` metrics (see the module docstring)."""
    params = ctx.params
    base = max(_num(params, "delight_eta", 1.0), ETA_FLOOR)
    decay = _num(params, "delight_eta_ema_decay", 0.0)
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"transform_params.delight_eta_ema_decay={decay} must be in [0, 1), e.g. 0.8.")
    prev = None if params.get(PREV_ETA_PARAM) is None else max(param_number(params[PREV_ETA_PARAM]), ETA_FLOOR)
    smooth = prev is not None and decay > 0.0
    if eta_mode_of(params) == "fixed":
        return base, {"dg_eta": base, "dg_eta_adaptive": 0.0}
    rollouts = active_rollouts(ctx, norm_mode)
    if not rollouts:
        metrics = {"dg_eta": base, "dg_eta_adaptive": 1.0}
        if prev is None or not smooth:
            return base, metrics
        eta = max(_ema(prev, base, decay), ETA_FLOOR)
        return eta, {**metrics, "dg_eta": eta, "dg_eta_raw": base, "dg_eta_prev": prev, "dg_eta_ema_decay": decay}
    target_neutral = min(max(_num(params, "delight_eta_target_neutral_frac", 0.5), 0.0), 1.0)
    target_gap = max(0.0, _num(params, "delight_eta_target_ordering_gap", 0.0))
    eta_min = max(ETA_FLOOR, _num(params, "delight_eta_min", 0.05))
    eta_max = max(eta_min, _num(params, "delight_eta_max", 5.0))
    magnitudes = [abs(a * s) for a, s_T in rollouts for s in s_T]
    raw = quantile(magnitudes, target_neutral) / NEUTRAL_LOGIT if magnitudes else base
    raw = min(max(raw, eta_min), eta_max)
    if target_gap > 0.0:
        gaps = ordering_gaps(rollouts, raw)[0]
        gap_now = sum(gaps) / len(gaps) if gaps else target_gap
        if gap_now < target_gap:
            raw = min(max(raw * max(gap_now / max(target_gap, ETA_FLOOR), 0.25), eta_min), eta_max)
    eta = min(max(_ema(prev, raw, decay), eta_min), eta_max) if prev is not None and smooth else raw
    metrics = {
        "dg_eta": eta, "dg_eta_adaptive": 1.0, "dg_eta_target_neutral_frac": target_neutral,
        "dg_eta_target_ordering_gap": target_gap, "dg_eta_min": eta_min, "dg_eta_max": eta_max,
    }
    if prev is not None and smooth:
        metrics.update({"dg_eta_raw": raw, "dg_eta_prev": prev, "dg_eta_ema_decay": decay})
    return eta, metrics


def soft_gate(advantage: float, s_T: list[float], eta: float, lam: float, norm_mode: str) -> list[float]:
    """A * [(1 - lam) + lam * sigmoid(A s' / eta)] per token; lam = 1 is plain `delight`."""
    if advantage == 0.0:
        return [0.0] * len(s_T)
    lam = max(0.0, min(1.0, lam))
    if lam == 0.0:
        return [advantage] * len(s_T)
    inv_eta = 1.0 / max(eta, ETA_FLOOR)
    return [advantage * ((1.0 - lam) + lam * sigmoid(advantage * s * inv_eta))
            for s in scale_surprisals(s_T, norm_mode)]


def hard_gate(advantage: float, s_T: list[float], lam: float, k_frac: float) -> list[float]:
    """A * [(1 - lam) + lam * keep(t)], keeping the k most (A > 0) or least (A < 0) surprising tokens."""
    n = len(s_T)
    if n == 0 or advantage == 0.0:
        return [0.0] * n
    lam = max(0.0, min(1.0, lam))
    if lam == 0.0:
        return [advantage] * n
    k = max(1, int(n * k_frac))
    keep = set(sorted(range(n), key=lambda t: s_T[t], reverse=advantage > 0)[:k])
    return [advantage * ((1.0 - lam) + lam * (1.0 if t in keep else 0.0)) for t in range(n)]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _pop_var(values: list[float]) -> float:
    mean = _mean(values)
    return sum((v - mean) ** 2 for v in values) / len(values)


def _pop_std(values: list[float]) -> float:
    return _pop_var(values) ** 0.5


def gate_metrics(ctx: TransformContext, advs_G_T: list[list[float]], eta: float, norm_mode: str) -> dict[str, float]:
    """`dg_*` gate statistics over the group's active completions (none when every A_i is 0)."""
    rollouts = active_rollouts(ctx, norm_mode)
    inv_eta = 1.0 / max(eta, ETA_FLOOR)
    signed = [(a, sigmoid(a * s * inv_eta)) for a, s_T in rollouts for s in s_T]
    gates = [g for _, g in signed]
    if not gates:
        return {}
    n = len(gates)
    metrics = {
        "dg_gate_mean": _mean(gates), "dg_gate_std": _pop_std(gates), "dg_gate_min": min(gates),
        "dg_gate_max": max(gates), "dg_breakthrough_frac": sum(g > 0.8 for g in gates) / n,
        "dg_suppressed_frac": sum(g < 0.2 for g in gates) / n,
        "dg_neutral_frac": sum(0.4 <= g <= 0.6 for g in gates) / n,
    }
    pos = [g for a, g in signed if a > 0]
    neg = [g for a, g in signed if a <= 0]
    if pos:
        metrics["dg_gate_mean_pos"] = _mean(pos)
    if neg:
        metrics["dg_gate_mean_neg"] = _mean(neg)
    for name, gaps in zip(("", "_pos", "_neg"), ordering_gaps(rollouts, eta), strict=True):
        if gaps:
            metrics[f"dg_gate_ordering_gap{name}"] = _mean(gaps)
    metrics.update(_bias_metrics(ctx, advs_G_T))
    return metrics


def _uniform_sum(ctx: TransformContext) -> float:
    return sum(a * len(lp) for a, lp in zip(ctx.advantages_G, ctx.logprobs_G_T, strict=True))


def _bias_metrics(ctx: TransformContext, advs_G_T: list[list[float]]) -> dict[str, float]:
    """How far the gated token advantages move the batch sum from uniform weighting, and their spread."""
    flat = [a for row in advs_G_T for a in row]
    if not flat:
        return {}
    bias = sum(flat) - _uniform_sum(ctx)
    out = {"dg_net_advantage_bias": bias, "dg_net_advantage_bias_per_token": bias / len(flat),
           "dg_token_adv_std": _pop_std(flat)}
    within = [_pop_var(row) for row in advs_G_T if len(row) >= 2]
    if within:
        out["dg_within_rollout_adv_var"] = _mean(within)
    return out


def _lambda(ctx: TransformContext) -> float:
    override = ctx.params.get("delight_lambda")
    return param_number(override) if override is not None else ctx.sepa_lambda


def _gated(ctx: TransformContext, gate: Callable[[float, list[float]], list[float]]) -> tuple[list[list[float]], SplitCollector]:
    pre = SplitCollector()
    advs_G_T: list[list[float]] = []
    for a, lp, mask in zip(ctx.advantages_G, ctx.logprobs_G_T, ctx.planning_masks_G_T, strict=True):
        s_T = capped_surprisals(lp)
        advs_G_T.append(gate(a, s_T))
        pre.add(s_T, mask)
    return advs_G_T, pre


def _soft(ctx: TransformContext, default_norm: str, lam: float | None) -> GroupAdvantages:
    norm_mode = norm_mode_of(ctx.params, default_norm)
    eta, eta_metrics = resolve_eta(ctx, norm_mode)
    strength = 1.0 if lam is None else lam
    advs_G_T, pre = _gated(ctx, lambda a, s_T: soft_gate(a, s_T, eta, strength, norm_mode))
    metrics = gate_metrics(ctx, advs_G_T, eta, norm_mode)
    if metrics and lam is not None:
        metrics["dg_lambda"] = lam
    metrics.update(eta_metrics)
    return GroupAdvantages(advs_G_T, stats=entropy_stats(pre, SplitCollector()), extra_metrics=metrics)


def delight(ctx: TransformContext) -> GroupAdvantages:
    """`transform_mode = "delight"`: the full gate, raw surprisal unless `delight_norm_mode` says otherwise."""
    return _soft(ctx, "none", None)


def delight_sepa(ctx: TransformContext) -> GroupAdvantages:
    """`transform_mode = "delight_sepa"`: uniform weighting blended into the gate by the SEPA lambda."""
    return _soft(ctx, "scale", _lambda(ctx))


def hard_delight(ctx: TransformContext) -> GroupAdvantages:
    """`transform_mode = "hard_delight"`: the top/bottom-k token selection, blended by the SEPA lambda."""
    k_frac = _num(ctx.params, "delight_k_frac", 0.2)
    lam = _lambda(ctx)
    advs_G_T, pre = _gated(ctx, lambda a, s_T: hard_gate(a, s_T, lam, k_frac))
    flat = [a for row in advs_G_T for a in row]
    metrics = {
        "hard_dg_active_frac": sum(a != 0.0 for a in flat) / max(len(flat), 1),
        "hard_dg_k_frac": k_frac,
        "hard_dg_lambda": lam,
    }
    if flat:
        metrics["hard_dg_net_bias"] = sum(flat) - _uniform_sum(ctx)
    return GroupAdvantages(advs_G_T, stats=entropy_stats(pre, SplitCollector()), extra_metrics=metrics)
