"""`retrain.inference_engine` for plugins: see `base`."""

from retrain_ray.compat.original.inference_engine.base import InferenceEngine, SampleResult

__all__ = ["InferenceEngine", "SampleResult"]
