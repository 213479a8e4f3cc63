"""The one entry point of the advantage pipeline: `compute_group_advantages` (spec 2.1).

With `algorithm_mode` set, the full-algorithm recipe runs and `advantage_mode` / `transform_mode` are
ignored; otherwise the composable pipeline runs `advantage_mode` then `transform_mode`. The transform
parameters seen by the pipeline are `{uncertainty_kind, **transform_params}`.
Extensions over the original signature (keyword-only, optional): `advantage_params`,
`algorithm_params`, `token_distributions` (full per-token distributions for `shannon_entropy`), `step`.
A run resolves its modes once and calls `group_advantages` with its settings (`ModeChoices`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol, TypeVar

from retrain_ray.algorithms.pipeline import GroupInput, Knobs, check_group, run_pipeline
from retrain_ray.algorithms.recipes import ALGORITHMS, AlgorithmSpec
from retrain_ray.algorithms.registry import (
    ADVANTAGES,
    TRANSFORMS,
    UNCERTAINTIES,
    AdvantageSpec,
    TransformSpec,
    UncertaintySpec,
)
from retrain_ray.algorithms.types import AlgorithmContext, GroupAdvantages, param_table
from retrain_ray.algorithms.uncertainty import resolve_kind

_V = TypeVar("_V")
_N = TypeVar("_N")


def _rows(values: Sequence[Sequence[_V]] | None, cast: Callable[[_V], _N]) -> list[list[_N]] | None:
    return None if values is None else [[cast(v) for v in row] for row in values]


class ModeChoices(Protocol):
    """The resolved modes of a run and their parameters (run/credit.py's `CreditSettings` is one)."""

    @property
    def modes(self) -> ResolvedModes: ...
    @property
    def gtpo_beta(self) -> float: ...
    @property
    def hicra_alpha(self) -> float: ...
    @property
    def transform_params(self) -> Mapping[str, object]: ...
    @property
    def advantage_params(self) -> Mapping[str, object]: ...
    @property
    def algorithm_params(self) -> Mapping[str, object]: ...


@dataclass(frozen=True)
class _Choices:
    modes: ResolvedModes
    gtpo_beta: float
    hicra_alpha: float
    transform_params: Mapping[str, object]
    advantage_params: Mapping[str, object]
    algorithm_params: Mapping[str, object]


def compute_group_advantages(
    rewards: Sequence[float],
    logprobs: Sequence[Sequence[float]],
    planning_mask: Sequence[Sequence[int]] | None,
    *,
    advantage_mode: str,
    transform_mode: str,
    sepa_lambda: float = 0.0,
    gtpo_beta: float = 0.1,
    hicra_alpha: float = 0.2,
    uncertainty_kind: str = "surprisal",
    transform_params: Mapping[str, object] | None = None,
    algorithm_mode: str = "",
    entropies: Sequence[Sequence[float]] | None = None,
    advantage_params: Mapping[str, object] | None = None,
    algorithm_params: Mapping[str, object] | None = None,
    token_distributions: Sequence[Sequence[Sequence[float]]] | None = None,
    step: int = 0,
) -> GroupAdvantages:
    """Token advantages of one prompt group (one list per completion, shaped like `logprobs`).

    `planning_mask=None` means no planning tokens. Example:
    `compute_group_advantages([1, 0], [[-0.1], [-2.0]], None, advantage_mode="grpo",
    transform_mode="none").token_advantages == [[0.5], [-0.5]]`.
    """
    modes = resolve_modes(advantage_mode, transform_mode, algorithm_mode, uncertainty_kind, transform_params)
    choices = _Choices(modes, gtpo_beta, hicra_alpha, transform_params or {}, advantage_params or {},
                       algorithm_params or {})
    return group_advantages(choices, rewards, logprobs, planning_mask, sepa_lambda=sepa_lambda, entropies=entropies,
                            token_distributions=token_distributions, step=step)


def group_advantages(
    choices: ModeChoices,
    rewards: Sequence[float],
    logprobs: Sequence[Sequence[float]],
    planning_mask: Sequence[Sequence[int]] | None,
    *,
    sepa_lambda: float = 0.0,
    entropies: Sequence[Sequence[float]] | None = None,
    token_distributions: Sequence[Sequence[Sequence[float]]] | None = None,
    step: int = 0,
) -> GroupAdvantages:
    """`compute_group_advantages` with the modes already resolved (`choices.modes`)."""
    modes = choices.modes
    logprobs_G_T = _rows(logprobs, float) or []
    masks = _rows(planning_mask, int) if planning_mask is not None else [[0] * len(lp) for lp in logprobs_G_T]
    group = GroupInput(
        [float(r) for r in rewards], logprobs_G_T, masks or [], _rows(entropies, float),
        None if token_distributions is None else [[list(d) for d in row] for row in token_distributions],
    )
    check_group(group)
    t_params = dict(choices.transform_params)
    if modes.algorithm is not None:
        algorithm_params = choices.algorithm_params
        params = {
            **dict(algorithm_params),
            "uncertainty_kind": modes.uncertainty_kind,
            "advantage_params": dict(param_table(algorithm_params.get("advantage_params")
                                                 or choices.advantage_params or {})),
            "transform_params": dict(param_table(algorithm_params.get("transform_params") or t_params)),
        }
        ctx = AlgorithmContext(
            group.rewards_G, group.logprobs_G_T, group.masks_G_T, params, step, sepa_lambda, choices.gtpo_beta,
            choices.hicra_alpha, group.distributions_G, group.entropies_G_T,
        )
        return modes.algorithm.compute(ctx)
    knobs = Knobs(
        sepa_lambda, choices.gtpo_beta, choices.hicra_alpha, {"uncertainty_kind": modes.uncertainty_kind, **t_params},
        dict(choices.advantage_params), step,
    )
    return run_pipeline(modes.advantage, modes.transform, modes.uncertainty, group, knobs)


# Mode resolution, done once per configuration (spec 1.3 tier 1, 2.1).
#
# `resolve_modes` validates every name (built-in, alias or dotted-path plugin), canonicalises the
# uncertainty kind, and reports what the rest of the system must prepare: a planning detector
# (`needs_planning`), a SEPA controller (`uses_sepa_controller`), a token-preserving backend
# (`token_varying`; only trusted for built-ins, `builtin`). Results are cached, so the per-group hot path never re-parses names.
@dataclass(frozen=True)
class ResolvedModes:
    """The validated modes of one configuration and what they need."""

    advantage_mode: str
    transform_mode: str
    algorithm_mode: str
    uncertainty_kind: str
    needs_planning: bool
    uses_sepa_controller: bool
    token_varying: bool
    builtin: bool
    advantage: AdvantageSpec = field(repr=False, compare=False)
    transform: TransformSpec = field(repr=False, compare=False)
    uncertainty: UncertaintySpec = field(repr=False, compare=False)
    algorithm: AlgorithmSpec | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        """Condition label: the algorithm mode, or `advantage+transform`."""
        return self.algorithm_mode or f"{self.advantage_mode}+{self.transform_mode}"


@lru_cache(maxsize=256)
def _resolve(advantage_mode: str, transform_mode: str, algorithm_mode: str, kind: str) -> ResolvedModes:
    a_spec = ADVANTAGES.resolve(advantage_mode)
    t_spec = TRANSFORMS.resolve(transform_mode)
    u_spec = UNCERTAINTIES.resolve(kind)
    alg = ALGORITHMS.resolve(algorithm_mode) if algorithm_mode else None
    source: AlgorithmSpec | TransformSpec = alg if alg is not None else t_spec
    return ResolvedModes(
        advantage_mode=a_spec.name,
        transform_mode=t_spec.name,
        algorithm_mode=alg.name if alg is not None else "",
        uncertainty_kind=u_spec.name,
        needs_planning=source.needs_planning,
        uses_sepa_controller=source.uses_sepa_controller,
        token_varying=source.token_varying,
        builtin=(alg.name in ALGORITHMS.names()) if alg is not None else t_spec.name in TRANSFORMS.names(),
        advantage=a_spec,
        transform=t_spec,
        uncertainty=u_spec,
        algorithm=alg,
    )


def resolve_modes(
    advantage_mode: str,
    transform_mode: str,
    algorithm_mode: str = "",
    uncertainty_kind: str = "surprisal",
    transform_params: Mapping[str, object] | None = None,
) -> ResolvedModes:
    """Validate the mode names (ValueError naming the bad one) and describe their needs.

    Example: `resolve_modes("maxrl", "gtpo_sepa").uses_sepa_controller` is True.
    """
    kind = resolve_kind(uncertainty_kind, transform_params)
    return _resolve(advantage_mode.strip(), transform_mode.strip(), (algorithm_mode or "").strip(), kind)
