"""Preflight (spec 1.3): fail before any model loads when a run's configuration cannot work.

Runs two synthetic groups through the configured advantage pipeline and checks them against what the
configured backend and engine can carry (token-varying advantages, per-token entropies).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # explain imports this module: keep torch out of it
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


def unsupported_features(cfg) -> list[str]:
    """Keys of the original that load (so its files keep working) but that this trainer does not carry
    out. Running anyway would silently train something else, so each one is an error with the fix."""
    t = cfg.training
    checks = [
        (cfg.echo.enabled, "echo.enabled = true", "ECHO is not implemented; set echo.enabled = false"),
        (bool(cfg.environment.provider), f"environment.provider = {cfg.environment.provider!r}",
         "verifiers/openenv environments are not implemented; use [data] with a task or a JSONL/Parquet file"),
        (t.tl_grpo, "training.tl_grpo = true", "TL-GRPO needs multi-turn environments; set it to false"),
        (t.trainer != "retrain", f"training.trainer = {t.trainer!r}", "only the built-in trainer runs; remove the key"),
        (bool(t.sft_data_path), "training.sft_data_path",
         "the warm start builds its targets from the task's answers; remove sft_data_path"),
        (cfg.optimizer_batch.capture or bool(cfg.optimizer_batch.replay_path), "optimizer_batch.capture/replay_path",
         "optimizer-batch capture and replay are not implemented; remove [optimizer_batch]"),
        (cfg.planning.detector == "semantic", "planning.detector = \"semantic\"",
         "only the regex planning detector is implemented; use detector = \"regex\""),
    ]
    return [f"{key}: {fix}" for active, key, fix in checks if active]


def model_problems(configs) -> list[str]:
    """Why a run's model cannot be loaded here (not cached and not downloadable, no such folder), checked
    once per distinct model before anything starts. Only the local backend loads the model itself."""
    from retrain_ray.models.hub import model_problem

    wanted = {(c.model.model, c.model.revision, bool(c.model.local_files_only))
              for c in configs if c.backend.backend == "local"}
    found = (model_problem(name, rev, local_files_only=lfo) for name, rev, lfo in sorted(wanted))
    return [f"model.model: {p}" for p in found if p]


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
    problems = unsupported_features(cfg) + model_problems([cfg]) + problems
    if problems:
        raise PreflightError(problems)
