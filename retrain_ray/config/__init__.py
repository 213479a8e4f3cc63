"""Configuration: TOML sections as frozen pydantic models, strict loading, CLI overrides, run matrix.

    cfg = load_config("configs/smoke.toml", overrides=parse_overrides(["--max-steps", "10"]))
    cfg.training.batch_size, cfg.optimizer.grad_clip_norm, cfg.lora.alpha
"""

from retrain_ray.config.build import build_config
from retrain_ray.config.campaign_schema import CampaignCondition, CampaignSection, SqueezeSection
from retrain_ray.config.errors import ConfigError, ConfigIssue
from retrain_ray.config.key_names import field_to_key, key_to_field
from retrain_ray.config.load import dump_toml, load_config, load_config_with_warnings, save_toml
from retrain_ray.config.matrix import RunSpec, condition_label, expand_runs
from retrain_ray.config.names import effective_uncertainty_kind
from retrain_ray.config.overrides import apply_condition, apply_overrides, parse_overrides
from retrain_ray.config.schema import RetrainConfig

__all__ = [
    "CampaignCondition",
    "CampaignSection",
    "ConfigError",
    "ConfigIssue",
    "RetrainConfig",
    "RunSpec",
    "SqueezeSection",
    "apply_condition",
    "apply_overrides",
    "build_config",
    "condition_label",
    "dump_toml",
    "effective_uncertainty_kind",
    "expand_runs",
    "field_to_key",
    "key_to_field",
    "load_config",
    "load_config_with_warnings",
    "parse_overrides",
    "save_toml",
]
