"""`retrain.config` for plugins: `TrainConfig`, the type of the `config` a plugin factory receives.

A factory receives retrain-ray's `OriginalConfigView`, which answers the original's flat field names
(`config.seed`, `config.max_examples`, ...) from the sectioned config; annotations naming `TrainConfig`
name that class.
"""

from __future__ import annotations

from retrain_ray.config.key_names import OriginalConfigView

TrainConfig = OriginalConfigView

__all__ = ["TrainConfig"]
