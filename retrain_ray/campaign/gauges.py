"""Live per-run gauges (`ray.util.metrics`): a RunObserver that exports the latest step's numbers.

Exported on Ray's metrics endpoint with a `ray_` prefix (after about 10 s), tagged
campaign / run / condition, for Prometheus and Grafana dashboards.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

GAUGED = ("step", "mean_reward", "correct_rate", "tokens_per_second", "step_time_s")
_TAGS = ("campaign", "run", "condition")


class RunGauges:
    """RunObserver setting one Gauge per metric of GAUGED on every step."""

    def __init__(self, campaign: str, run: str, condition: str) -> None:
        from ray.util.metrics import Gauge

        self._tags = {"campaign": campaign, "run": run, "condition": condition}
        self._gauges = {
            name: Gauge(f"retrain_run_{name}", description=f"latest {name} of a run", tag_keys=_TAGS)
            for name in GAUGED
        }

    def on_step(self, row: Mapping[str, Any]) -> None:
        for name, gauge in self._gauges.items():
            value = row.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                gauge.set(float(value), tags=self._tags)

    def on_generations(self, rows: list[Mapping[str, Any]]) -> None:
        pass

    def on_eval(self, row: Mapping[str, Any]) -> None:
        pass

    def on_checkpoint(self, step: int, directory: Path) -> None:
        pass

    def close(self) -> None:
        pass
