"""Live per-run gauges (`ray.util.metrics`): a RunObserver that exports the latest step's numbers.

The definitions here (and the back-pressure and throttle actors' BP_GAUGES / THROTTLE_GAUGES) are
what `retrain_ray.campaign.dashboard.grafana` builds the Grafana dashboard from, so panel queries cannot drift
from the exported names.

Exported on Ray's metrics endpoint with a `ray_` prefix (after about 10 s), tagged
campaign / run / condition, for Prometheus and Grafana dashboards. Ray's tags are ASCII: a name that
is not is spelled in ASCII for the tags only (actors/metric_tags.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from ray.util.metrics import Gauge

from retrain_ray.actors.metric_tags import ascii_tags
from retrain_ray.logs.types import MetricsRow, RunObserver

# Gauge name (exported as ray_retrain_run_<name>) -> the row key it shows.
STEP_GAUGES: dict[str, str] = {
    "step": "step", "mean_reward": "mean_reward", "correct_rate": "correct_rate", "loss": "loss",
    "kl": "policy/abs_kl", "clip_fraction": "clip_fraction", "tokens_per_second": "tokens_per_second",
    "step_time_s": "step_time_s", "sync_time_s": "sync_time_s", "batch_size": "batch_size",
    "staleness": "staleness", "shared_batch_runs": "shared_batch_runs", "engine_wait_s": "engine_wait_s",
}
EVAL_GAUGES: dict[str, str] = {"eval_correct_rate": "eval_correct_rate", "eval_mean_reward": "eval_mean_reward"}
RUN_GAUGE_PREFIX = "retrain_run_"
TAGS = ("campaign", "run", "condition")
GAUGED = tuple(STEP_GAUGES)  # kept for callers of the first version


def run_gauge_names() -> list[str]:
    """Every run gauge's metric name as registered (Ray exports it with a `ray_` prefix)."""
    return [RUN_GAUGE_PREFIX + name for name in (*STEP_GAUGES, *EVAL_GAUGES)]


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


class RunGauges(RunObserver):
    """RunObserver setting the run's gauges (STEP_GAUGES on each step, EVAL_GAUGES on each eval)."""

    def __init__(self, campaign: str, run: str, condition: str) -> None:
        self._tags = ascii_tags({"campaign": campaign, "run": run, "condition": condition})
        self._gauges = {
            name: Gauge(RUN_GAUGE_PREFIX + name, description=f"latest {key} of a run", tag_keys=TAGS)
            for name, key in {**STEP_GAUGES, **EVAL_GAUGES}.items()
        }

    def _set(self, keys: Mapping[str, str], row: MetricsRow) -> None:
        for name, key in keys.items():
            value = _number(row.get(key))
            if value is not None:
                self._gauges[name].set(value, tags=self._tags)

    def on_step(self, row: MetricsRow, **info: object) -> None:
        self._set(STEP_GAUGES, row)

    def on_eval(self, row: MetricsRow, **info: object) -> None:
        self._set(EVAL_GAUGES, row)
