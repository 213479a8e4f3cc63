"""The one backend registry, and the facade of the engine registry: the spec of each built-in backend
(one line per backend folder), capability flags and option schemas of built-in and plugin backends.

`explain`, `backends`, the config checks, preflight and the backends' own classes read the flags from
here, so they cannot disagree. A backend's folder (`backends/<name>/__init__.py`) declares its `SPEC`:
placement, options table, capabilities, description and its policy factory, a real function that imports
the backend's heavy libraries only when called; an engine's spec is in engines/registry.py, re-exported
here (`engine_spec`). Code asks a spec instead of comparing names. To add a backend: a folder under
backends/ whose `__init__.py` holds its `SPEC`, and one line in `BACKEND_SPECS`. A dotted-path plugin backend may declare
its flags and `[backend.options]` schema with the original's hooks (seed 002), on the backend
callable/class or on its module:

* `retrain_backend_capabilities` / `RETRAIN_BACKEND_CAPABILITIES`: a `BackendCapabilities`, a dict of
  its fields, or a callable of the options returning either;
* `retrain_backend_option_schema` / `RETRAIN_BACKEND_OPTION_SCHEMA`: a mapping of option name to a
  spec (or a callable returning one);
* `retrain_backend_resources` / `RETRAIN_BACKEND_RESOURCES` (ours): `{"gpus": n}`, or a callable of the
  options returning it: the GPUs one run holds in its own process (0: it trains remotely and holds
  none). Without it a plugin run holds what `backend.devices` asks, all in its own process.

A plugin that declares nothing gets `PLUGIN_DEFAULT_CAPABILITIES`: it does not preserve token
advantages, so token-varying flows fail preflight instead of silently degrading.

A dotted-path plugin `[inference] engine` declares what it returns the same way (ours, in the style of
seed 002): `retrain_engine_capabilities` / `RETRAIN_ENGINE_CAPABILITIES` on the factory or its module,
an `EngineCapabilities`, a dict of its fields, or a callable of the `[inference]` section (a dict)
returning either. Undeclared: no per-token entropies (`uncertainty_kind = "shannon_entropy"` fails
preflight, naming the hook). A dotted `[backend] backend` samples through what its factory returns (its
engine, the built-in one it built on, or the original's `TrainHelper.sample_with_entropy`), so it
declares entropies with the same hook on its factory or module.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from retrain_ray.backends import local, prime_rl, tinker
from retrain_ray.backends.types import BackendCapabilities, BackendSpec, table_issues, table_notes
from retrain_ray.engines.registry import ENGINE_SPECS, PLUGIN_ENGINE, engine_spec
from retrain_ray.engines.types import EngineCapabilities, EngineSpec
from retrain_ray.models.lora import lora_targets
from retrain_ray.plugins.loader import is_dotted_path, load_object, use_search_paths

if TYPE_CHECKING:
    from retrain_ray.backends.request import PolicyFactory, PolicyRequest
    from retrain_ray.backends.types import Policy
    from retrain_ray.config.errors import ConfigIssue
    from retrain_ray.config.sections_runtime import InferenceSection, PluginsSection
    from retrain_ray.config.sections_training import BackendSection

__all__ = ["BACKEND_SPECS", "BUILTIN_CAPABILITIES", "ENGINE_SPECS", "PLUGIN_BACKEND", "PLUGIN_ENGINE", "BackendSpec",
           "EngineSpec", "backend_spec", "build_policy_for", "capabilities_for", "check_options", "describe_sampler",
           "engine_capabilities", "engine_spec", "lora_targets_of", "option_notes", "placed_devices", "plugin_gpus",
           "plugin_option_schema", "resolved_options", "run_devices", "schema_for"]

class SamplerSections(Protocol):
    """The sections `describe_sampler` reads of a run's config."""

    @property
    def inference(self) -> InferenceSection: ...
    @property
    def backend(self) -> BackendSection: ...


class PlacedSections(SamplerSections, Protocol):
    """The sections `placed_devices` reads of a run's config."""

    @property
    def plugins(self) -> PluginsSection: ...


BACKEND_SPECS: dict[str, BackendSpec] = {spec.name: spec for spec in (
    local.SPEC,
    tinker.SPEC,
    prime_rl.SPEC,
)}
"""Built-in backends."""

PLUGIN_BACKEND = BackendSpec(
    "plugin", description="a dotted path, e.g. my_pkg.backends:make_backend", is_plugin=True,
    describe=lambda inference, backend: f"built by the plugin backend {backend.backend} "
                                        f"(built-in choice: {inference.engine})")
"""A dotted `[backend] backend`: its factory builds the policy; its capabilities, options schema and GPUs
are what its hooks declare (below)."""


def backend_spec(name: str) -> BackendSpec:
    """The spec of a `[backend] backend` name (the plugin spec for a dotted path)."""
    return BACKEND_SPECS.get(name, PLUGIN_BACKEND)


def describe_sampler(cfg: SamplerSections) -> str:
    """Which sampler a run of `cfg` (a `RetrainConfig`, or anything with these sections) gets, in words:
    the backend's own, else its engine's."""
    describe = backend_spec(cfg.backend.backend).describe
    return (describe or engine_spec(cfg.inference.engine).describe)(cfg.inference, cfg.backend)


BUILTIN_CAPABILITIES: dict[str, BackendCapabilities] = {
    name: spec.capabilities for name, spec in BACKEND_SPECS.items() if spec.capabilities is not None}
"""The built-in backends' flags (`backends`; `capabilities_for` asks the spec)."""
PLUGIN_DEFAULT_CAPABILITIES = BackendCapabilities(preserves_token_advantages=False,
                                                  checkpoint_resume_mode="adapter_only")
PLUGIN_HOOKS = {
    "capabilities": ["retrain_backend_capabilities", "RETRAIN_BACKEND_CAPABILITIES"],
    "option_schema": ["retrain_backend_option_schema", "RETRAIN_BACKEND_OPTION_SCHEMA"],
    "resources": ["retrain_backend_resources", "RETRAIN_BACKEND_RESOURCES"],
}
ENGINE_HOOKS = {"capabilities": ["retrain_engine_capabilities", "RETRAIN_ENGINE_CAPABILITIES"]}
PLUGIN_ENGINE_DEFAULT_CAPABILITIES = EngineCapabilities(returns_token_entropies=False)
_Flags = TypeVar("_Flags", BackendCapabilities, EngineCapabilities)


@dataclass(frozen=True)
class RunDevices:
    """How a run is placed: the `backend.devices` it asks for, and whether every GPU goes to the run's own
    process (`in_process`) or, with two, to the built-in local backend's split sampler and trainer actors."""

    devices: str
    in_process: bool


def run_devices(backend: str, devices: str, options: Mapping[str, object] | None = None) -> RunDevices:
    """The placement of one run of `backend`; `explain` and the campaign plan both read it. A remote
    built-in backend holds no GPU; a plugin holds what its resources hook declares, else `devices`."""
    spec = backend_spec(backend)
    if spec.remote:
        return RunDevices("cpu", in_process=True)
    if not spec.is_plugin:
        return RunDevices(devices, in_process=False)
    gpus = plugin_gpus(backend, options)
    if gpus is None:
        return RunDevices(devices, in_process=True)
    return RunDevices(",".join(f"gpu:{i}" for i in range(gpus)) or "cpu", in_process=True)


def placed_devices(cfg: PlacedSections) -> RunDevices:
    """How one run of `cfg` (a `RetrainConfig`, or anything with these sections) is placed (the registry's
    `run_devices`); a dotted `[inference] engine` samples in the run's process, so its run is never split
    either."""
    use_search_paths(cfg.plugins.search_paths)
    placed = run_devices(cfg.backend.backend, cfg.backend.devices, cfg.backend.options)
    if is_dotted_path(cfg.inference.engine):
        return dataclasses.replace(placed, in_process=True)
    return placed


def plugin_gpus(backend: str, options: Mapping[str, object] | None = None) -> int | None:
    """The GPUs a plugin backend's resources hook declares for one run (None: it declares none)."""
    value = _hook(backend, PLUGIN_HOOKS["resources"])
    if callable(value) and not isinstance(value, Mapping):
        value = value(dict(options or {}))
    if value is None:
        return None
    declared: Mapping[str, object] = cast("Mapping[str, object]", value) if isinstance(value, Mapping) else {}
    gpus = declared.get("gpus")
    if set(declared) != {"gpus"} or type(gpus) is not int or gpus < 0:
        raise ValueError(f"[backend] backend {backend!r}: resources hook returned {value!r}; "
                         'return {"gpus": n} with n >= 0 GPUs per run (0: it holds no local GPU)')
    return gpus


def _hook(path: str, names: list[str], kind: str = "[backend] backend") -> object:
    """The first hook found on the plugin object, then on its module (None when it declares none)."""
    obj = load_object(path, kind)
    module = importlib.import_module(obj.__module__) if hasattr(obj, "__module__") else None
    for holder in (obj, module):
        for name in names:
            value = getattr(holder, name, None)
            if value is not None:
                return value
    return None


def _plugin_flags(path: str, names: list[str], arg: Mapping[str, object] | None, default: _Flags,
                  error: Callable[[object, set[str]], str], *, kind: str, only_bools: bool = False) -> tuple[_Flags, str]:
    """(flags, source) a plugin declares with a capability hook (`default`, "plugin/default" when none): an
    instance of `default`'s class, a dict of its fields over `default`, or a callable of `arg` returning
    either; anything else (or, with `only_bools`, a non-bool value) raises `error(value, fields)`."""
    cls = type(default)
    value: object = _hook(path, names, kind)
    if value is None:
        return default, "plugin/default"
    if callable(value) and _as_mapping(value) is None:  # a flags instance is not callable
        value = value(dict(arg or {}))
    if isinstance(value, cls):
        return value, "plugin/hook"
    fields = {f.name for f in dataclasses.fields(cls)}
    flags = _as_mapping(value)
    if flags is not None and set(flags) <= fields and (not only_bools or all(type(v) is bool for v in flags.values())):
        return dataclasses.replace(default, **flags), "plugin/hook"
    raise ValueError(error(value, fields))


def _as_mapping(value: object) -> Mapping[str, object] | None:
    """A plugin hook's dict (its keys are checked by the caller), else None."""
    return cast("Mapping[str, object]", value) if isinstance(value, Mapping) else None


def _backend_hook_error(path: str) -> Callable[[object, set[str]], str]:
    def error(value: object, fields: set[str]) -> str:
        if isinstance(value, Mapping):
            unknown = set(cast("Mapping[str, object]", value)) - fields
            return (f"[backend] backend {path!r}: capability hook has unknown keys {sorted(unknown)}; "
                    f"known: {sorted(fields)}")
        return (f"[backend] backend {path!r}: capability hook returned {type(value).__name__}; "
                "return a BackendCapabilities or a dict of its fields")
    return error


def capabilities_for(backend: str, options: Mapping[str, object] | None = None) -> tuple[BackendCapabilities, str]:
    """(flags, source) of a backend name: "builtin", "plugin/hook" or "plugin/default"."""
    declared = backend_spec(backend).capabilities
    if declared is not None:
        return declared, "builtin"
    return _plugin_flags(backend, PLUGIN_HOOKS["capabilities"], options, PLUGIN_DEFAULT_CAPABILITIES,
                         _backend_hook_error(backend), kind="[backend] backend")


def plugin_option_schema(backend: str) -> dict[str, object] | None:
    """The option schema a plugin backend declares (None: it declares none, options go unchecked)."""
    value = _hook(backend, PLUGIN_HOOKS["option_schema"])
    if callable(value) and not isinstance(value, Mapping):
        value = value()
    return dict(cast("Mapping[str, object]", value)) if value is not None else None


def engine_capabilities(engine: str, inference: Mapping[str, object] | None = None, *,
                        kind: str = "[inference] engine") -> tuple[EngineCapabilities, str]:
    """(flags, source) of an `[inference] engine`, or of a dotted `[backend] backend` (`kind`) that samples
    itself: "builtin", "plugin/hook" or "plugin/default". `inference`: the `[inference]` section, the
    argument of a callable hook."""
    if not is_dotted_path(engine):
        return EngineCapabilities(returns_token_entropies=engine_spec(engine).gives_entropies), "builtin"
    hooks = " / ".join(ENGINE_HOOKS["capabilities"])
    return _plugin_flags(engine, ENGINE_HOOKS["capabilities"], inference, PLUGIN_ENGINE_DEFAULT_CAPABILITIES,
                         lambda value, fields: f"{kind} {engine!r}: {hooks} gave {value!r}; give an "
                         f"EngineCapabilities or a dict of booleans with keys among {sorted(fields)}",
                         kind=kind, only_bools=True)


def schema_for(backend: str, options: dict[str, object]) -> dict[str, object] | None:
    """Known options and defaults of a built-in backend; None for plugins (unchecked)."""
    table = backend_spec(backend).options
    return table.schema(options) if table is not None else None


def check_options(backend: str, options: dict[str, object]) -> list[ConfigIssue]:
    """Issues for unknown, mistyped or refused `[backend.options]` keys of a built-in backend."""
    table = backend_spec(backend).options
    return table_issues(table, backend, options) if table is not None else []


def option_notes(backend: str, options: dict[str, object]) -> list[str]:
    """One line per valid `[backend.options]` key of a built-in backend that changes nothing here."""
    table = backend_spec(backend).options
    return table_notes(table, options) if table is not None else []


def resolved_options(backend: str, options: dict[str, object]) -> dict[str, object]:
    """The backend's options with schema defaults filled in."""
    return {**(schema_for(backend, options) or {}), **options}


def lora_targets_of(backend: str, options: Mapping[str, object]) -> tuple[str, ...]:
    """The LoRA target modules a run of `backend` trains: its `lora_target_modules` option when it trains
    locally (the option is the local trainer's), else the default ones."""
    if not backend_spec(backend).trains_locally:
        return lora_targets()
    return lora_targets(str(resolved_options(backend, dict(options))["lora_target_modules"]))


def build_policy_for(factory: PolicyFactory, request: PolicyRequest) -> Policy:
    """The policy a spec's factory builds; the factory imports its backend's heavy libraries now, so they
    load only for the runs that use it."""
    return factory(request)
