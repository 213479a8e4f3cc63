"""Dotted-path plugins: `package.module:attribute` or `package.module.attribute`.

A mode name that is not a built-in and contains a dot or colon is imported once (the registry caches
the result). Import problems become a `ValueError` that names the path and how to fix it.
As the original, `[plugins] search_paths` (default ["plugins"]) are package prefixes tried first:
`my_mod.fn` is looked up as `plugins.my_mod.fn`, then `my_mod.fn`; a top-level package that `sys.path`
lacks is looked for in the working directory (so a ./plugins folder imports) by a `PluginLoader`, which
never edits `sys.path`. An entry written as a folder path (`/home/me/plugins`, `./plugins`, `~/p`) is a
folder whose modules import as top-level modules, looked for before `sys.path`; a
relative one is relative to the working directory. `use_search_paths` sets the process loader's search
paths. Before its first import the loader runs the hooks registered with `add_import_hook` (compat/
registers the finder of the original's names there: the loader itself knows nothing above `util/`).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TypedDict, TypeVar

from retrain_ray.util.dotted import is_dotted_path  # noqa: F401  (re-exported: the loader's callers ask it for the rule)

S = TypeVar("S")

_IMPORT_HOOKS: list[Callable[[], None]] = []


def add_import_hook(hook: Callable[[], None]) -> None:
    """Run `hook()` before each plugin import (it must be idempotent): how a layer above adds a finder."""
    if hook not in _IMPORT_HOOKS:
        _IMPORT_HOOKS.append(hook)


def is_folder_entry(entry: str) -> bool:
    """Whether a `[plugins] search_paths` entry is a folder path (absolute, or starting `./`, `../` or `~`)
    rather than a package prefix (`plugins`, `my_pkg.plugins`, or `extra/plugs` for `extra.plugs`)."""
    return os.path.isabs(entry) or entry in (".", "..") or entry.startswith(("./", "../", "~", ".\\", "..\\"))


def folder_of(entry: str, base: str | None = None) -> str:
    """The absolute folder a folder entry names (relative ones against `base`, default the working directory)."""
    path = Path(entry).expanduser()
    return str(path if path.is_absolute() else Path(base or os.getcwd()) / path)


def missing_folders(paths: list[str] | tuple[str, ...], base: str | None = None) -> list[str]:
    """A message per folder entry of `search_paths` that is not a folder (empty: all are)."""
    return [f"plugins.search_paths: folder {entry!r} ({folder_of(entry.strip(), base)}) does not exist or is not a "
            "folder; fix the path or remove it" for entry in paths
            if entry.strip() and is_folder_entry(entry.strip()) and not Path(folder_of(entry.strip(), base)).is_dir()]


def split_path(path: str) -> tuple[str, str]:
    if ":" in path:
        module, _, attr = path.partition(":")
    else:
        module, _, attr = path.rpartition(".")
    if not module or not attr:
        raise ValueError(f"plugin path {path!r} is malformed; write it as 'package.module:function'.")
    return module, attr


def _is_namespace(spec: importlib.machinery.ModuleSpec | None) -> bool:
    return spec is not None and spec.origin is None and spec.submodule_search_locations is not None


class PluginLoader:
    """Imports plugin modules: `search_paths` are package prefixes tried first (`my_mod` as `plugins.my_mod`),
    `roots` the folders a top-level package or module is also looked for in (after `sys.path`, or before it
    with `roots_first`; the working directory first of them unless `cwd=False`). It imports through importlib's path finder and registers in `sys.modules` only the
    modules it loads; it never edits `sys.path`."""

    def __init__(self, search_paths: list[str] | tuple[str, ...] = ("plugins",), roots: tuple[str, ...] = (),
                 *, roots_first: bool = False, cwd: bool = True) -> None:
        self.search_paths: tuple[str, ...] = ()
        self.folders: tuple[str, ...] = ()
        self.roots: tuple[str, ...] = roots
        self.roots_first = roots_first
        self.cwd = cwd
        self._declared: tuple[str, ...] = ()
        self._base: str | None = None
        self.use_search_paths(search_paths)

    def use_search_paths(self, paths: list[str] | tuple[str, ...], base: str | None = None) -> None:
        """Set `[plugins] search_paths`: package prefixes tried before a plugin's own module path, and folders
        (relative ones against `base`, default the working directory) whose modules import as top-level ones.
        A folder that does not exist is skipped here (a trial elsewhere gets its modules shipped); a plugin
        that then does not import names it (`missing_folders`)."""
        entries = [p.strip() for p in paths if p.strip()]
        self._declared, self._base = tuple(entries), base
        self.search_paths = tuple(dict.fromkeys(p.rstrip("/").strip(".").replace("/", ".")
                                                for p in entries if not is_folder_entry(p)))
        self.folders = tuple(dict.fromkeys(folder_of(p, base) for p in entries if is_folder_entry(p)))

    def add_root(self, directory: str) -> None:
        """Also look for plugin modules under `directory`."""
        if directory and directory not in self.roots:
            self.roots = (*self.roots, directory)

    def import_module(self, name: str) -> ModuleType:
        """`importlib.import_module(name)` as if the roots were on `sys.path` (after it, or with `roots_first`
        before it): a top-level package or module the import system cannot find, or a namespace package
        (`./plugins` without `__init__.py`), is looked for in the roots too."""
        top = name.partition(".")[0]
        module = sys.modules.get(top)
        if module is None:
            self._load_top(top)
        elif _is_namespace(module.__spec__):
            module.__path__ = list(dict.fromkeys([*module.__path__, *self._portions(top)]))
        return importlib.import_module(name)

    def _entries(self) -> list[str]:
        roots = [os.getcwd(), *self.roots] if self.cwd else list(self.roots)
        return [*self.folders, *roots, *sys.path] if self.roots_first else [*self.folders, *sys.path, *roots]

    def _portions(self, top: str) -> list[str]:
        spec = importlib.machinery.PathFinder.find_spec(top, self._entries())
        return list(spec.submodule_search_locations or []) if spec is not None and _is_namespace(spec) else []

    def _load_top(self, top: str) -> None:
        in_folder = importlib.machinery.PathFinder.find_spec(top, list(self.folders)) if self.folders else None
        if not self.roots_first and (in_folder is None or _is_namespace(in_folder)):
            found = importlib.util.find_spec(top)
            if found is not None and not _is_namespace(found):
                return  # the import system finds it (installed, or on sys.path): it imports it
        spec = importlib.machinery.PathFinder.find_spec(top, self._entries())
        if spec is None:
            return  # importlib.import_module reports it missing
        module = importlib.util.module_from_spec(spec)
        if _is_namespace(spec):
            # a namespace package's path is recomputed from sys.path, which lacks the roots: fix it
            module.__path__ = list(spec.submodule_search_locations or [])
        sys.modules[top] = module
        try:
            if spec.loader is not None:
                spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[top]
            raise

    def find(self, module_name: str, path: str, kind: str) -> tuple[ModuleType, str]:
        """The module and the search path prefix it was found under ("": as given, or in a search path folder)."""
        for hook in _IMPORT_HOOKS:
            hook()
        tries = [*((prefix, f"{prefix}.{module_name}") for prefix in self.search_paths), ("", module_name)]
        candidates = [candidate for _, candidate in tries]
        for prefix, candidate in tries:
            try:
                return self.import_module(candidate), prefix
            except ModuleNotFoundError as exc:
                if exc.name is None or not candidate.startswith(exc.name):
                    raise ValueError(f"{kind}={path!r}: importing {candidate!r} failed: {exc}") from exc
        missing = missing_folders(self._declared, self._base)
        raise ValueError(
            f"{kind}={path!r}: cannot import any of {candidates}. Put the module under a [plugins] search_paths "
            "folder (default ./plugins) or make it importable (installed, or on PYTHONPATH)."
            + "".join(f" {m}." for m in missing)
        )


LOADER = PluginLoader()
"""The process's loader: `[plugins] search_paths` of the config being run (`use_search_paths`), and the
driver's folder in a campaign's trials (`use_plugin_root`)."""


def use_search_paths(paths: list[str] | tuple[str, ...], base: str | None = None) -> None:
    """Set the process loader's `[plugins] search_paths` (see `PluginLoader.use_search_paths`)."""
    LOADER.use_search_paths(paths, base)


def use_plugin_root(directory: str) -> None:
    """Also look for plugin modules under `directory`: a campaign's trials run in another working
    directory than the driver whose ./plugins the config means."""
    LOADER.add_root(directory)


def _import(module_name: str, path: str, kind: str) -> tuple[ModuleType, str]:
    return LOADER.find(module_name, path, kind)


def plugin_module(path: str, kind: str) -> tuple[ModuleType, str]:
    """The module a dotted `path` imports from, and the `[plugins] search_paths` prefix it was found
    under ("" when found as given)."""
    return _import(split_path(path)[0], path, kind)


def load_object(path: str, kind: str) -> object:
    """Import the object named by `path`; `kind` (e.g. 'transform_mode') is used in error messages."""
    module_name, attr = split_path(path)
    module, _ = _import(module_name, path, kind)
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ValueError(f"{kind}={path!r}: module {module_name!r} has no attribute {attr!r}.") from exc


def load_callable(path: str, kind: str) -> Callable[..., object]:
    obj = load_object(path, kind)
    if not callable(obj):
        raise ValueError(f"{kind}={path!r} is not callable (got {type(obj).__name__}).")
    return obj


def load_spec(path: str, kind: str, spec_type: type[S], context: str, wrap: Callable[[Callable[..., object]], S]) -> S:
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


def plugin_flags(fn: Callable[..., object]) -> PluginFlags:
    """The `needs_planning` and `uses_sepa_controller` attributes a plugin function may carry."""
    return {"needs_planning": bool(getattr(fn, "needs_planning", False)),
            "uses_sepa_controller": bool(getattr(fn, "uses_sepa_controller", False))}


def positional_arity(fn: Callable[..., object]) -> tuple[int, str]:
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
