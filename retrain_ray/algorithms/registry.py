"""Typed registries of advantage modes, token transforms and uncertainty kinds (spec 2.2-2.5).

Each mode is a small frozen spec resolved once by name (built-in, alias, or dotted-path plugin) and
cached; the pipeline then reads the spec's fields instead of branching on names. A registry holds the
built-ins; plugins are loaded above this package (run/plugin_modes.py installs, with `accept_plugins`, how
a plugin path is recognised and turned into a spec), so `algorithms/` imports nothing but itself. The delight family
(`delight`, `delight_sepa`, `hard_delight`, module `delight`) are context-style transforms.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from retrain_ray.algorithms import batch, credit, delight, uncertainty
from retrain_ray.algorithms.types import TransformContext, UncertaintyInput, param_number

EntropyTransform = Callable[[Sequence[float], Sequence[int], float], list[float]]
PostProcess = Callable[
    [list[list[float]], list[list[float]], Mapping[str, object]], tuple[list[list[float]], dict[str, float]]
]


@dataclass(frozen=True)
class AdvantageSpec:
    """An episode-level mode: rewards_G (+ params) -> one advantage per completion."""

    name: str
    compute: Callable[[list[float], Mapping[str, object]], list[float]]


@dataclass(frozen=True)
class UncertaintySpec:
    """A per-token uncertainty kind."""

    name: str
    compute: Callable[[UncertaintyInput], list[float]]
    needs_entropy: bool = False


@dataclass(frozen=True)
class TransformSpec:
    """A token-level transform, described by the table of spec 2.5."""

    name: str
    use_gtpo: bool = False
    entropy_transform: EntropyTransform | None = None
    apply_hicra: bool = False
    post_process: PostProcess | None = None
    compute_context: Callable[[TransformContext], object] | None = None
    needs_planning: bool = False
    uses_sepa_controller: bool = False

    @property
    def token_varying(self) -> bool:
        """Whether advantages may differ between tokens of one completion."""
        return self.use_gtpo or self.compute_context is not None


def mask_rho(params: Mapping[str, object]) -> float:
    """The entropy-mask keep fraction: `surprisal_mask_rho`, else `entropy_mask_rho`, else 0 (off)."""
    for key in ("surprisal_mask_rho", "entropy_mask_rho"):
        if params.get(key):
            return param_number(params[key])
    return 0.0


def surprisal_mask_post(
    advs_G_T: list[list[float]], raw_u_G_T: list[list[float]], params: Mapping[str, object]
) -> tuple[list[list[float]], dict[str, float]]:
    """`entropy_mask` post-process: a no-op (no metrics) while rho <= 0."""
    rho = mask_rho(params)
    if rho <= 0:
        return advs_G_T, {}
    return credit.entropy_mask(advs_G_T, raw_u_G_T, rho)


T = TypeVar("T")


def _no_plugins(name: str) -> bool:
    return False


class Registry(Generic[T]):
    """Name -> spec, with aliases, known-but-unsupported names, and cached plugins (once `accept_plugins`)."""

    def __init__(
        self,
        kind: str,
        builtins: Mapping[str, T],
        unsupported: Mapping[str, str] | None = None,
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self._builtins = dict(builtins)
        self._is_plugin: Callable[[str], bool] = _no_plugins
        self._plugin: Callable[[str], T] | None = None
        self._unsupported = dict(unsupported or {})
        self._aliases = dict(aliases or {})
        self._cache: dict[str, T] = {}

    def accept_plugins(self, is_plugin_path: Callable[[str], bool], plugin: Callable[[str], T]) -> None:
        """Resolve a name that `is_plugin_path` to `plugin(name)` (once; the result is cached)."""
        self._is_plugin, self._plugin = is_plugin_path, plugin

    def names(self) -> list[str]:
        return sorted(self._builtins)

    def resolve(self, name: str) -> T:
        key = self._aliases.get(name.strip().lower(), name.strip())
        if key in self._builtins:
            return self._builtins[key]
        if key in self._unsupported:
            raise ValueError(f"{self.kind}={name!r} is not supported by retrain-ray: {self._unsupported[key]}")
        if key in self._cache:
            return self._cache[key]
        if self._plugin is None or not self._is_plugin(key):
            raise ValueError(
                f"{self.kind}={name!r} is not known. Use one of {self.names()}, "
                "or a plugin path 'package.module:function'."
            )
        self._cache[key] = self._plugin(key)
        return self._cache[key]


ADVANTAGES: Registry[AdvantageSpec] = Registry(
    "advantage_mode",
    {
        "grpo": AdvantageSpec("grpo", batch.grpo),
        "maxrl": AdvantageSpec("maxrl", batch.maxrl),
        "reinforce_pp": AdvantageSpec("reinforce_pp", batch.reinforce_pp),
    },
)

TRANSFORMS: Registry[TransformSpec] = Registry(
    "transform_mode",
    {
        "none": TransformSpec("none"),
        "gtpo": TransformSpec("gtpo", use_gtpo=True),
        "entropy_mask": TransformSpec("entropy_mask", use_gtpo=True, post_process=surprisal_mask_post),
        "gtpo_hicra": TransformSpec("gtpo_hicra", use_gtpo=True, apply_hicra=True, needs_planning=True),
        "delight": TransformSpec("delight", compute_context=delight.delight),
        "delight_sepa": TransformSpec("delight_sepa", compute_context=delight.delight_sepa, uses_sepa_controller=True),
        "hard_delight": TransformSpec("hard_delight", compute_context=delight.hard_delight, uses_sepa_controller=True),
        **{
            name: TransformSpec(name, use_gtpo=True, entropy_transform=fn, needs_planning=True, uses_sepa_controller=True)
            for name, fn in (
                ("gtpo_sepa", credit.sepa_pool),
                ("gtpo_sepa_amp", credit.sepa_amp),
                ("gtpo_sepa_amp_c", credit.sepa_amp_c),
            )
        },
    },
)

UNCERTAINTIES: Registry[UncertaintySpec] = Registry(
    "uncertainty_kind",
    {
        name: UncertaintySpec(name, fn, needs_entropy=(name == "shannon_entropy"))
        for name, fn in uncertainty.BUILTINS.items()
    },
    unsupported=uncertainty.UNSUPPORTED,
    aliases=uncertainty.ALIASES,
)
