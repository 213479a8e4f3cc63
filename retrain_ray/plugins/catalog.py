"""What `retrain-ray plugins FILE` shows of plugins: the modules in the search path folders, and whether each
dotted path a config names imports, answered by the run's own loader rules (loader.py).

`base` is the folder relative search paths are read against: the config file's folder, with the working
directory (where the run reads them) tried too, so a config that runs checks ok.
"""

from __future__ import annotations

import os
from pathlib import Path

from retrain_ray.plugins.loader import PluginLoader, folder_of, is_folder_entry, missing_folders, split_path


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
