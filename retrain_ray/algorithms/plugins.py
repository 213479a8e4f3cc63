"""Dotted-path plugins: `package.module:attribute` or `package.module.attribute`.

A mode name that is not a built-in and contains a dot or colon is imported once (the registry caches
the result). Import problems become a `ValueError` that names the path and how to fix it.
As the original, `[plugins] search_paths` (default ["plugins"]) are package prefixes tried first:
`my_mod.fn` is looked up as `plugins.my_mod.fn`, then `my_mod.fn`; the working directory is put on
`sys.path` so a ./plugins folder imports. `use_search_paths` sets them for the process.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypedDict, TypeVar

from retrain_ray.compat import provide_original_names

S = TypeVar("S")


def is_dotted_path(name: str) -> bool:
    return ":" in name or "." in name


def _split(path: str) -> tuple[str, str]:
    if ":" in path:
        module, _, attr = path.partition(":")
    else:
        module, _, attr = path.rpartition(".")
    if not module or not attr:
        raise ValueError(f"plugin path {path!r} is malformed; write it as 'package.module:function'.")
    return module, attr


_search_paths: tuple[str, ...] = ("plugins",)


def use_search_paths(paths: list[str] | tuple[str, ...]) -> None:
    """Set the package prefixes tried before a plugin's own module path (`[plugins] search_paths`)."""
    global _search_paths
    _search_paths = tuple(dict.fromkeys(p.strip().strip(".").replace("/", ".") for p in paths if p.strip()))


_roots: list[str] = []


def use_plugin_root(directory: str) -> None:
    """Also look for plugin modules under `directory`: a campaign's trials run in another working
    directory than the driver whose ./plugins the config means."""
    if directory and directory not in _roots:
        _roots.append(directory)


def _import(module_name: str, path: str, kind: str) -> tuple[ModuleType, str]:
    """The module and the search path prefix it was found under ("": as given)."""
    provide_original_names()  # a plugin written for the original imports `retrain.data`, ...
    for root in (os.getcwd(), *_roots):  # ./plugins/<module>.py imports as plugins.<module>
        if root not in sys.path:
            sys.path.append(root)
    tries = [*((prefix, f"{prefix}.{module_name}") for prefix in _search_paths), ("", module_name)]
    candidates = [candidate for _, candidate in tries]
    errors: list[str] = []
    for prefix, candidate in tries:
        try:
            return importlib.import_module(candidate), prefix
        except ModuleNotFoundError as exc:
            if exc.name is None or not candidate.startswith(exc.name):
                raise ValueError(f"{kind}={path!r}: importing {candidate!r} failed: {exc}") from exc
            errors.append(f"{candidate} ({exc})")
    raise ValueError(
        f"{kind}={path!r}: cannot import any of {candidates}. Put the module under a [plugins] search_paths "
        "folder (default ./plugins) or make it importable (installed, or on PYTHONPATH)."
    )


def plugin_module(path: str, kind: str) -> tuple[ModuleType, str]:
    """The module a dotted `path` imports from, and the `[plugins] search_paths` prefix it was found
    under ("" when found as given)."""
    return _import(_split(path)[0], path, kind)


def load_object(path: str, kind: str) -> Any:
    """Import the object named by `path`; `kind` (e.g. 'transform_mode') is used in error messages."""
    module_name, attr = _split(path)
    module, _ = _import(module_name, path, kind)
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ValueError(f"{kind}={path!r}: module {module_name!r} has no attribute {attr!r}.") from exc


def load_callable(path: str, kind: str) -> Callable[..., Any]:
    obj = load_object(path, kind)
    if not callable(obj):
        raise ValueError(f"{kind}={path!r} is not callable (got {type(obj).__name__}).")
    return obj


def load_spec(path: str, kind: str, spec_type: type[S], context: str, wrap: Callable[[Callable[..., Any]], S]) -> S:
    """The `spec_type` instance `path` names, or `wrap(fn)` for the function of a `context` it names."""
    obj = load_object(path, kind)
    if isinstance(obj, spec_type):
        return obj
    if not callable(obj):
        raise ValueError(f"{kind}={path!r}: expected an instance of {spec_type.__name__} or a function of the "
                         f"{context}, got {type(obj).__name__}.")
    return wrap(obj)


class PluginFlags(TypedDict):
    needs_planning: bool
    uses_sepa_controller: bool


def plugin_flags(fn: Callable[..., Any]) -> PluginFlags:
    """The `needs_planning` and `uses_sepa_controller` attributes a plugin function may carry."""
    return {"needs_planning": bool(getattr(fn, "needs_planning", False)),
            "uses_sepa_controller": bool(getattr(fn, "uses_sepa_controller", False))}


def positional_arity(fn: Callable[..., Any]) -> tuple[int, str]:
    """Number of positional parameters and the first one's name (for calling-convention detection)."""
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return 1, ""
    return len(params), (params[0].name if params else "")
