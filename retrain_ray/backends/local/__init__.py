"""Local PyTorch training backend (LoRA or full fine-tuning) and policy builders."""

from retrain_ray.backends.local.backend import LocalBackend, LossSettings, OptimizerSettings
from retrain_ray.backends.local.policy import (
    PolicySettings,
    build_local_backend,
    build_local_policy,
    build_local_trainer,
    build_shared_policy,
    build_split_engine,
    load_trainable_model,
    settings_from_config,
)
from retrain_ray.models.finetune import DEFAULT_TARGET_MODULES, LoraSettings

__all__ = [
    "DEFAULT_TARGET_MODULES",
    "LocalBackend",
    "LoraSettings",
    "LossSettings",
    "OptimizerSettings",
    "PolicySettings",
    "build_local_backend",
    "build_local_policy",
    "build_local_trainer",
    "build_shared_policy",
    "build_split_engine",
    "load_trainable_model",
    "settings_from_config",
]
