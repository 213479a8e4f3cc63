"""The composable advantage pipeline of one prompt group (spec 2.4).

    A_G  = advantage(rewards_G)                         one scalar per completion
    none:  every token of completion i gets A_i; statistics are observational surprisal
    else:  u = uncertainty(completion)                  raw per-token uncertainty
           u' = entropy_transform(u, mask, lambda)      SEPA variants only
           t  = gtpo_weighting(A_i, u', beta)
           t  = hicra(t, mask, alpha)                   gtpo_hicra only
           post_process(t, raw u, params)               entropy_mask only (per-group threshold)

Context-style transforms (plugins) receive a `TransformContext` and return the token advantages.
Departure from the original: shapes are checked up front and errors name the completion index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from retrain_ray.algorithms import credit
from retrain_ray.algorithms.registry import AdvantageSpec, TransformSpec, UncertaintySpec
from retrain_ray.algorithms.types import (
    MAX_SURPRISAL,
    GroupAdvantages,
    SplitCollector,
    TransformContext,
    UncertaintyInput,
    entropy_stats,
)


@dataclass(frozen=True)
class GroupInput:
    """One prompt group's data, shape-checked by `check_group`."""

    rewards_G: list[float]
    logprobs_G_T: list[list[float]]
    masks_G_T: list[list[int]]
    entropies_G_T: list[list[float]] | None = None
    distributions_G: list[list[list[float]]] | None = None


@dataclass(frozen=True)
class Knobs:
    """Scalar settings of one pipeline call."""

    sepa_lambda: float
    gtpo_beta: float
    hicra_alpha: float
    params: Mapping[str, object]
    advantage_params: Mapping[str, object]
    step: int = 0


def check_group(group: GroupInput) -> None:
    """Raise a ValueError naming the first inconsistent completion."""
    n = len(group.rewards_G)
    if len(group.logprobs_G_T) != n or len(group.masks_G_T) != n:
        raise ValueError(
            f"group has {n} rewards, {len(group.logprobs_G_T)} logprob rows and {len(group.masks_G_T)} "
            "planning-mask rows; they must match (one per completion)."
        )
    for i, (lp, mask) in enumerate(zip(group.logprobs_G_T, group.masks_G_T, strict=True)):
        if len(lp) != len(mask):
            raise ValueError(f"completion {i}: {len(lp)} logprobs but a planning mask of {len(mask)} tokens.")
    if group.entropies_G_T is not None and len(group.entropies_G_T) != n:
        raise ValueError(f"entropies has {len(group.entropies_G_T)} rows for a group of {n} completions.")


def as_group_advantages(result: object, logprobs_G_T: Sequence[Sequence[float]], who: str) -> GroupAdvantages:
    """Accept a GroupAdvantages or a list of lists from a plugin, and check its shape."""
    out = result if isinstance(result, GroupAdvantages) else GroupAdvantages(
        [list(map(float, r)) for r in cast("Sequence[Sequence[float]]", result)])  # a plugin's rows
    rows = out.token_advantages
    if len(rows) != len(logprobs_G_T) or any(len(a) != len(b) for a, b in zip(rows, logprobs_G_T, strict=True)):
        raise ValueError(f"{who} returned token advantages whose shape differs from the logprobs.")
    return out


def episode_advantages(spec: AdvantageSpec, rewards_G: list[float], params: Mapping[str, object]) -> list[float]:
    advantages_G = [float(a) for a in spec.compute(rewards_G, params)]
    if len(advantages_G) != len(rewards_G):
        raise ValueError(f"advantage_mode={spec.name!r} returned {len(advantages_G)} values for {len(rewards_G)} rewards.")
    return advantages_G


def broadcast(advantages_G: list[float], group: GroupInput) -> GroupAdvantages:
    pre = SplitCollector()
    for lp, mask in zip(group.logprobs_G_T, group.masks_G_T, strict=True):
        pre.add([min(-float(x), MAX_SURPRISAL) for x in lp], mask)
    advs = [[a] * len(lp) for a, lp in zip(advantages_G, group.logprobs_G_T, strict=True)]
    return GroupAdvantages(advs, stats=entropy_stats(pre, pre))


def _uncertainty_row(u_spec: UncertaintySpec, group: GroupInput, i: int) -> list[float]:
    data = UncertaintyInput(
        logprobs_T=group.logprobs_G_T[i],
        entropies_T=group.entropies_G_T[i] if group.entropies_G_T is not None else None,
        distributions_T=group.distributions_G[i] if group.distributions_G is not None else None,
    )
    u_T = [float(u) for u in u_spec.compute(data)]
    if len(u_T) != len(group.logprobs_G_T[i]):
        raise ValueError(f"uncertainty_kind={u_spec.name!r} returned {len(u_T)} values for completion {i}.")
    return u_T


def _context(advantages_G: list[float], group: GroupInput, knobs: Knobs) -> TransformContext:
    return TransformContext(
        advantages_G=advantages_G,
        logprobs_G_T=group.logprobs_G_T,
        planning_masks_G_T=group.masks_G_T,
        sepa_lambda=knobs.sepa_lambda,
        params=knobs.params,
        step=knobs.step,
        gtpo_beta=knobs.gtpo_beta,
        hicra_alpha=knobs.hicra_alpha,
        entropies_G_T=group.entropies_G_T,
    )


def run_pipeline(
    a_spec: AdvantageSpec, t_spec: TransformSpec, u_spec: UncertaintySpec, group: GroupInput, knobs: Knobs
) -> GroupAdvantages:
    """Episode advantages, then the token transform; see the module docstring."""
    check_group(group)
    advantages_G = episode_advantages(a_spec, group.rewards_G, knobs.advantage_params)
    if t_spec.compute_context is not None:
        result = t_spec.compute_context(_context(advantages_G, group, knobs))
        return as_group_advantages(result, group.logprobs_G_T, f"transform_mode={t_spec.name!r}")
    if not t_spec.use_gtpo:
        return broadcast(advantages_G, group)
    pre, post = SplitCollector(), SplitCollector()
    raw_G_T: list[list[float]] = []
    advs_G_T: list[list[float]] = []
    for i, (a, mask) in enumerate(zip(advantages_G, group.masks_G_T, strict=True)):
        u_T = _uncertainty_row(u_spec, group, i)
        raw_G_T.append(u_T)
        pre.add(u_T, mask)
        if t_spec.entropy_transform is not None:
            u_T = t_spec.entropy_transform(u_T, mask, knobs.sepa_lambda)
        post.add(u_T, mask)
        t_T = credit.gtpo_weighting(a, u_T, beta=knobs.gtpo_beta)
        if t_spec.apply_hicra:
            t_T = credit.hicra(t_T, mask, knobs.hicra_alpha)
        advs_G_T.append(t_T)
    extra: dict[str, float] = {}
    if t_spec.post_process is not None:
        advs_G_T, extra = t_spec.post_process(advs_G_T, raw_G_T, knobs.params)
        advs_G_T = as_group_advantages(advs_G_T, group.logprobs_G_T, f"{t_spec.name} post-process").token_advantages
    return GroupAdvantages(advs_G_T, stats=entropy_stats(pre, post), extra_metrics=extra)
