"""What `import retrain` gives a plugin written for the original when the original is not installed
(retrain_ray/compat/__init__.py's finder): the names of its plugin-facing modules `data`, `rewards`,
`backends`, `inference_engine.base`, `config` and `type_defs`, listed per module in `MODULES`, with the
original's fields and methods (spec sections 1.6, 1.9 and 9).

A factory receives retrain-ray's `OriginalConfigView`, which answers the original's flat field names
(`config.seed`, `config.max_examples`, ...) from the sectioned config: `TrainConfig` names that class. A data
source's `load()` gives examples whose `prompt` and `reference` retrain-ray reads (run/plugins.py), so this
`Example`, the original's own, or any object with those attributes is accepted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from retrain_ray.config.key_names import OriginalConfigView
from retrain_ray.rewards.boxed import extract_boxed

# --- retrain.type_defs: the type aliases that plugin signatures use -------------------------------------
JSONObject = dict[str, Any]
PromptLike = str | list[dict[str, Any]]
"""A prompt: plain text, or chat messages ({"role": ..., "content": ...})."""
ExampleInfoLike = dict[str, Any] | None
SampleBatch = list[list[tuple[list[int], list[float]]]]
"""Per prompt, per sample: (completion token ids, their log-probabilities)."""
EnrichedSampleBatch = list[list[tuple[list[int], list[float], list[float] | None]]]
"""As SampleBatch, with per-token entropies (None when the backend has none)."""

# --- retrain.config ----------------------------------------------------------------------------------------
TrainConfig = OriginalConfigView


# --- retrain.data ------------------------------------------------------------------------------------------
@dataclass
class Example:
    """One training example: the prompt and the reference answer its completions are scored against."""

    prompt: PromptLike
    reference: str
    task: str = "default"
    info: ExampleInfoLike = None
    example_id: int | str = -1


@runtime_checkable
class DataSource(Protocol):
    """What a `[data] source` plugin's factory returns."""

    def load(self) -> list[Example]: ...


# --- retrain.rewards ---------------------------------------------------------------------------------------
@runtime_checkable
class RewardFunction(Protocol):
    """What a `[reward] type` plugin's factory returns."""

    def score(self, response: str, reference: str) -> float: ...


class BoxedMathReward:
    """The original's default reward: 1.0 when the last \\boxed{} answer equals the reference (stripped)."""

    def score(self, response: str, reference: str) -> float:
        return 1.0 if extract_boxed(response).strip() == reference.strip() else 0.0


# --- retrain.backends (spec section 1.6) -------------------------------------------------------------------
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


# --- retrain.inference_engine.base (spec section 1.9) ------------------------------------------------------
@dataclass
class SampleResult:
    """One completion: its token ids (EOS included if hit), their log-probabilities, optional entropies."""

    token_ids: list[int]
    logprobs: list[float]
    token_entropies: list[float] | None = None
    finish_reason: str | None = None  # "stop" | "length" | None


class InferenceEngine(ABC):
    """What a dotted `[inference] engine` plugin's factory returns (retrain_ray/backends/plugins.py)."""

    @abstractmethod
    def generate(self, prompt_ids_list: list[list[int]], num_samples: int, max_tokens: int, temperature: float,
                 top_p: float, compute_entropy: bool = False) -> list[list[SampleResult]]: ...

    @abstractmethod
    def reload_weights(self, adapter_path: str) -> None: ...

    @abstractmethod
    def shutdown(self) -> None: ...


_ENGINE = ("InferenceEngine", "SampleResult")
MODULES: dict[str, tuple[str, ...]] = {
    "": (),
    "type_defs": ("JSONObject", "PromptLike", "ExampleInfoLike", "SampleBatch", "EnrichedSampleBatch"),
    "config": ("TrainConfig",),
    "data": ("DataSource", "Example"),
    "rewards": ("BoxedMathReward", "RewardFunction", "extract_boxed"),
    "backends": ("TrainHelper",),
    "inference_engine": _ENGINE,
    "inference_engine.base": _ENGINE,
}
"""The original's module (`retrain.<key>`, "" for `retrain`) -> the names it holds here."""
PACKAGES = frozenset({"", "inference_engine"})
