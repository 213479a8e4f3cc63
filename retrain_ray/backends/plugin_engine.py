"""Sampling through a dotted-path plugin engine (`[inference] engine = "my_pkg.engines:make_engine"`).

The factory (called as `plugin_context.call_factory` says) returns a sampling engine: an object with
`weights_version`, `generate(prompt_ids_P, num_samples, params) -> results[P][num_samples]` and
`load_weights(update)` (`retrain_ray.engines.types.SamplingEngine`). The built-in local backend trains:

* if the factory built on `context.builtin_policy()` (e.g. wrapping its PyTorch engine), that policy's
  backend trains the very model its engine samples, and a weight sync only moves the version;
* otherwise the run builds a local trainer of its own, whose `export_weights()` carries the LoRA (or
  full) tensors after every step: the engine's `load_weights` must install them.

Plugin engines run in the run's own process (one device: no split sampler/trainer actors) and are not
assumed to return per-token entropies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from retrain_ray.backends.plugin_context import ENGINE_MEMBERS, PluginContext, call_factory, missing_members
from retrain_ray.backends.types import Policy, TrainBackend

if TYPE_CHECKING:
    from retrain_ray.engines.types import SamplingEngine
    from retrain_ray.models.types import Tokenizer

KIND = "[inference] engine"


def build_plugin_engine_policy(context: PluginContext, build_trainer: Callable[[], tuple[TrainBackend, Tokenizer]]) -> Policy:
    """The policy of a run whose `[inference] engine` is a dotted path; `build_trainer` gives (backend,
    tokenizer) of a local trainer that exports its weights, used when the factory built no policy."""
    path = context.config.inference.engine
    engine = call_factory(path, KIND, context)
    lacking = missing_members(engine, ENGINE_MEMBERS)
    if lacking:
        raise ValueError(f"{KIND}={path!r}: the factory returned {type(engine).__name__}, which lacks {lacking}; "
                         "return a sampling engine (retrain_ray.engines.types.SamplingEngine), e.g. one wrapping "
                         "context.builtin_policy().engine (docs/configuration.md, plugin engines)")
    built = context.built
    if built is not None:
        return Policy(cast("SamplingEngine", engine), built.backend, built.tokenizer)  # its members checked above
    backend, tokenizer = build_trainer()
    return Policy(cast("SamplingEngine", engine), backend, tokenizer)
