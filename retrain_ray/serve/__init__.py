"""Shared inference endpoint on Ray Serve: OpenAI-compatible completions with token ids, adapters
loaded by name and version, and an in-flight request counter for measuring concurrency."""

from typing import TYPE_CHECKING

from retrain_ray.engines.adapters import AdapterSpec, decode_adapter, encode_adapter

if TYPE_CHECKING:
    from retrain_ray.serve.app import start_inference_endpoint, stop_inference_endpoint

__all__ = [
    "AdapterSpec",
    "decode_adapter",
    "encode_adapter",
    "start_inference_endpoint",
    "stop_inference_endpoint",
]


def __getattr__(name: str):
    """Ray Serve and FastAPI load only when the endpoint itself is asked for."""
    if name in ("start_inference_endpoint", "stop_inference_endpoint", "InferenceServer"):
        # deferred: loads ray, which importing this module does not need
        from retrain_ray.serve import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
