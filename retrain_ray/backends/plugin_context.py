"""How a plugin backend or inference engine factory is called, and what it may build on.

A dotted `[backend] backend` or `[inference] engine` names a factory. It is called as
`factory(config, context)`, or `factory(config)` when it takes one positional parameter:

* `config` answers the original's flat `TrainConfig` field names (`OriginalConfigView`), as every
  plugin factory's argument does;
* `context` is a `PluginContext`: this run's sectioned `RetrainConfig`, its torch device, run name and
  throttle, and `builtin_policy()`: the built-in local engine, backend and tokenizer for this config,
  built once, for a plugin that wraps or extends them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from retrain_ray.config.key_names import OriginalConfigView
from retrain_ray.plugins.loader import load_callable, positional_arity, use_search_paths

if TYPE_CHECKING:
    from retrain_ray.backends.types import Policy
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
