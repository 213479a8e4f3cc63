"""Preflight (spec 1.3): fail before any model loads when a run's configuration cannot work.

Runs two synthetic groups through the configured advantage pipeline and checks them against what the
configured backend and engine can carry (token-varying advantages, per-token entropies).
"""

from __future__ import annotations

from retrain_ray.backends.types import BackendCapabilities


class PreflightError(ValueError):
    """Every reason the run cannot start, one per line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def backend_capabilities(cfg) -> BackendCapabilities:
    if cfg.backend.backend == "tinker":
        from retrain_ray.backends.tinker.backend import TINKER_CAPABILITIES

        return TINKER_CAPABILITIES
    from retrain_ray.backends.local.backend import LocalBackend

    return LocalBackend.capabilities


def engine_provides_entropy(cfg) -> bool:
    return cfg.inference.engine == "pytorch" and cfg.backend.backend != "tinker"


def check_run(cfg) -> None:
    """Raises PreflightError listing every problem; returns quietly when the run can start."""
    from retrain_ray.algorithms import preflight

    alg = cfg.algorithm
    problems = preflight(
        backend_capabilities(cfg).preserves_token_advantages,
        alg.advantage_mode,
        alg.transform_mode,
        alg.algorithm_mode,
        alg.uncertainty_kind,
        alg.transform_params,
        engine_provides_entropy(cfg),
        advantage_params=alg.advantage_params,
        algorithm_params=alg.params,
    )
    if problems:
        raise PreflightError(problems)
