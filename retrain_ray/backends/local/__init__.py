"""The local PyTorch training backend (LoRA or full fine-tuning): its spec (here) and `[backend.options]` schema (options.py), the
trainer (backend.py) and the policy builders (policy.py). Names are imported lazily (PEP 562), so the
registry reads the spec without loading torch."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from retrain_ray.backends.local.options import CAPABILITIES, OPTIONS
from retrain_ray.backends.types import BackendSpec

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports on first use
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
    from retrain_ray.models.lora import DEFAULT_TARGET_MODULES, LoraSettings


_DEPENDENCIES = (("torch", "pip install retrain-ray"), ("transformers", "pip install retrain-ray"),
                 ("peft", "pip install retrain-ray"))

SPEC = BackendSpec(
    "local", trains_locally=True, honours_clip_eps=True, capabilities=CAPABILITIES,
    options=OPTIONS,
    dependencies=_DEPENDENCIES,
    description="PyTorch/PEFT on this machine or a Ray worker: CPU, one GPU, or split sampler/trainer GPUs")

_EXPORTS = {
    "LocalBackend": "retrain_ray.backends.local.backend",
    "LossSettings": "retrain_ray.backends.local.backend",
    "OptimizerSettings": "retrain_ray.backends.local.backend",
    "PolicySettings": "retrain_ray.backends.local.policy",
    "build_local_backend": "retrain_ray.backends.local.policy",
    "build_local_policy": "retrain_ray.backends.local.policy",
    "build_local_trainer": "retrain_ray.backends.local.policy",
    "build_shared_policy": "retrain_ray.backends.local.policy",
    "build_split_engine": "retrain_ray.backends.local.policy",
    "load_trainable_model": "retrain_ray.backends.local.policy",
    "settings_from_config": "retrain_ray.backends.local.policy",
    "DEFAULT_TARGET_MODULES": "retrain_ray.models.lora",
    "LoraSettings": "retrain_ray.models.lora",
}

__all__ = ['DEFAULT_TARGET_MODULES', 'LocalBackend', 'LoraSettings', 'LossSettings', 'OptimizerSettings', 'PolicySettings', 'build_local_backend', 'build_local_policy', 'build_local_trainer', 'build_shared_policy', 'build_split_engine', 'load_trainable_model', 'settings_from_config']


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
