"""The original's import names for its plugins, where the original package is not installed.

A plugin written for the original imports its types: `from retrain.data import Example`,
`from retrain.rewards import RewardFunction`, `from retrain.backends import TrainHelper`,
`from retrain.inference_engine.base import InferenceEngine, SampleResult`, `from retrain.config import
TrainConfig`. `provide_original_names()` appends a finder to the END of `sys.meta_path`: Python asks it
only after every other finder has failed, so an installed `retrain` is always imported itself (and its
own types are accepted: retrain-ray reads plugin results by duck typing, run/plugins.py). Without one,
`import retrain` and `retrain.<module>` give modules holding the names `retrain_ray.compat.original` lists
for them (the very same objects). Importing this package registers the finder as the plugin loader's import
hook, so every plugin import (plugins/loader.py) provides the names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

from retrain_ray.plugins.loader import add_import_hook

ORIGINAL = "retrain"
_HOME = "retrain_ray.compat.original"

__all__ = ["ORIGINAL", "provide_original_names"]


class _Alias(importlib.abc.Loader):
    """Fills the module `retrain.<sub>` with the names `original.MODULES[sub]` lists: the very same objects
    (a plugin's `retrain.data.Example` is `retrain_ray.compat.original.Example`)."""

    def __init__(self, sub: str) -> None:
        self.sub = sub

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a plain new module

    def exec_module(self, module: ModuleType) -> None:
        source = importlib.import_module(_HOME)
        names = source.MODULES[self.sub]
        module.__dict__.update({name: getattr(source, name) for name in names}, __all__=list(names))
        module.__doc__ = f"`{module.__name__}` for plugins written for the original ({_HOME})."


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
        from retrain_ray.compat import original  # deferred: it imports the config and rewards packages

        sub = fullname[len(ORIGINAL) + 1:]
        if sub not in original.MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(sub), is_package=sub in original.PACKAGES)


def provide_original_names() -> None:
    """Makes `import retrain` work for plugins when the original is not installed (idempotent)."""
    if not any(isinstance(f, OriginalNamesFinder) for f in sys.meta_path):
        sys.meta_path.append(OriginalNamesFinder())


add_import_hook(provide_original_names)  # every plugin import can see `retrain` (the loader cannot import us)
