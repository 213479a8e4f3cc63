"""A meta-path finder that answers `retrain` and `retrain.<sub>` with `retrain_ray.compat.original`."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

ORIGINAL = "retrain"
_HOME = "retrain_ray.compat.original"


class _Alias(importlib.abc.Loader):
    """Fills the module of an original name with the names of its counterpart in our package: the very
    same objects (a plugin's `retrain.data.Example` is `retrain_ray.compat.original.data.Example`)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a plain new module

    def exec_module(self, module: ModuleType) -> None:
        source = importlib.import_module(self.target)
        module.__dict__.update({k: v for k, v in vars(source).items() if not k.startswith("__") or k == "__all__"})
        module.__doc__ = source.__doc__


def _is_ours(module: ModuleType | None) -> bool:
    return isinstance(getattr(getattr(module, "__spec__", None), "loader", None), _Alias)


class OriginalNamesFinder(importlib.abc.MetaPathFinder):
    """Finds the original's module names in `retrain_ray.compat.original`, unless a real `retrain` is
    imported (then its own submodules are its business)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != ORIGINAL and not fullname.startswith(ORIGINAL + "."):
            return None
        if fullname != ORIGINAL and not _is_ours(sys.modules.get(ORIGINAL)):
            return None  # a real `retrain` is imported: its submodules are its own
        target_name = _HOME + fullname[len(ORIGINAL):]
        found = importlib.util.find_spec(target_name)
        if found is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(target_name),
                                              is_package=found.submodule_search_locations is not None)


def provide_original_names() -> None:
    """Makes `import retrain` work for plugins when the original is not installed (idempotent)."""
    if not any(isinstance(f, OriginalNamesFinder) for f in sys.meta_path):
        sys.meta_path.append(OriginalNamesFinder())
