"""How a plugin backend or inference engine factory is called, and what it may build on.

A dotted `[backend] backend` or `[inference] engine` names a factory. It is called as
`factory(config, context)`, or `factory(config)` when it takes one positional parameter:

* `config` answers the original's flat `TrainConfig` field names (`OriginalConfigView`), as every
  plugin factory's argument does;
* `context` is a `PluginContext`: this run's sectioned `RetrainConfig`, its torch device, run name and
  throttle, and `builtin_policy()`: the built-in local engine, backend and tokenizer for this config,
  built once, for a plugin that wraps or extends them.

A plugin engine's factory (`[inference] engine = "my_pkg.engines:make_engine"`) returns a sampling engine:
an object with `weights_version`, `generate(prompt_ids_P, num_samples, params) -> results[P][num_samples]`
and `load_weights(update)` (`retrain_ray.engines.types.SamplingEngine`). The built-in local backend trains:

* if the factory built on `context.builtin_policy()` (e.g. wrapping its PyTorch engine), that policy's
  backend trains the very model its engine samples, and a weight sync only moves the version;
* otherwise the run builds a local trainer of its own, whose `export_weights()` carries the LoRA (or
  full) tensors after every step: the engine's `load_weights` must install them.

Plugin engines run in the run's own process (one device: no split sampler/trainer actors) and are not
assumed to return per-token entropies.

A plugin backend's factory (`[backend] backend = "my_pkg.backends:make_backend"`) returns either
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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from retrain_ray.backends.original_helper import (
    HELPER_METHODS,
    HelperBackend,
    HelperSampler,
    TrainHelper,
    is_train_helper,
)
from retrain_ray.backends.registry import capabilities_for
from retrain_ray.backends.types import BackendCapabilities, Policy, TrainBackend, TrainBatch, TrainStepResult
from retrain_ray.config.key_names import OriginalConfigView
from retrain_ray.engines.types import SamplingEngine, WeightUpdate
from retrain_ray.models import Tokenizer, hf_tokenizer
from retrain_ray.plugins.loader import load_callable, positional_arity, use_search_paths

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.throttle.types import Throttle

BACKEND_MEMBERS = ("version", "train_step", "sft_step", "export_weights", "save_checkpoint", "load_checkpoint")
"""What a plugin's training backend must have (`retrain_ray.backends.types.TrainBackend`, capabilities aside:
those come from the registry)."""
ENGINE_MEMBERS = ("weights_version", "generate", "load_weights")
"""What a plugin's sampling engine must have (`retrain_ray.engines.types.SamplingEngine`)."""


@dataclass
class PluginContext:
    """The second argument of a plugin backend or engine factory."""

    config: RetrainConfig
    device: str  # the torch device this run trains on ("cpu", "cuda", "cuda:1")
    run_name: str
    throttle: Throttle | None  # remote calls take one slot each (`retrain_ray.throttle.types.Throttle`), or None
    build_builtin: Callable[[], Policy] = field(repr=False)
    _builtin: Policy | None = field(default=None, repr=False)

    def builtin_policy(self) -> Policy:
        """(engine, backend, tokenizer) of the built-in local backend for this config, with its default
        `[backend.options]` (a plugin backend's options are its own); one model shared by engine and
        backend, built on the first call."""
        if self._builtin is None:
            self._builtin = self.build_builtin()
        return self._builtin

    @property
    def built(self) -> Policy | None:
        """The built-in policy if the factory asked for it, else None."""
        return self._builtin


def call_factory(path: str, kind: str, context: PluginContext) -> object:
    """`factory(config, context)` or `factory(config)` of the dotted `path` (under `[plugins] search_paths`)."""
    use_search_paths(context.config.plugins.search_paths)
    factory = load_callable(path, kind)
    view = OriginalConfigView(context.config)
    try:
        return factory(view, context) if positional_arity(factory)[0] >= 2 else factory(view)
    except Exception as exc:  # a plugin may fail in any way: say which one, keep the cause
        raise ValueError(f"{kind}={path!r}: the factory raised {type(exc).__name__}: {exc}") from exc


def missing_members(obj: object, names: Sequence[str]) -> list[str]:
    """The names of `names` that `obj` lacks (a `*version` is an attribute or property, the rest are methods)."""
    return [n for n in names
            if not (hasattr(obj, n) if n.endswith("version") else callable(getattr(obj, n, None)))]


ENGINE_KIND = "[inference] engine"


def build_plugin_engine_policy(context: PluginContext, build_trainer: Callable[[], tuple[TrainBackend, Tokenizer]]) -> Policy:
    """The policy of a run whose `[inference] engine` is a dotted path; `build_trainer` gives (backend,
    tokenizer) of a local trainer that exports its weights, used when the factory built no policy."""
    path = context.config.inference.engine
    engine = call_factory(path, ENGINE_KIND, context)
    lacking = missing_members(engine, ENGINE_MEMBERS)
    if lacking:
        raise ValueError(f"{ENGINE_KIND}={path!r}: the factory returned {type(engine).__name__}, which lacks {lacking}; "
                         "return a sampling engine (retrain_ray.engines.types.SamplingEngine), e.g. one wrapping "
                         "context.builtin_policy().engine (docs/configuration.md, plugin engines)")
    built = context.built
    if built is not None:
        return Policy(cast("SamplingEngine", engine), built.backend, built.tokenizer)  # its members checked above
    backend, tokenizer = build_trainer()
    return Policy(cast("SamplingEngine", engine), backend, tokenizer)


BACKEND_KIND = "[backend] backend"


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
        f"{BACKEND_KIND}={path!r}: the factory returned {type(made).__name__}, which is neither a Policy(engine, backend, "
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
        raise ValueError(f"{BACKEND_KIND}={path!r}: the factory returned a training backend alone, but nothing samples "
                         "for it: build it on context.builtin_policy() (whose engine then samples), or return "
                         "Policy(engine, backend, tokenizer)")
    return built.engine, made, built.tokenizer


def build_plugin_backend_policy(context: PluginContext) -> Policy:
    """The policy of a run whose `[backend] backend` is a dotted path."""
    cfg = context.config
    path = cfg.backend.backend
    engine, backend, tokenizer = _unpack(path, call_factory(path, BACKEND_KIND, context), context)
    for what, obj, members in (("engine", engine, ENGINE_MEMBERS), ("backend", backend, BACKEND_MEMBERS)):
        lacking = missing_members(obj, members)
        if lacking:
            raise ValueError(f"{BACKEND_KIND}={path!r}: the factory's {what} ({type(obj).__name__}) lacks {lacking}")
    flags, _ = capabilities_for(path, cfg.backend.options)
    # the members are checked above; the tokenizer is the plugin's (or the model's)
    return Policy(cast("SamplingEngine", engine), RegisteredBackend(cast("PluginTrainBackend", backend), flags, path),
                  cast("Tokenizer", tokenizer))
