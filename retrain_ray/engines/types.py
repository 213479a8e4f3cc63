"""Contract of a sampling engine: what the run loop asks of whatever generates completions.

Everything here may cross a Ray actor boundary, so it is frozen, picklable and holds no tensors
except inside `WeightUpdate`, whose tensors are CPU tensors (cheap to put in the object store).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: the campaign driver imports this module and needs no torch
    import torch

    from retrain_ray.backends.request import PolicyRequest
    from retrain_ray.backends.types import Policy
    from retrain_ray.config.sections_runtime import InferenceSection
    from retrain_ray.config.sections_training import BackendSection

FinishReason = Literal["stop", "length"]


class HoldsSlots(Protocol):
    """Anything with a `hold()` context manager around one request: `ThrottleClient`, `NullThrottle`, a
    test counter."""

    def hold(self) -> AbstractContextManager[object]: ...


@dataclass(frozen=True)
class SampleResult:
    """One sampled completion (prompt excluded).

    `logprobs[t]` is the log-probability of `token_ids[t]` under the *same* tempered (and top-p
    renormalised) distribution it was drawn from, which is also what the trainer scores, so the
    first on-policy update has an importance ratio of exactly 1. `entropies[t]` is the Shannon
    entropy of the tempered, unfiltered distribution at step t, when asked for.
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason
    entropies: tuple[float, ...] | None = None


@dataclass(frozen=True)
class EngineCapabilities:
    """What a sampling engine returns besides tokens and logprobs. A plugin engine declares it with
    `retrain_engine_capabilities` / `RETRAIN_ENGINE_CAPABILITIES` (backends/registry.py); the default is
    conservative: no per-token entropies, so `uncertainty_kind = "shannon_entropy"` fails preflight."""

    returns_token_entropies: bool = False  # fills `SampleResult.entropies` when `params.compute_entropy`


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    compute_entropy: bool = False


@dataclass(frozen=True)
class WeightUpdate:
    """Trainable weights after an optimizer step, tagged with a version (the optimizer step count).

    `tensors` maps parameter names (as in the trainer's `state_dict`, adapter-only for LoRA) to CPU
    tensors. An empty mapping means "weights are shared in memory, only the version moved".
    """

    version: int
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


class WeightsVersion:
    """`weights_version` of an engine that keeps it itself: the version of the last update it loaded."""

    _version: int = 0

    @property
    def weights_version(self) -> int:
        return self._version


@runtime_checkable
class SamplingEngine(Protocol):
    """Generates `num_samples` completions for each prompt, in one batch where it can."""

    @property
    def weights_version(self) -> int: ...

    def generate(
        self, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams
    ) -> list[list[SampleResult]]:
        """Returns results[P][num_samples]."""
        ...

    def load_weights(self, update: WeightUpdate) -> None:
        """Installs the trainer's weights; afterwards `weights_version == update.version`."""
        ...


DescribeSampler = Callable[["InferenceSection", "BackendSection"], str]
"""The sampler a run gets, in words (`explain`), from its `[inference]` and `[backend]` sections."""


@dataclass(frozen=True)
class EngineSpec:
    """An `[inference] engine`: how it samples and what the rest of the system may expect of it."""

    name: str
    is_http: bool
    """A client of an OpenAI-compatible server at `[inference] url` (engines/openai/)."""
    factory: Callable[[PolicyRequest], Policy] | None
    """Builds the run's policy with this engine and the local trainer (None: a plugin's own factory)."""
    describe: DescribeSampler
    """The sampler a run gets, in words (`explain`)."""
    shared_server: bool = False
    """A server the campaign's runs share: its requests go through the campaign's inference throttle, and
    preflight checks that it answers."""
    gives_entropies: bool = False
    """Returns per-token entropies (under the built-in local backend)."""
    adapter_folder_only: bool = False
    """Loads the trainer's weights as a LoRA adapter folder only (needs `finetune = "lora"`)."""
    lora_only_reason: str = ""
    """Why full fine-tuning is refused with this engine (said with the refusal)."""
    url_required_reason: str = ""
    """Non-empty: `[inference] url` must be set, for this reason (no default server to call)."""
    embeds_vllm: bool = False
    """vLLM inside the run: it reads the `[inference]` engine-only keys, can be shared by a campaign's LoRA
    runs, and on split placement runs on the inference actor's GPU fed with WeightUpdates."""
    is_plugin: bool = False
