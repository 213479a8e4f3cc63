"""The one backend registry: the spec of each built-in engine and backend, capability flags and option
schemas of built-in and plugin backends, and the factory that builds a run's policy.

`explain`, `backends`, preflight and the backends' own classes read the flags from here, so they
cannot disagree. The specs (`engine_spec`, `backend_spec`: HTTP or in-process, entropies, placement,
options table, factory, description) are declared in config/components.py, because config validation
reads them and config/ sits below this package; code asks a spec instead of comparing names, and
`build_policy_for` imports a spec's factory when a run needs it. A dotted-path plugin backend may declare its flags and `[backend.options]` schema with
the original's hooks (seed 002), on the backend callable/class or on its module:

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
from typing import TYPE_CHECKING, TypeVar, cast

from retrain_ray.backends.types import BackendCapabilities
from retrain_ray.config.components import BACKEND_SPECS, backend_spec, engine_spec
from retrain_ray.engines.types import EngineCapabilities
from retrain_ray.plugins.loader import is_dotted_path, load_object, use_search_paths

if TYPE_CHECKING:
    from retrain_ray.backends.factories import PolicyRequest
    from retrain_ray.backends.types import Policy
    from retrain_ray.config.schema import RetrainConfig

BUILTIN_CAPABILITIES: dict[str, BackendCapabilities] = {
    "local": BackendCapabilities(reports_sync_loss=True, preserves_token_advantages=True,
                                 supports_checkpoint_resume=True, resume_runtime_dependent=False,
                                 checkpoint_resume_mode="exact"),
    "tinker": BackendCapabilities(reports_sync_loss=True, preserves_token_advantages=True,
                                  supports_checkpoint_resume=True, resume_runtime_dependent=True,
                                  checkpoint_resume_mode="exact"),
    # seed 002's table: PRIME-RL's trainer optimizes asynchronously (a placeholder loss) on one advantage
    # per sample; its own checkpoints hold the weights and optimizer, ours the step count
    "prime_rl": BackendCapabilities(reports_sync_loss=False, preserves_token_advantages=False,
                                    supports_checkpoint_resume=True, resume_runtime_dependent=False,
                                    checkpoint_resume_mode="exact"),
}
REMOTE_BACKENDS = frozenset(name for name, spec in BACKEND_SPECS.items() if spec.remote)
"""Backends that train outside the run's process (a service, or PRIME-RL's own trainer): a run of one holds
no local GPU, whatever `backend.devices` says."""
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


def placed_devices(cfg: RetrainConfig) -> RunDevices:
    """How one run of `cfg` is placed (the registry's `run_devices`); a dotted `[inference] engine`
    samples in the run's process, so its run is never split either."""
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
    if backend in BUILTIN_CAPABILITIES:
        return BUILTIN_CAPABILITIES[backend], "builtin"
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


def build_policy_for(factory: str, request: PolicyRequest) -> Policy:
    """The policy a spec's factory (`module:function`, config/components.py) builds, imported now: a
    backend's heavy libraries load only for the runs that use it."""
    module, _, name = factory.partition(":")
    build: Callable[[PolicyRequest], Policy] = getattr(importlib.import_module(module), name)
    return build(request)
