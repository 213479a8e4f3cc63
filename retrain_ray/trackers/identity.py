"""Who a tracked run is, and the metric names a row becomes."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Identity and clock columns of a row: they label the run or the point, they are not metrics.
NOT_METRICS = frozenset({"step", "wall_time", "seed"})


@dataclass(frozen=True)
class RunIdentity:
    """One run as trackers see it. `campaign` is "" for a single run outside a campaign."""

    run_name: str
    condition: str
    seed: int
    campaign: str = ""

    @property
    def key(self) -> str:
        """Stable across retries and campaign resumes: finds the same tracked run again."""
        return hashlib.sha1(f"{self.campaign}/{self.run_name}".encode()).hexdigest()[:16]

    @property
    def tags(self) -> dict[str, str]:
        return {"campaign": self.campaign, "condition": self.condition, "seed": str(self.seed),
                "run_name": self.run_name}


def metric_values(row: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """The numeric columns of a row as `{prefix}/{column}` -> float (bools as 0/1)."""
    out = {}
    for name, value in row.items():
        if name in NOT_METRICS or isinstance(value, str) or value is None:
            continue
        if isinstance(value, (bool, int, float)):
            out[f"{prefix}/{name}"] = float(value)
    return out


def safe_name(text: str) -> str:
    """`text` with the characters W&B artifact names refuse replaced by '-'."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", text)
