"""The original's flat `TrainConfig` field names and their TOML homes (spec section 7).

CLI flags (`--max-steps`, `--bp-enabled`, `--optim-beta1`) and campaign condition overrides (`lr = 5e-5`)
use these field names, not the TOML keys. The mapping is a per-section prefix (`bp_` for
[backpressure], `optim_` for [optimizer], ...) plus the exceptions the original has; it is checked for
collisions at import time.
"""

from __future__ import annotations

from retrain_ray.config import sections_aux as aux
from retrain_ray.config import sections_core as core
from retrain_ray.config.base import Section

TRAIN_SECTIONS: dict[str, type[Section]] = {
    "training": core.TrainingSection,
    "algorithm": core.AlgorithmSection,
    "backend": core.BackendSection,
    "model": core.ModelSection,
    "optimizer": core.OptimizerSection,
    "lora": core.LoraSection,
    "gtpo": core.GtpoSection,
    "hicra": core.HicraSection,
    "sepa": core.SepaSection,
    "inference": aux.InferenceSection,
    "backpressure": aux.BackpressureSection,
    "planning": aux.PlanningSection,
    "data": aux.DataSection,
    "environment": aux.EnvironmentSection,
    "reward": aux.RewardSection,
    "resume": aux.ResumeSection,
    "logging": aux.LoggingSection,
    "echo": aux.EchoSection,
    "optimizer_batch": aux.OptimizerBatchSection,
    "plugins": aux.PluginsSection,
}
"""Sections that form the original's TrainConfig (everything but [campaign] and [squeeze])."""

_PREFIX = {
    "training": "", "algorithm": "", "backend": "", "model": "", "optimizer": "optim_", "lora": "lora_",
    "gtpo": "gtpo_", "hicra": "hicra_", "sepa": "sepa_", "inference": "inference_", "backpressure": "bp_",
    "planning": "planning_", "data": "data_", "environment": "environment_", "reward": "reward_",
    "resume": "resume_", "logging": "", "echo": "echo_", "optimizer_batch": "optimizer_batch_",
    "plugins": "plugins_",
}
_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("algorithm", "params"): "algorithm_params",
    ("optimizer", "grad_clip_norm"): "grad_clip_norm",
    ("backend", "throttle_dir"): "tinker_throttle_dir",
    ("backend", "max_concurrent"): "tinker_max_concurrent",
    ("backend", "options"): "backend_options",
    ("backend", "lease_ttl_s"): "throttle_lease_ttl_s",
    ("backend", "acquire_timeout_s"): "throttle_acquire_timeout_s",
    ("model", "revision"): "model_revision",
    ("model", "local_files_only"): "model_local_files_only",
    ("inference", "attention_kernel"): "attention_kernel",
    ("inference", "dtype"): "inference_dtype",
    ("inference", "kv_cache_dtype"): "kv_cache_dtype",
    ("inference", "prefix_caching"): "prefix_caching",
    ("inference", "one_step_off"): "one_step_off",
}


def toml_keys(section: str) -> list[str]:
    """TOML key names of a section (aliases where they differ from attribute names)."""
    model = TRAIN_SECTIONS[section]
    return [info.alias or name for name, info in model.model_fields.items()]


def _build() -> dict[str, tuple[str, str]]:
    index: dict[str, tuple[str, str]] = {}
    for section in TRAIN_SECTIONS:
        for key in toml_keys(section):
            field = _EXCEPTIONS.get((section, key), _PREFIX[section] + key)
            if field in index:
                raise RuntimeError(f"field name {field!r} maps to {index[field]} and {(section, key)}")
            index[field] = (section, key)
    return index


FIELD_INDEX: dict[str, tuple[str, str]] = _build()
KEY_TO_FIELD: dict[tuple[str, str], str] = {v: k for k, v in FIELD_INDEX.items()}


def field_to_key(field_name: str) -> tuple[str, str]:
    """(section, TOML key) of an original TrainConfig field name, e.g. `bp_enabled` ->
    ("backpressure", "enabled"). Raises KeyError for an unknown name."""
    return FIELD_INDEX[field_name]


def key_to_field(section: str, key: str) -> str:
    """Inverse of `field_to_key`."""
    return KEY_TO_FIELD[(section, key)]
