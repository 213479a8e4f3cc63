"""Plugins shipped to a campaign's trials, wherever Ray places them: which code a campaign's configs name.

A trial imports the config's dotted plugins (data source, reward, backend, engine, detector, advantage,
transform, algorithm, uncertainty kind, a `custom` reward's module) in its own process, on any node of
the cluster, where the driver's `./plugins` does not exist. The driver, after preflight imported them,
packs the code they came from into one zip (`build_bundle`; what is packed and how: plugins/bundle.py),
which travels to the trials inside their `TrialContext` (Tune puts it in Ray's object store once); each
trial unpacks it into a per-node cache keyed by its digest and puts that first on `sys.path`
(`plugins.bundle.activate`). `packing` is that choice of files; `build_bundle` zips it for the driver and
`shipment` describes it for `retrain-ray explain`, so explain shows exactly what a campaign ships.

Ray's runtime env (`py_modules`) is not used on purpose: Tune gives trials a runtime env of its own
(campaign/local_ray.py relies on it being empty so trials start in the warm worker processes), a job's
runtime env cannot be changed once the driver is connected (a user's `ray.init`, or the session Ray of
the tests), and a user's own runtime env is left exactly as they set it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from retrain_ray.checks.rules import PLUGIN_KEYS
from retrain_ray.plugins.bundle import MAX_BUNDLE_BYTES, Packing, PluginBundle, pack, plugin_unit, zip_packing
from retrain_ray.plugins.loader import LOADER, is_dotted_path, plugin_module, use_search_paths

if TYPE_CHECKING:
    from retrain_ray.config.sections_runtime import (
        DataSection,
        InferenceSection,
        PlanningSection,
        PluginsSection,
        RewardSection,
    )
    from retrain_ray.config.sections_training import AlgorithmSection, BackendSection, TrainingSection

__all__ = ["MAX_BUNDLE_BYTES", "PluginSections", "build_bundle", "bundle_units", "packing", "plugin_references",
           "shipment"]


class PluginSections(Protocol):
    """The sections of a config that name plugins (`PLUGIN_KEYS`'s, `[plugins] search_paths`, a `custom`
    reward's module): what the bundle reads of each run's config."""

    @property
    def algorithm(self) -> AlgorithmSection: ...
    @property
    def backend(self) -> BackendSection: ...
    @property
    def inference(self) -> InferenceSection: ...
    @property
    def reward(self) -> RewardSection: ...
    @property
    def data(self) -> DataSection: ...
    @property
    def planning(self) -> PlanningSection: ...
    @property
    def training(self) -> TrainingSection: ...
    @property
    def plugins(self) -> PluginsSection: ...


def plugin_references(cfg: PluginSections) -> list[tuple[str, str]]:
    """(kind, dotted path) of every plugin `cfg` names."""
    refs = [(k.label, getattr(getattr(cfg, k.section), k.key)) for k in PLUGIN_KEYS]
    return [(kind, value) for kind, value in refs if isinstance(value, str) and value and is_dotted_path(value)]


def _custom_reward_module(reward: RewardSection) -> tuple[ModuleType, str] | None:
    """The module of a `custom` reward and its search path prefix, when it imports here (as the run imports
    it: under `[plugins] search_paths`, then as given; preflight reports one that does not)."""
    if reward.type != "custom" or not reward.custom_module:
        return None
    name = reward.custom_module.partition(":")[0]
    try:
        return LOADER.find(name, name, "[reward] custom_module")
    except (ImportError, ValueError):
        return None


def bundle_units(configs: Iterable[PluginSections]) -> list[tuple[Path, PurePosixPath]]:
    """The folders and files to pack for the plugins these configs name (each imported as a run would)."""
    units: dict[tuple[Path, PurePosixPath], None] = {}
    for cfg in configs:
        use_search_paths(cfg.plugins.search_paths)
        modules = [plugin_module(path, kind) for kind, path in plugin_references(cfg)]
        custom = _custom_reward_module(cfg.reward)
        modules += [custom] if custom is not None else []
        for module, prefix in modules:
            unit = plugin_unit(module, prefix)
            if unit is not None:
                units[unit] = None
    return list(units)


def packing(configs: Iterable[PluginSections]) -> Packing | None:
    """What `build_bundle` would pack for these configs; None when they name no plugin (or only installed
    ones). Raises ValueError naming the folder when the files exceed `MAX_BUNDLE_BYTES`."""
    return pack(bundle_units(configs))


def build_bundle(configs: Iterable[PluginSections]) -> PluginBundle | None:
    """The bundle of the plugins these configs name; None when they name none (or only installed ones).
    Raises ValueError naming the folder when the files exceed `MAX_BUNDLE_BYTES`."""
    packed = packing(configs)
    return None if packed is None else zip_packing(packed)


def shipment(configs: Iterable[PluginSections]) -> dict[str, object]:
    """What a campaign of these configs would ship to its trials, for `retrain-ray explain`: status
    "shipped" (units, files, raw and zipped bytes), "none" (with why) or "refused" (the driver's error)."""
    configs = list(configs)
    try:
        packed = packing(configs)
    except ValueError as exc:
        return {"status": "refused", "error": str(exc)}
    if packed is None:
        named = any(plugin_references(c) or _custom_reward_module(c.reward) is not None for c in configs)
        return {"status": "none", "reason": "only installed plugins named (on every node already)" if named
                else "no plugin named"}
    bundle = zip_packing(packed)
    return {"status": "shipped",
            "units": [{"name": n, "source": s, "files": f, "bytes": b} for n, s, f, b in packed.units],
            "files": bundle.files, "raw_bytes": packed.raw_bytes, "zipped_bytes": len(bundle.data),
            "digest": bundle.digest[:16]}


