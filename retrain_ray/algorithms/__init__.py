"""RL algorithm core: group advantages, token-credit transforms, batch transforms, SEPA, planning
detection, and the local policy loss. Pure functions on lists of floats, except `loss`.

Entry point: `compute_group_advantages(...)`; validate names at config time with `resolve_modes(...)`.
`policy_loss` / `aggregate_microbatches` live in `retrain_ray.algorithms.loss` (imports torch).
"""

from retrain_ray.algorithms.api import ResolvedModes, compute_group_advantages, resolve_modes
from retrain_ray.algorithms.batch import (
    TieStats,
    batch_normalize,
    cap_advantages,
    grpo,
    is_uniform_group,
    maxrl,
    reinforce_pp,
    reward_tie_stats,
)
from retrain_ray.algorithms.credit import (
    entropy_mask,
    gtpo_weighting,
    hicra,
    mask_threshold,
    sepa_amp,
    sepa_amp_c,
    sepa_pool,
)
from retrain_ray.algorithms.delight import PREV_ETA_PARAM
from retrain_ray.algorithms.delight import is_adaptive as is_adaptive_delight
from retrain_ray.algorithms.planning import (
    DEFAULT_STRATEGIC_GRAMS,
    RegexPlanningDetector,
    parse_strategic_grams,
    planning_mask,
)
from retrain_ray.algorithms.recipes import AlgorithmSpec
from retrain_ray.algorithms.registry import TransformSpec
from retrain_ray.algorithms.sepa import SEPAController
from retrain_ray.algorithms.types import (
    MAX_SURPRISAL,
    AdvantageContext,
    AlgorithmContext,
    EntropyStats,
    GroupAdvantages,
    SplitStats,
    TransformContext,
    UncertaintyInput,
    split_stats,
)

__all__ = [
    "DEFAULT_STRATEGIC_GRAMS",
    "MAX_SURPRISAL",
    "PREV_ETA_PARAM",
    "AdvantageContext",
    "AlgorithmContext",
    "AlgorithmSpec",
    "EntropyStats",
    "GroupAdvantages",
    "RegexPlanningDetector",
    "ResolvedModes",
    "SEPAController",
    "SplitStats",
    "TieStats",
    "TransformContext",
    "TransformSpec",
    "UncertaintyInput",
    "batch_normalize",
    "cap_advantages",
    "compute_group_advantages",
    "entropy_mask",
    "grpo",
    "gtpo_weighting",
    "hicra",
    "is_adaptive_delight",
    "is_uniform_group",
    "mask_threshold",
    "maxrl",
    "parse_strategic_grams",
    "planning_mask",
    "reinforce_pp",
    "resolve_modes",
    "reward_tie_stats",
    "sepa_amp",
    "sepa_amp_c",
    "sepa_pool",
    "split_stats",
]
