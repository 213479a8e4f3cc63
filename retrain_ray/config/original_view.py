"""The original's flat `TrainConfig` field names, answered from our sectioned config.

Plugin factories written for the original (`factory(config)`) read `config.max_examples`,
`config.seed`, `config.reward_custom_module`, ...; `OriginalConfigView` gives them those names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from retrain_ray.config.fields import FIELD_INDEX

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig


class OriginalConfigView:
    """Read-only view of a RetrainConfig under the original's flat field names."""

    def __init__(self, cfg: RetrainConfig) -> None:
        self._cfg = cfg

    def __getattr__(self, name: str) -> Any:
        if name not in FIELD_INDEX:
            raise AttributeError(f"the original TrainConfig has no field {name!r}")
        section, key = FIELD_INDEX[name]
        return getattr(getattr(self._cfg, section), "from_" if key == "from" else key)
