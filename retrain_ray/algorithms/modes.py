"""Mode resolution, done once per configuration (spec 1.3 tier 1, 2.1).

`resolve_modes` validates every name (built-in, alias or dotted-path plugin), canonicalises the
uncertainty kind, and reports what the rest of the system must prepare: a planning detector
(`needs_planning`), a SEPA controller (`uses_sepa_controller`), a token-preserving backend
(`token_varying`; only trusted for built-ins, `builtin`). Results are cached, so the per-group hot path never re-parses names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from retrain_ray.algorithms.recipes import ALGORITHMS, AlgorithmSpec
from retrain_ray.algorithms.registry import (
    ADVANTAGES,
    TRANSFORMS,
    UNCERTAINTIES,
    AdvantageSpec,
    TransformSpec,
    UncertaintySpec,
)
from retrain_ray.algorithms.uncertainty import resolve_kind


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
