"""Sampling engines: the batched PyTorch engine (default), a naive baseline, and the shared math."""

from retrain_ray.engines.naive import NaiveEngine
from retrain_ray.engines.pytorch import PyTorchEngine
from retrain_ray.engines.types import SampleResult, SamplingEngine, SamplingParams, WeightUpdate

__all__ = ["NaiveEngine", "PyTorchEngine", "SampleResult", "SamplingEngine", "SamplingParams", "WeightUpdate"]
