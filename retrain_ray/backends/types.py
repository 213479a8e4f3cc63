"""Contract of a training backend: one optimizer update per RL step, checkpoints, weight export.

The run loop calls only what is declared here, so the local PyTorch backend, the split
(inference + trainer actors) placement and the remote training API backend are interchangeable.

How a built-in backend's `[backend.options]` are checked and read, one way for every backend: each
backend's spec holds its `OptionsTable` (its folder's options.py), and `table_issues` checks a table's
keys, types and values (unknown keys are an error with a did-you-mean hint). A dotted-path plugin
backend gets its options unchecked.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol, TypeVar, runtime_checkable

from retrain_ray.engines.types import DescribeSampler, SamplingEngine, WeightUpdate
from retrain_ray.models import Tokenizer

if TYPE_CHECKING:
    from retrain_ray.backends.request import PolicyFactory
    from retrain_ray.config.errors import ConfigIssue


ResumeMode = Literal["exact", "adapter_only", "unsupported"]
SFTLoss = Literal["cross_entropy", "importance_sampling"]


@dataclass(frozen=True)
class BackendCapabilities:
    """What a backend can carry; drives the preflight probe (spec 1.6).

    `checkpoint_resume_mode`: "exact" when a checkpoint restores the trained weights and the optimizer's
    moments as they were; "adapter_only" when it restores the run's counters (and at most the weights),
    not the optimizer; "unsupported" when it cannot be resumed. `resume_runtime_dependent`: part of what
    a resume restores lives outside the checkpoint directory (a service's store, another trainer's own
    checkpoints), so it resumes only while that is still there. tests/backends/test_capabilities_honest.py
    checks each built-in backend's flags against what its checkpoint holds.
    """

    reports_sync_loss: bool = True
    preserves_token_advantages: bool = True
    supports_checkpoint_resume: bool = True
    resume_runtime_dependent: bool = False
    checkpoint_resume_mode: ResumeMode = "exact"


def resume_caveat(caps: BackendCapabilities) -> str:
    """What a resume from this backend's checkpoint does not restore, in one sentence ("" when exact and
    self-contained): the warning a resumed run logs."""
    parts: list[str] = []
    if caps.checkpoint_resume_mode == "adapter_only":
        parts.append("this backend's checkpoint restores the run's counters and at most the weights, not the "
                     "optimizer state (checkpoint_resume_mode = adapter_only)")
    elif caps.checkpoint_resume_mode == "unsupported":
        parts.append("this backend's checkpoints cannot be resumed (checkpoint_resume_mode = unsupported)")
    if caps.resume_runtime_dependent:
        parts.append("part of the state lives outside the checkpoint directory (resume_runtime_dependent): "
                     "check that the service or trainer still holds it")
    return "; ".join(parts)


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
    wait_s: float | None = None
    """Seconds the call waited for a shared step to start before its update (a shared trainer's batched step);
    None where the backend updates at once. Back pressure counts only the rest as time at the trainer."""


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
    """How its `[backend.options]` are checked (backends/types.py); None: unchecked."""
    sft_importance_sampling: bool = True
    """Its warm start can train with `sft_loss_fn = "importance_sampling"` (PRIME-RL's: cross-entropy only)."""
    is_plugin: bool = False


T = TypeVar("T")


def parse_options(cls: type[T], options: Mapping[str, object] | None, backend: str) -> T:
    """`options` -> `cls(**options)`; a key `cls` has no field for is an error with a did-you-mean hint."""
    options = dict(options or {})
    known = [f.name for f in fields(cls)]  # type: ignore[arg-type]  # cls is a dataclass
    for key in options:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
            raise ValueError(f"[backend.options] {key!r} is not an option of the {backend} backend; {hint}")
    return cls(**options)


def issue(location: str, value: object, message: str, hint: str = "") -> ConfigIssue:
    """One `[backend.options]` problem, as the config checks report it."""
    # deferred: config/ imports this registry while it loads (its checks ask the specs), so the registry
    # reaches config's errors module only when it reports an issue
    from retrain_ray.config.errors import ConfigIssue

    return ConfigIssue(location, value, message, hint)


def parsed_issues(parse: Callable[[dict[str, object]], object], hint: str) -> Callable[[dict[str, object]], list[ConfigIssue]]:
    """A table's `value_issues`: the backend's own parser of all its options, its error as one issue."""
    def issues(options: dict[str, object]) -> list[ConfigIssue]:
        try:
            parse(options)
        except (ValueError, TypeError) as exc:
            return [issue("backend.options", options, str(exc), hint)]
        return []
    return issues


@dataclass(frozen=True)
class OptionsTable:
    """How one built-in backend's `[backend.options]` are checked (its spec's `options` names it)."""

    schema: Callable[[dict[str, object]], dict[str, object]]
    """Known keys and their defaults, given the options set."""
    bool_or_auto: frozenset[str] = frozenset()
    """Keys that take true, false or "auto"."""
    key_issues: Callable[[str, object], list[ConfigIssue]] | None = None
    """A well-typed key's value check."""
    value_issues: Callable[[dict[str, object]], list[ConfigIssue]] | None = None
    """The backend's own parser of all its options, once every key is known and well typed."""
    key_notes: Callable[[str, object], str | None] | None = None
    """A one-line note for a valid key that changes nothing here (shown with the config's warnings)."""


def _type_ok(value: object, default: object, bool_or_auto: bool = False) -> bool:
    if bool_or_auto:
        return isinstance(value, bool) or value == "auto"
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, type(default))


def _close_match(key: str, schema: dict[str, object]) -> str:
    # deferred: see `issue`
    from retrain_ray.config.errors import did_you_mean

    return did_you_mean(key, schema)


def table_notes(table: OptionsTable, options: dict[str, object]) -> list[str]:
    """Notes for valid `[backend.options]` keys that change nothing here (the original's no-op options)."""
    if table.key_notes is None:
        return []
    notes = [table.key_notes(key, value) for key, value in options.items()]
    return [note for note in notes if note]


def table_issues(table: OptionsTable, backend: str, options: dict[str, object]) -> list[ConfigIssue]:
    """Issues for unknown, mistyped or refused `[backend.options]` keys of a built-in backend."""
    schema = table.schema(options)
    issues: list[ConfigIssue] = []
    for key, value in options.items():
        loc = f"backend.options.{key}"
        if key not in schema:
            if not schema:
                hint = f"remove it: the {backend} backend takes no [backend.options]"
            else:
                hint = _close_match(key, schema) or f"known options: {', '.join(sorted(schema))}"
            issues.append(issue(loc, value, f"unknown option for backend {backend!r}", hint))
        elif not _type_ok(value, schema[key], key in table.bool_or_auto):
            kind = "bool or \"auto\"" if key in table.bool_or_auto else type(schema[key]).__name__
            issues.append(issue(loc, value, f"expected a {kind}", f"default is {schema[key]!r}"))
        elif table.key_issues is not None:
            issues += table.key_issues(key, value)
    if table.value_issues is not None and options and not issues:
        issues += table.value_issues(options)
    return issues


