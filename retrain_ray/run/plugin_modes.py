"""Dotted-path plugin modes: how a loaded function becomes an advantage, transform, uncertainty or algorithm
spec of the registries in `algorithms/`, which hold only the built-ins and import no loader.

Importing this module installs the four wrappers (`accept_plugins`); the names it re-exports
(`resolve_modes`, `compute_group_advantages`, the registries) are the plugin-aware entry points: import them
from here wherever a configured mode may be a plugin path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from retrain_ray.algorithms.api import ResolvedModes, compute_group_advantages, resolve_modes
from retrain_ray.algorithms.pipeline import as_group_advantages
from retrain_ray.algorithms.recipes import ALGORITHMS, AlgorithmSpec
from retrain_ray.algorithms.registry import (
    ADVANTAGES,
    TRANSFORMS,
    UNCERTAINTIES,
    AdvantageSpec,
    TransformSpec,
    UncertaintySpec,
)
from retrain_ray.algorithms.types import AdvantageContext, AlgorithmContext, GroupAdvantages, UncertaintyInput
from retrain_ray.compat import provide_original_names
from retrain_ray.plugins.loader import (
    add_import_hook,
    is_dotted_path,
    load_callable,
    load_spec,
    plugin_flags,
    positional_arity,
)

__all__ = ["ADVANTAGES", "ALGORITHMS", "TRANSFORMS", "UNCERTAINTIES", "ResolvedModes", "compute_group_advantages",
           "resolve_modes"]


def _advantage_plugin(path: str) -> AdvantageSpec:
    # a plugin function is trusted to return the mode's type, as the original trusts it
    fn = cast("Callable[..., list[float]]", load_callable(path, "advantage_mode"))
    arity, first = positional_arity(fn)
    if first == "ctx":
        return AdvantageSpec(path, lambda r, p: fn(AdvantageContext(list(r), p)))
    if arity == 1:
        return AdvantageSpec(path, lambda r, p: fn(r))
    return AdvantageSpec(path, lambda r, p: fn(r, p))


def _transform_plugin(path: str) -> TransformSpec:
    return load_spec(path, "transform_mode", TransformSpec, "TransformContext",
                     lambda fn: TransformSpec(name=path, compute_context=fn, **plugin_flags(fn)))


def _uncertainty_plugin(path: str) -> UncertaintySpec:
    fn = cast("Callable[[UncertaintyInput], list[float]]", load_callable(path, "uncertainty_kind"))
    return UncertaintySpec(path, fn, needs_entropy=bool(getattr(fn, "needs_entropy", False)))


def _algorithm_plugin(path: str) -> AlgorithmSpec:
    def wrap(fn: Callable[..., object]) -> AlgorithmSpec:
        def compute(ctx: AlgorithmContext) -> GroupAdvantages:
            return as_group_advantages(fn(ctx), ctx.logprobs_G_T, f"algorithm_mode={path!r}")

        return AlgorithmSpec(path, compute, **plugin_flags(fn))

    return load_spec(path, "algorithm_mode", AlgorithmSpec, "AlgorithmContext", wrap)


add_import_hook(provide_original_names)  # a plugin mode written for the original imports `retrain`
ADVANTAGES.accept_plugins(is_dotted_path, _advantage_plugin)
TRANSFORMS.accept_plugins(is_dotted_path, _transform_plugin)
UNCERTAINTIES.accept_plugins(is_dotted_path, _uncertainty_plugin)
ALGORITHMS.accept_plugins(is_dotted_path, _algorithm_plugin)
