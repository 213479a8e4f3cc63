"""Full algorithm modes (spec 2.7): fixed recipes over the composable pipeline, and `discover_entropic`.

A recipe `maxrl_gtpo_sepa` is exactly `advantage_mode=maxrl` + `transform_mode=gtpo_sepa`; recipes read
`params["advantage_params"]` and `params["transform_params"]`.

`discover_entropic` (alias `ttt_discover_entropic`) gives each completion the Boltzmann weight
p_i = softmax(beta (r_i - max r)) and the advantage A_i = n p_i - 1 (sums to 0), broadcast to every
token. beta is `params.beta` when given, else the largest beta in [0, beta_max] whose KL(p || uniform)
stays <= target_kl (bisection, `beta_search_steps` halvings). A group with no reward spread gets beta 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

from retrain_ray.algorithms.pipeline import GroupInput, Knobs, broadcast, run_pipeline
from retrain_ray.algorithms.registry import ADVANTAGES, TRANSFORMS, UNCERTAINTIES, Registry
from retrain_ray.algorithms.types import AlgorithmContext, GroupAdvantages, param_number, param_table

DISCOVER_TARGET_KL = 0.2
DISCOVER_BETA_MAX = 50.0
DISCOVER_SEARCH_STEPS = 24
EXPONENT_FLOOR = -700.0


@dataclass(frozen=True)
class AlgorithmSpec:
    """A full algorithm: AlgorithmContext -> GroupAdvantages (or a list of token-advantage lists)."""

    name: str
    compute: Callable[[AlgorithmContext], GroupAdvantages]
    needs_planning: bool = False
    uses_sepa_controller: bool = False
    token_varying: bool = True


def _group_of(ctx: AlgorithmContext) -> GroupInput:
    return GroupInput(
        ctx.rewards_G, ctx.logprobs_G_T, ctx.planning_masks_G_T, ctx.precomputed_entropies_G, ctx.token_distributions_G
    )


def _recipe(advantage_mode: str, transform_mode: str) -> AlgorithmSpec:
    a_spec, t_spec = ADVANTAGES.resolve(advantage_mode), TRANSFORMS.resolve(transform_mode)

    def compute(ctx: AlgorithmContext) -> GroupAdvantages:
        transform_params = dict(param_table(ctx.params.get("transform_params") or {}))
        kind = str(ctx.params.get("uncertainty_kind", "surprisal"))
        knobs = Knobs(
            ctx.sepa_lambda, ctx.gtpo_beta, ctx.hicra_alpha, {"uncertainty_kind": kind, **transform_params},
            dict(param_table(ctx.params.get("advantage_params") or {})), ctx.step,
        )
        return run_pipeline(a_spec, t_spec, UNCERTAINTIES.resolve(kind), _group_of(ctx), knobs)

    return AlgorithmSpec(
        f"{advantage_mode}_{transform_mode}", compute, needs_planning=t_spec.needs_planning,
        uses_sepa_controller=t_spec.uses_sepa_controller, token_varying=t_spec.token_varying,
    )


def boltzmann(rewards_G: list[float], beta: float) -> list[float]:
    """softmax(beta (r - max r)), exponents floored at -700."""
    top = max(rewards_G)
    weights = [math.exp(max(beta * (r - top), EXPONENT_FLOOR)) for r in rewards_G]
    total = sum(weights)
    return [w / total for w in weights]


def kl_to_uniform(p_G: list[float]) -> float:
    n = len(p_G)
    return sum(p * (math.log(p) + math.log(n)) for p in p_G if p > 0.0)


def discover_beta(rewards_G: list[float], params: Mapping[str, object]) -> float:
    """The inverse temperature: given, or the largest one within the KL target."""
    if len(rewards_G) <= 1 or max(rewards_G) - min(rewards_G) <= 1e-12:
        return 0.0
    if params.get("beta") is not None:
        return max(0.0, param_number(params["beta"]))
    target = param_number(params.get("target_kl", params.get("discover_target_kl", DISCOVER_TARGET_KL)))
    hi = param_number(params.get("beta_max", DISCOVER_BETA_MAX))
    if kl_to_uniform(boltzmann(rewards_G, hi)) <= target:
        return hi
    lo = 0.0
    for _ in range(int(cast("int", params.get("beta_search_steps", DISCOVER_SEARCH_STEPS)))):
        mid = (lo + hi) / 2
        if kl_to_uniform(boltzmann(rewards_G, mid)) <= target:
            lo = mid
        else:
            hi = mid
    return lo


def discover_entropic(ctx: AlgorithmContext) -> GroupAdvantages:
    rewards_G = [float(r) for r in ctx.rewards_G]
    if not rewards_G:
        return GroupAdvantages([])
    beta = discover_beta(rewards_G, ctx.params)
    p_G = boltzmann(rewards_G, beta)
    n = len(rewards_G)
    base = broadcast([n * p - 1.0 for p in p_G], _group_of(ctx))
    metrics = {
        "discover_beta": beta,
        "discover_kl": kl_to_uniform(p_G),
        "discover_reward_max": max(rewards_G),
        "discover_reward_mean": sum(rewards_G) / n,
    }
    return GroupAdvantages(base.token_advantages, stats=base.stats, extra_metrics=metrics)


_RECIPES = (
    ("grpo", "none"), ("maxrl", "none"), ("maxrl", "gtpo"), ("maxrl", "gtpo_hicra"), ("maxrl", "gtpo_sepa"),
    ("reinforce_pp", "none"), ("reinforce_pp", "gtpo"), ("reinforce_pp", "gtpo_sepa"),
    ("reinforce_pp", "delight"), ("reinforce_pp", "delight_sepa"),
)
_DISCOVER = AlgorithmSpec("discover_entropic", discover_entropic, token_varying=False)

ALGORITHMS: Registry[AlgorithmSpec] = Registry(
    "algorithm_mode",
    {
        **{f"{a}_{t}": _recipe(a, t) for a, t in _RECIPES},
        "discover_entropic": _DISCOVER,
        "ttt_discover_entropic": _DISCOVER,
    },
)
