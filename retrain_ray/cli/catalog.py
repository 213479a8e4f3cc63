"""`retrain-ray backends [--json]` and `retrain-ray plugins [--json] [FILE]`: what this install offers.

`backends` is the catalog of training backends (spec 11, seed 002): for each, the packages it needs
(and whether they import here), its capability flags, its `[backend.options]` schema, and the hook
names a dotted-path plugin backend may define. `plugins` lists the built-in names of every pluggable
component and the plugin modules found on `[plugins] search_paths` (default `plugins/`); with a
config FILE it also checks that every dotted path the file names imports.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retrain_ray.backends.registry import (
    BACKEND_SPECS,
    BUILTIN_CAPABILITIES,
    ENGINE_HOOKS,
    PLUGIN_DEFAULT_CAPABILITIES,
    PLUGIN_ENGINE_DEFAULT_CAPABILITIES,
    PLUGIN_HOOKS,
    engine_capabilities,
    schema_for,
)
from retrain_ray.backends.types import BackendCapabilities
from retrain_ray.checks.rules import PLUGIN_KEYS
from retrain_ray.compat import provide_original_names
from retrain_ray.config import ConfigError, load_config
from retrain_ray.plugins import is_dotted_path
from retrain_ray.plugins.loader import PluginLoader, folder_of, is_folder_entry, missing_folders, split_path

NOT_SHIPPED = {
    "unsloth": "the original's Unsloth-patched local backend; not shipped: use backend = \"local\"",
}


def builtin_capabilities(name: str) -> BackendCapabilities:
    """The capability flags of a built-in backend (the registry object preflight reads)."""
    return BUILTIN_CAPABILITIES[name]


def option_schema(name: str) -> dict[str, dict[str, Any]]:
    """`[backend.options]` of a built-in backend: key -> {type, default}."""
    schema = schema_for(name, {"_": True}) or {}
    return {key: {"type": type(default).__name__, "default": default} for key, default in sorted(schema.items())}


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def backend_catalog() -> dict[str, Any]:
    """Everything `backends --json` prints."""
    backends: dict[str, Any] = {}
    for name, spec in sorted(BACKEND_SPECS.items()):
        dependencies = [{"module": m, "install": hint, "available": importable(m)} for m, hint in spec.dependencies]
        backends[name] = {
            "source": "builtin",
            "description": spec.description,
            "available": all(d["available"] for d in dependencies),  # every package it needs imports here
            "dependencies": dependencies,
            "capabilities": dataclasses.asdict(builtin_capabilities(name)),
            "option_schema": option_schema(name),
        }
    return {
        "backends": backends,
        "not_shipped": NOT_SHIPPED,
        "plugin": {"source": "plugin/default", "reference": "a dotted path, e.g. my_pkg.backends:make_backend",
                   "factory": FACTORIES["backend"],
                   "default_capabilities": dataclasses.asdict(PLUGIN_DEFAULT_CAPABILITIES),
                   "hooks": PLUGIN_HOOKS},
        "plugin_engine": _plugin_engine(),
    }


def _plugin_engine() -> dict[str, Any]:
    """What a dotted `[inference] engine` names, its capability hooks and their conservative default."""
    return {"source": "plugin/default", "factory": FACTORIES["inference_engine"],
            "default_capabilities": dataclasses.asdict(PLUGIN_ENGINE_DEFAULT_CAPABILITIES), "hooks": ENGINE_HOOKS}


def _print_backends(catalog: dict[str, Any]) -> None:
    # deferred: loads rich, which importing this module does not need
    from rich.console import Console
    from rich.table import Table

    flags = list(BackendCapabilities.__dataclass_fields__)
    table = Table(title="training backends")
    for col in ("backend", "source", *flags, "dependencies", "options"):
        table.add_column(col, overflow="fold")
    rows: list[tuple[str, str, Any, list[dict[str, Any]], int | str]] = [(n, b["source"], b["capabilities"], b["dependencies"], len(b["option_schema"]))
            for n, b in catalog["backends"].items()]
    rows.append(("<dotted path>", "plugin/default", catalog["plugin"]["default_capabilities"], [], "unchecked"))
    for name, source, caps, deps, options in rows:
        dep_text = ", ".join(f"{d['module']} {'ok' if d['available'] else 'MISSING: ' + d['install']}" for d in deps)
        table.add_row(name, source, *[str(caps[f]) for f in flags], dep_text, str(options))
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    for name, why in catalog["not_shipped"].items():
        console.print(f"{name}: {why}", highlight=False, markup=False)
    hooks = "; ".join(" / ".join(v) for v in catalog["plugin"]["hooks"].values())
    console.print(f"plugin backend: {catalog['plugin']['factory']}", highlight=False, markup=False)
    console.print(f"plugin backend hooks (on the factory or its module): {hooks}", highlight=False, markup=False)
    engine = catalog["plugin_engine"]
    console.print("plugin engine hooks (on a plugin engine's or backend's factory, or its module): "
                  f"{' / '.join(engine['hooks']['capabilities'])}"
                  f"; default {engine['default_capabilities']}", highlight=False, markup=False)


def backends_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="retrain-ray backends", description="Catalog of training backends.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    catalog = backend_catalog()
    if args.json:
        print(json.dumps(catalog, indent=2))
    else:
        _print_backends(catalog)
    return 0


BUILTIN_COMPONENTS: dict[str, tuple[str, frozenset[str]]] = {
    k.component: (k.config_key, k.builtin) for k in PLUGIN_KEYS
}
"""component -> (config key, built-in names). Each key also takes a dotted plugin path."""

FACTORIES: dict[str, str] = {
    "backend": "factory(config, context) -> Policy(engine, backend, tokenizer), a training backend built on "
               "context.builtin_policy() (whose engine samples), or the original's TrainHelper",
    "inference_engine": "factory(config, context) -> a sampling engine: weights_version, generate(prompt_ids_P, "
                        "num_samples, params), load_weights(update)",
    "reward": "factory(config) -> an object with score(response, reference) -> float",
    "data_source": "factory(config) -> an object whose load() returns objects with prompt and reference",
    "planning_detector": "factory(config) -> an object with detect(token_strs) -> list[int]",
    "trainer": "a class (built without arguments) or object with run(config) -> the trained adapter's path",
}
"""What a dotted path of each component names (docs/configuration.md, plugins). `config` answers the original's
flat field names; `context` (backends/plugins.py) is optional: a factory of one parameter gets config only."""


def _config_references(sections: Mapping[str, object]) -> dict[str, str]:
    """The plugin keys of the config's `sections` (by section name) that name a dotted path."""
    refs = {}
    for plugin_key in PLUGIN_KEYS:
        value = getattr(sections[plugin_key.section], plugin_key.key)
        if isinstance(value, str) and is_dotted_path(value):
            refs[plugin_key.config_key] = value
    return refs


def plugins_report(config: str | None) -> dict[str, Any]:
    provide_original_names()  # a plugin written for the original imports `retrain.data`, ... (compat/)
    search_paths, base, refs, inference = ["plugins"], Path.cwd(), {}, {}
    if config:
        cfg = load_config(config)
        search_paths, refs = list(cfg.plugins.search_paths), _config_references(dict(cfg))
        base, inference = Path(config).resolve().parent, cfg.inference.model_dump()
    return {
        "builtin": {comp: {"key": key, "names": sorted(known)} for comp, (key, known) in BUILTIN_COMPONENTS.items()},
        "factories": FACTORIES,
        "search_paths": search_paths,
        "discovered": discover_plugin_modules(search_paths, base),
        "references": {key: _reference(key, ref, search_paths, base, inference) for key, ref in refs.items()},
        "engine_hooks": ENGINE_HOOKS,
    }


def _reference(key: str, ref: str, search_paths: list[str], base: Path,
               inference: dict[str, Any]) -> dict[str, Any]:
    """Whether a dotted path imports; for an `[inference] engine` or `[backend] backend`, also what it declares
    its sampling returns (the engine hook, given the `[inference]` section as preflight gives it)."""
    found: dict[str, Any] = {"path": ref, "error": check_reference(ref, search_paths, base)}
    if key in ("inference.engine", "backend.backend") and not found["error"]:
        try:  # a malformed hook: preflight reports the same ValueError (check_reference imported the module)
            flags, source = engine_capabilities(ref, inference, kind=f"[{key.replace('.', '] ')}")
            found["capabilities"], found["source"] = dataclasses.asdict(flags), source
        except ValueError as exc:
            found["error"] = str(exc)
    return found


def plugins_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="retrain-ray plugins",
                                     description="Built-in components and discovered plugins.")
    parser.add_argument("config", nargs="?", help="TOML file: also check the dotted paths it names")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        report = plugins_report(args.config)
    except (ConfigError, FileNotFoundError) as exc:
        print(exc, file=sys.stderr)
        return 2
    broken = {k: r for k, r in report["references"].items() if r["error"]}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_plugins(report)
    return 1 if broken else 0


def _print_plugins(report: dict[str, Any]) -> None:
    for comp, info in report["builtin"].items():
        print(f"{comp} ({info['key']}): {', '.join(info['names'])}, or a dotted path")
        if comp in report["factories"]:
            print(f"    dotted path: {report['factories'][comp]}")
    print(f"search paths: {', '.join(report['search_paths'])}")
    for mod in report["discovered"]:
        print(f"  plugin module {mod['module']}  ({mod['path']})")
    if not report["discovered"]:
        print("  no plugin modules found")
    for key, ref in report["references"].items():
        print(f"{key} = {ref['path']}: {'ok' if not ref['error'] else 'ERROR ' + ref['error']}")
        if "capabilities" in ref:
            print(f"    {ref['source']}: {ref['capabilities']}")
    print("plugin engine hooks (on a plugin engine's or backend's factory, or its module): "
          f"{' / '.join(report['engine_hooks']['capabilities'])}")


# What `retrain-ray plugins FILE` shows of plugins: the modules in the search path folders, and whether each
# dotted path a config names imports, answered by the run's own loader rules (loader.py).
#
# `base` is the folder relative search paths are read against: the config file's folder, with the working
# directory (where the run reads them) tried too, so a config that runs checks ok.
def search_folders(search_paths: list[str], base: Path) -> list[tuple[str, Path]]:
    """(entry, folder) of each search path: a package prefix `plugins` is the folder `base/plugins`."""
    return [(entry, Path(folder_of(entry if is_folder_entry(entry) else entry.replace(".", "/"), str(base))))
            for entry in search_paths if entry.strip()]


def discover_plugin_modules(search_paths: list[str], base: Path) -> list[dict[str, str]]:
    """Python modules and packages directly inside each search path (relative paths from `base`)."""
    found = []
    for entry, root in search_folders(search_paths, base):
        if not root.is_dir():
            continue
        for path in sorted(root.iterdir()):
            is_pkg = path.is_dir() and (path / "__init__.py").is_file()
            if is_pkg or (path.suffix == ".py" and path.stem != "__init__"):
                found.append({"module": path.stem, "path": str(path), "search_path": entry})
    return found


def catalog_loader(search_paths: list[str], base: Path) -> PluginLoader:
    """The run's loader for `search_paths`, with `base` (the config's folder) as a root before the working
    directory."""
    loader = PluginLoader((), (str(base), os.getcwd()), roots_first=True, cwd=False)
    loader.use_search_paths(search_paths, str(base) if _has_folder(search_paths, base) else None)
    return loader


def _has_folder(search_paths: list[str], base: Path) -> bool:
    """Whether the relative folders of `search_paths` exist under `base` (else the working directory's count)."""
    return not missing_folders(search_paths, str(base))


def check_reference(ref: str, search_paths: list[str], base: Path) -> str:
    """"" if the dotted path `pkg.mod:name` / `pkg.mod.name` imports and resolves, else why not (a search path
    folder that does not exist, first)."""
    missing = missing_folders(search_paths, str(base)) and missing_folders(search_paths)
    if missing:
        return "; ".join(missing)
    try:
        module_name, attr = split_path(ref)
        module, _ = catalog_loader(search_paths, base).find(module_name, ref, "plugin")
        if not hasattr(module, attr):
            return f"module {module_name!r} has no attribute {attr!r}"
        return ""
    except Exception as exc:  # a plugin may fail to import in any way; report it, do not crash
        return f"import {ref.partition(':')[0] if ':' in ref else ref.rpartition('.')[0]!r} failed: " \
               f"{type(exc).__name__}: {exc}"
