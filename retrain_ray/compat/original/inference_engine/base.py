"""`retrain.inference_engine.base` for plugins: `InferenceEngine` and `SampleResult` (spec section 1.9)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

__all__ = ["InferenceEngine", "SampleResult"]


@dataclass
class SampleResult:
    """One completion: its token ids (EOS included if hit), their log-probabilities, optional entropies."""

    token_ids: list[int]
    logprobs: list[float]
    token_entropies: list[float] | None = None
    finish_reason: str | None = None  # "stop" | "length" | None


class InferenceEngine(ABC):
    """What a dotted `[inference] engine` plugin's factory returns (retrain_ray/backends/plugin_engine.py)."""

    @abstractmethod
    def generate(self, prompt_ids_list: list[list[int]], num_samples: int, max_tokens: int, temperature: float,
                 top_p: float, compute_entropy: bool = False) -> list[list[SampleResult]]: ...

    @abstractmethod
    def reload_weights(self, adapter_path: str) -> None: ...

    @abstractmethod
    def shutdown(self) -> None: ...
