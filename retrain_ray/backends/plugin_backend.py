"""Training through a dotted-path plugin backend (`[backend] backend = "my_pkg.backends:make_backend"`).

The factory (called as `plugin_context.call_factory` says) returns either
* a `Policy(engine, backend, tokenizer)` (or a 3-tuple): the plugin samples and trains with its own
  objects, which must have the members of `SamplingEngine` and `TrainBackend`; or
* a training backend alone, built on `context.builtin_policy()`: it trains, and the built-in engine
  and tokenizer of that policy sample (so a plugin can wrap or extend the local backend); or
* the original's `TrainHelper`, which samples and trains (`original_helper.py` adapts it; its own
  `tokenizer` attribute, else the configured model's tokenizer, encodes prompts).

Whatever the object says about itself, the run's capability flags are the registry's
(`capabilities_for`: the plugin's hooks, else the conservative default), so `explain`, preflight,
placement and the metrics rows agree. `train_step` / `sft_step` may return a `TrainStepResult` or a
bare loss number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, cast

from retrain_ray.backends.original_helper import (
    HELPER_METHODS,
    HelperBackend,
    HelperSampler,
    TrainHelper,
    is_train_helper,
)
from retrain_ray.backends.plugin_context import (
    BACKEND_MEMBERS,
    ENGINE_MEMBERS,
    PluginContext,
    call_factory,
    missing_members,
)
from retrain_ray.backends.registry import capabilities_for
from retrain_ray.backends.types import BackendCapabilities, Policy, TrainBatch, TrainStepResult
from retrain_ray.engines.types import SamplingEngine, WeightUpdate
from retrain_ray.models.types import Tokenizer, hf_tokenizer

KIND = "[backend] backend"


def _as_result(value: object, where: str) -> TrainStepResult:
    if isinstance(value, TrainStepResult):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return TrainStepResult(loss=float(value))
    raise TypeError(f"{where} returned {type(value).__name__}; return a TrainStepResult or the loss as a float")


class PluginTrainBackend(Protocol):
    """A plugin's training backend: `TrainBackend`'s members (`BACKEND_MEMBERS`), a step may return the loss
    as a float instead of a `TrainStepResult`, and the capability flags come from the registry."""

    @property
    def version(self) -> int: ...

    def train_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> object: ...

    def sft_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> object: ...

    def export_weights(self) -> WeightUpdate: ...

    def save_checkpoint(self, directory: Path) -> None: ...

    def load_checkpoint(self, directory: Path) -> None: ...


class RegisteredBackend:
    """A plugin's training backend, reporting the registry's capability flags."""

    def __init__(self, inner: PluginTrainBackend, capabilities: BackendCapabilities, label: str) -> None:
        self.inner, self.capabilities, self.label = inner, capabilities, label

    @property
    def version(self) -> int:
        return int(self.inner.version)

    def train_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        return _as_result(self.inner.train_step(batch, lr=lr, weight_decay=weight_decay), f"{self.label}.train_step")

    def sft_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        return _as_result(self.inner.sft_step(batch, lr=lr, weight_decay=weight_decay), f"{self.label}.sft_step")

    def export_weights(self) -> WeightUpdate:
        return self.inner.export_weights()

    def save_checkpoint(self, directory: Path) -> None:
        self.inner.save_checkpoint(directory)

    def load_checkpoint(self, directory: Path) -> None:
        self.inner.load_checkpoint(directory)


def _wrong_type(path: str, made: object) -> ValueError:
    lacking = missing_members(made, BACKEND_MEMBERS)
    helper = [n for n in HELPER_METHODS if not callable(getattr(made, n, None))]
    return ValueError(
        f"{KIND}={path!r}: the factory returned {type(made).__name__}, which is neither a Policy(engine, backend, "
        f"tokenizer), nor a training backend (missing {lacking}), nor the original's TrainHelper (missing "
        f"{helper}). Return a Policy, or a backend with {list(BACKEND_MEMBERS)} built on context.builtin_policy() "
        "(docs/configuration.md, plugin backends)")


def _helper_tokenizer(helper: TrainHelper, context: PluginContext) -> Tokenizer:
    """The helper's own tokenizer, else the configured model's."""
    if getattr(helper, "tokenizer", None) is not None:
        return cast("Tokenizer", getattr(helper, "tokenizer"))  # noqa: B009 (the helper's attribute is optional)
    # deferred: loads transformers, which importing this module does not need
    from retrain_ray.models.loading import load_tokenizer

    m = context.config.model
    return hf_tokenizer(load_tokenizer(m.model, revision=m.revision, local_files_only=bool(m.local_files_only)))


def _unpack(path: str, made: object, context: PluginContext) -> tuple[object, object, object]:
    if isinstance(made, tuple):  # a Policy is a NamedTuple
        parts = cast("tuple[object, ...]", made)
        if len(parts) != 3:
            raise _wrong_type(path, parts)
        return parts[0], parts[1], parts[2]
    if missing_members(made, BACKEND_MEMBERS):
        if is_train_helper(made):
            return HelperSampler(made), HelperBackend(made), _helper_tokenizer(made, context)
        raise _wrong_type(path, made)
    built = context.built
    if built is None:
        raise ValueError(f"{KIND}={path!r}: the factory returned a training backend alone, but nothing samples "
                         "for it: build it on context.builtin_policy() (whose engine then samples), or return "
                         "Policy(engine, backend, tokenizer)")
    return built.engine, made, built.tokenizer


def build_plugin_backend_policy(context: PluginContext) -> Policy:
    """The policy of a run whose `[backend] backend` is a dotted path."""
    cfg = context.config
    path = cfg.backend.backend
    engine, backend, tokenizer = _unpack(path, call_factory(path, KIND, context), context)
    for what, obj, members in (("engine", engine, ENGINE_MEMBERS), ("backend", backend, BACKEND_MEMBERS)):
        lacking = missing_members(obj, members)
        if lacking:
            raise ValueError(f"{KIND}={path!r}: the factory's {what} ({type(obj).__name__}) lacks {lacking}")
    flags, _ = capabilities_for(path, cfg.backend.options)
    # the members are checked above; the tokenizer is the plugin's (or the model's)
    return Policy(cast("SamplingEngine", engine), RegisteredBackend(cast("PluginTrainBackend", backend), flags, path),
                  cast("Tokenizer", tokenizer))
