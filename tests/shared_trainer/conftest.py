"""Fixtures of the shared-trainer tests: solo backends and shared trainers over `builtin:tiny`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # batches.py, beside these tests


@pytest.fixture
def solo(tiny_cache):
    """`solo(settings)`: the product's own solo backend for a run of these settings (its own model copy)."""
    from retrain_ray.backends.local import build_shared_policy

    def make(settings):
        return build_shared_policy("builtin:tiny", settings, device="cpu", cache_dir=tiny_cache)[1]

    return make


@pytest.fixture
def shared(tiny_cache):
    """`shared()`: a fresh shared trainer over one copy of `builtin:tiny` (the default LoRA targets)."""
    from retrain_ray.models.lora import LoraSettings
    from retrain_ray.shared_trainer import SharedTrainer

    return lambda: SharedTrainer.load("builtin:tiny", LoraSettings(), cache_dir=tiny_cache)
