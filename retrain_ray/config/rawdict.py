"""Pure operations on raw (TOML-shaped) config dicts; a leaf: imports nothing of retrain_ray."""

from __future__ import annotations

import copy
from typing import Any


def merge_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A copy of `raw` with overrides laid over it; table values (params, options) merge key-wise."""
    merged = copy.deepcopy(raw)
    for section, table in overrides.items():
        target = merged.setdefault(section, {})
        if not isinstance(table, dict) or not isinstance(target, dict):
            merged[section] = copy.deepcopy(table)
            continue
        for key, value in table.items():
            if isinstance(value, dict) and isinstance(target.get(key), dict):
                target[key] = {**target[key], **value}
            else:
                target[key] = copy.deepcopy(value)
    return merged
