"""Contract of a training backend: one optimizer update per RL step, checkpoints, weight export.

The run loop calls only what is declared here, so the local PyTorch backend, the split
(inference + trainer actors) placement and the remote training API backend are interchangeable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol, runtime_checkable

from retrain_ray.engines.types import DescribeSampler, SamplingEngine, WeightUpdate
from retrain_ray.models.types import Tokenizer

if TYPE_CHECKING:
    from retrain_ray.backends.options import OptionsTable
    from retrain_ray.backends.request import PolicyFactory

ResumeMode = Literal["exact", "adapter_only", "unsupported"]
SFTLoss = Literal["cross_entropy", "importance_sampling"]


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend can carry; drives the preflight probe (spec 1.6)."""

    reports_sync_loss: bool = True
    preserves_token_advantages: bool = True
    supports_checkpoint_resume: bool = True
    resume_runtime_dependent: bool = False
    checkpoint_resume_mode: ResumeMode = "exact"


@dataclass(frozen=True)
class TrainBatch:
    """Datums of one RL step, aligned per token (prompt positions hold 0 advantage and 0 logprob).

    Rows are ragged: `tokens_D[i]`, `logprobs_D[i]` and `advantages_D[i]` have the same length.
    `prompt_lens_D[i]` is the number of prompt tokens at the start of row i.
    """

    tokens_D: list[list[int]]
    logprobs_D: list[list[float]]
    advantages_D: list[list[float]]
    prompt_lens_D: list[int]
    temperature: float = 1.0
    # ECHO (algorithms/echo.py): 1.0 marks a token the same forward pass also trains by cross-entropy
    echo_mask_D: list[list[float]] | None = None
    echo_weight: float = 0.0
    echo_entropy_floor: float = 0.0
    # the warm start's loss (`sft_step` only; `[training] sft_loss_fn`): "cross_entropy" is -mean log p of the
    # targets, "importance_sampling" the original's -mean exp(log p - 0), a ratio against zero logprobs
    sft_loss: SFTLoss = "cross_entropy"

    def __post_init__(self) -> None:
        n = len(self.tokens_D)
        if not (len(self.logprobs_D) == len(self.advantages_D) == len(self.prompt_lens_D) == n):
            raise ValueError("TrainBatch: tokens, logprobs, advantages and prompt_lens differ in length")
        if self.echo_mask_D is not None and [len(m) for m in self.echo_mask_D] != [len(t) for t in self.tokens_D]:
            raise ValueError("TrainBatch: echo masks are not aligned with the tokens")
        for i, (t, lp, a) in enumerate(zip(self.tokens_D, self.logprobs_D, self.advantages_D, strict=True)):
            if not (len(t) == len(lp) == len(a)):
                raise ValueError(f"TrainBatch: row {i} has mismatched token/logprob/advantage lengths")

    @property
    def num_tokens(self) -> int:
        return sum(len(t) for t in self.tokens_D)


@dataclass(frozen=True)
class TrainStepResult:
    """Loss and policy metrics of one update (names as spec section 8)."""

    loss: float
    metrics: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class TrainBackend(Protocol):
    capabilities: BackendCapabilities

    @property
    def version(self) -> int:
        """Number of optimizer updates applied so far."""
        ...

    def train_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult: ...

    def sft_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        """Supervised update: mean cross-entropy over tokens whose advantage is nonzero."""
        ...

    def export_weights(self) -> WeightUpdate:
        """The weights a sampler needs to match this trainer (CPU tensors, or empty if shared)."""
        ...

    def save_checkpoint(self, directory: Path) -> None:
        """Writes adapter (or full) weights and optimizer state into an existing directory."""
        ...

    def load_checkpoint(self, directory: Path) -> None: ...


class Policy(NamedTuple):
    """What a run samples and trains with, as the policy builders return it (immutable; unpacks as
    `engine, backend, tokenizer`)."""

    engine: SamplingEngine
    backend: TrainBackend
    tokenizer: Tokenizer  # a Hugging Face tokenizer, or the remote service's with the calls the run makes


@dataclass(frozen=True)
class BackendSpec:
    """A `[backend] backend`: where it trains and samples, and which options and loss settings it reads."""

    name: str
    description: str
    """One line for `retrain-ray backends`."""
    factory: PolicyFactory | None = None
    """Builds the whole policy (sampler and trainer); None when the engine's factory builds the sampler for
    the local trainer."""
    capabilities: BackendCapabilities | None = None
    """What it carries (preflight, `backends`); None for a plugin, whose hooks declare it."""
    describe: DescribeSampler | None = None
    """The sampler a run gets, in words (`explain`); None: the engine's description."""
    dependencies: tuple[tuple[str, str], ...] = ()
    """(module, install hint) of each package it needs."""
    trains_locally: bool = False
    """The built-in local trainer on the run's own model: it loads the model here, so prompt lengths, the
    model cache, squeeze, the optimizer-batch capture, a shared or plugin engine and the non-standard
    policy losses apply."""
    remote: bool = False
    """Trains outside the run's process (a service, or PRIME-RL's own trainer): it holds no local GPU."""
    honours_clip_eps: bool = False
    """Its loss reads `training.clip_eps` (the dual-clip PPO loss, algorithms/loss.py)."""
    samples_with_entropies: bool = True
    """Its sampler can return per-token entropies (the engine's or a plugin's declared capability decides)."""
    throttled_endpoint: str = ""
    """The shared service endpoint whose concurrency (`backend.max_concurrent`) the campaign throttles."""
    options: OptionsTable | None = None
    """How its `[backend.options]` are checked (backends/options.py); None: unchecked."""
    sft_importance_sampling: bool = True
    """Its warm start can train with `sft_loss_fn = "importance_sampling"` (PRIME-RL's: cross-entropy only)."""
    is_plugin: bool = False
