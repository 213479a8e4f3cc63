"""The original's import names for its plugins, where the original package is not installed.

A plugin written for the original imports its types: `from retrain.data import Example`,
`from retrain.rewards import RewardFunction`, `from retrain.backends import TrainHelper`,
`from retrain.inference_engine.base import InferenceEngine, SampleResult`, `from retrain.config import
TrainConfig`. `provide_original_names()` appends a finder to the END of `sys.meta_path`: Python asks it
only after every other finder has failed, so an installed `retrain` is always imported itself (and its
own types are accepted: retrain-ray reads plugin results by duck typing, run/plugins.py). Without one,
`import retrain` gives `retrain_ray.compat.original`, whose modules define those names with the
original's fields and methods (spec sections 1.6, 1.9 and 9). Importing this package registers the finder
as the plugin loader's import hook, so every plugin import (plugins/loader.py) provides the names.
"""

from __future__ import annotations

from retrain_ray.compat.finder import ORIGINAL, provide_original_names
from retrain_ray.plugins.loader import add_import_hook

add_import_hook(provide_original_names)  # every plugin import can see `retrain` (the loader cannot import us)

__all__ = ["ORIGINAL", "provide_original_names"]
