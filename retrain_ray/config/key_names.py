"""Other names for the config's keys: the original's flat `TrainConfig` field names and their TOML homes
(spec section 7), seed 001's `[training]` aliases (`resolve_aliases`), and `OriginalConfigView`, which
answers plugin factories written for the original under the flat names.

CLI flags (`--max-steps`, `--bp-enabled`, `--optim-beta1`) and campaign condition overrides (`lr = 5e-5`)
use these field names, not the TOML keys. The mapping is a per-section prefix (`bp_` for
[backpressure], `optim_` for [optimizer], ...) plus the exceptions the original has; it is checked for
collisions at import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from retrain_ray.config import sections_runtime as aux
from retrain_ray.config import sections_training as core
from retrain_ray.config.base import Section
from retrain_ray.config.errors import ConfigIssue

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


ALIASES: dict[tuple[str, str], tuple[str, str]] = {
    ("training", "num_batches"): ("training", "max_steps"),
    ("training", "save_interval_steps"): ("training", "save_every"),
    ("training", "eval_interval_steps"): ("training", "eval_every"),
    ("training", "log_interval_steps"): ("training", "log_every"),
    ("training", "device"): ("backend", "devices"),
}


def _device(value: Any) -> Any:
    """Seed 001's `cuda` (also `cuda:N`) / `cpu` as a `[backend] devices` value."""
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if text == "cuda":
        return "gpu:0"
    if text.startswith("cuda:"):
        return "gpu:" + text.removeprefix("cuda:")
    return value


def resolve_aliases(raw: dict[str, Any], issues: list[ConfigIssue]) -> dict[str, Any]:
    """`raw` with every alias moved to its canonical key; a pair given twice is reported in `issues`
    (the canonical value is kept, so validation goes on)."""
    out = {name: dict(table) if isinstance(table, dict) else table for name, table in raw.items()}
    for (section, alias), (home, key) in ALIASES.items():
        table = out.get(section)
        if not isinstance(table, dict) or alias not in table:
            continue
        value = table.pop(alias)
        target = out.setdefault(home, {})
        if not isinstance(target, dict):
            continue  # a malformed [home] is reported by the structure check
        if key in target:
            issues.append(ConfigIssue(f"{section}.{alias}", value,
                                      f"is seed 001's name for [{home}] {key}, which is also given ({target[key]!r})",
                                      f"keep one of [{section}] {alias} and [{home}] {key}"))
            continue
        target[key] = _device(value) if alias == "device" else value
    return out


if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig


class OriginalConfigView:
    """Read-only view of a RetrainConfig under the original's flat field names."""

    def __init__(self, cfg: RetrainConfig) -> None:
        self._cfg = cfg

    def __getattr__(self, name: str) -> Any:
        if name not in FIELD_INDEX:
            raise AttributeError(f"the original TrainConfig has no field {name!r}")
        section, key = FIELD_INDEX[name]
        return getattr(getattr(self._cfg, section), "from_" if key == "from" else key)
