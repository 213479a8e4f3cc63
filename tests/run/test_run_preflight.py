"""Preflight refuses, before any model loads, what the run could not carry out as configured."""

from __future__ import annotations

import pytest

from retrain_ray.checks.preflight import PreflightError, check_run
from retrain_ray.config import ConfigError, RetrainConfig, apply_overrides, parse_overrides


def _cfg(**overrides) -> RetrainConfig:
    """The defaults on the built-in model (the default Hub model is not cached here), plus overrides."""
    overrides = {"model.model": "builtin:tiny", **overrides}
    argv = [f"--{key}={str(value).lower() if isinstance(value, bool) else value}" for key, value in overrides.items()]
    return apply_overrides(RetrainConfig(), parse_overrides(argv))


def test_default_configuration_passes():
    """The defaults with a model that is here (the default Hub model is not cached in tests)."""
    cfg = RetrainConfig()
    check_run(cfg.model_copy(update={"model": cfg.model.model_copy(update={"model": "builtin:tiny"})}))
    with pytest.raises(PreflightError, match="huggingface-cli download Qwen/Qwen3-4B-Instruct-2507"):
        check_run(cfg)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"echo.enabled": True}, "echo.enabled"),
        ({"training.tl_grpo": True}, "training.tl_grpo"),
    ],
)
def test_unimplemented_original_features_are_config_errors_naming_the_key(overrides, key):
    with pytest.raises(ConfigError) as info:
        _cfg(**overrides)
    assert key in str(info.value)


def test_entropy_needs_an_engine_that_returns_it():
    """Caught as early as the config (spec 7); the PyTorch engine on the local backend passes preflight."""
    with pytest.raises(ConfigError, match="shannon_entropy"):
        _cfg(**{"algorithm.uncertainty_kind": "shannon_entropy", "algorithm.transform_mode": "gtpo",
                "inference.engine": "openai", "inference.url": "http://127.0.0.1:9"})
    check_run(_cfg(**{"algorithm.uncertainty_kind": "shannon_entropy", "algorithm.transform_mode": "gtpo"}))


def test_every_problem_is_reported_together():
    with pytest.raises(ConfigError) as info:
        _cfg(**{"echo.enabled": True, "training.tl_grpo": True})
    assert {i.location for i in info.value.issues} == {"echo.enabled", "training.tl_grpo"}
