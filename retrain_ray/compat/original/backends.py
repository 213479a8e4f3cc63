"""`retrain.backends` for plugins: the `TrainHelper` protocol of a backend (spec section 1.6)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from retrain_ray.compat.original.type_defs import EnrichedSampleBatch, SampleBatch

__all__ = ["TrainHelper"]


@runtime_checkable
class TrainHelper(Protocol):
    """What a dotted `[backend] backend` plugin's factory returns (retrain_ray/backends/original_helper.py
    adapts it to retrain-ray's TrainBackend)."""

    def checkpoint(self, name: str) -> None: ...

    def sample(self, prompt_ids_list: list[list[int]], num_samples: int, max_tokens: int, temperature: float,
               top_p: float) -> SampleBatch: ...

    def sample_with_entropy(self, prompt_ids_list: list[list[int]], num_samples: int, max_tokens: int,
                            temperature: float, top_p: float) -> EnrichedSampleBatch: ...

    def train_step(self, all_tokens: list[list[int]], all_logprobs: list[list[float]],
                   all_advantages: list[list[float]], lr: float, weight_decay: float) -> float: ...

    def save_adapter(self, path: str, name: str) -> str: ...

    def load_state(self, name: str) -> None: ...
