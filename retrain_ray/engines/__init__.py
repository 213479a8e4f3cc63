"""Sampling engines: the batched PyTorch engine (default), a naive baseline, and the shared math.

Names are imported lazily (PEP 562): a campaign driver imports `retrain_ray.engines.types` (through
its pre-Ray checks) and never needs torch, which the engines import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports on first use
    from retrain_ray.engines.pytorch.engine import NaiveEngine, PyTorchEngine
    from retrain_ray.engines.types import SampleResult, SamplingEngine, SamplingParams, WeightUpdate

_EXPORTS = {
    "NaiveEngine": "pytorch.engine",
    "PyTorchEngine": "pytorch.engine",
    "SampleResult": "types",
    "SamplingEngine": "types",
    "SamplingParams": "types",
    "WeightUpdate": "types",
}

__all__ = ["NaiveEngine", "PyTorchEngine", "SampleResult", "SamplingEngine", "SamplingParams", "WeightUpdate"]


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'retrain_ray.engines' has no attribute {name!r}")
    return getattr(importlib.import_module(f"retrain_ray.engines.{_EXPORTS[name]}"), name)
