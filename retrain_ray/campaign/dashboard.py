"""Live per-run gauges (`ray.util.metrics`): a RunObserver that exports the latest step's numbers, and
the Grafana dashboard of a campaign generated from the gauge definitions (so names cannot drift):

    python -m retrain_ray.campaign.dashboard [cluster/grafana/retrain_ray_dashboard.json]

The definitions here (and the back-pressure and throttle actors' BP_GAUGES / THROTTLE_GAUGES) are
what the dashboard's panel queries are built from, so they cannot drift from the exported names.
Panels follow the layout of Ray's own dashboards (a Prometheus `datasource` variable, rows of
timeseries panels, 12 columns wide): per condition averages for the campaign, then per run
training metrics, back pressure, throttles and the shared vLLM engine. Variables `campaign` and `run`
filter every query. Ray exports a `ray.util.metrics` gauge named `retrain_run_loss` as `ray_retrain_run_loss`.

Exported on Ray's metrics endpoint with a `ray_` prefix (after about 10 s), tagged
campaign / run / condition, for Prometheus and Grafana dashboards. Ray's tags are ASCII: a name that
is not is spelled in ASCII for the tags only (actors/throttle_support.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

from ray.util.metrics import Gauge

from retrain_ray.actors.backpressure import BP_GAUGES
from retrain_ray.actors.throttle import THROTTLE_GAUGES
from retrain_ray.actors.throttle_support import ascii_tags
from retrain_ray.engines.vllm.batching import ENGINE_GAUGE_PREFIX, ENGINE_GAUGES
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


EXPORT_PREFIX = "ray_"
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "cluster" / "grafana" / "retrain_ray_dashboard.json"
FILTER = 'campaign=~"$campaign"'
RUN_FILTER = 'campaign=~"$campaign", run=~"$run"'
CAMPAIGN_PANELS = ("mean_reward", "correct_rate", "eval_correct_rate", "loss", "kl", "tokens_per_second")


def exported_metric_names() -> set[str]:
    """Every metric name the code exports on Ray's metrics endpoint."""
    names = [RUN_GAUGE_PREFIX + n for n in (*STEP_GAUGES, *EVAL_GAUGES)]
    names += [f"retrain_bp_{n}" for n in BP_GAUGES] + [f"retrain_throttle_{n}" for n in THROTTLE_GAUGES]
    names += [ENGINE_GAUGE_PREFIX + n for n in ENGINE_GAUGES]
    return {EXPORT_PREFIX + n for n in names}


def _panel(panel_id: int, title: str, expr: str, legend: str, x: int, y: int) -> dict[str, object]:
    return {
        "id": panel_id, "type": "timeseries", "title": title, "datasource": "${datasource}",
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "targets": [{"expr": expr, "legendFormat": legend, "refId": "A"}],
        "fieldConfig": {"defaults": {}, "overrides": []}, "options": {"legend": {"displayMode": "table"}},
    }


def _row(panel_id: int, title: str, y: int) -> dict[str, object]:
    return {"id": panel_id, "type": "row", "title": title, "collapsed": False, "panels": [],
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}}


def _sections() -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(row title, [(panel title, PromQL, legend)])."""
    run = EXPORT_PREFIX + RUN_GAUGE_PREFIX
    campaign = [(f"{name} by condition (mean over runs)", f"avg by (condition) ({run}{name}{{{FILTER}}})",
                 "{{condition}}") for name in CAMPAIGN_PANELS]
    runs = [(f"{name} per run", f"{run}{name}{{{RUN_FILTER}}}", "{{run}}") for name in (*STEP_GAUGES, *EVAL_GAUGES)]
    bp = [(f"back pressure {name}", f"{EXPORT_PREFIX}retrain_bp_{name}{{{RUN_FILTER}}}", "{{run}} {{resource}}")
          for name in BP_GAUGES]
    throttle = [(f"throttle {name}", f"{EXPORT_PREFIX}retrain_throttle_{name}{{{FILTER}}}", "{{endpoint}}")
                for name in THROTTLE_GAUGES]
    engine = [(f"shared engine {name}", f"{EXPORT_PREFIX}{ENGINE_GAUGE_PREFIX}{name}{{{FILTER}}}", "{{campaign}}")
              for name in ENGINE_GAUGES]
    return [("Campaign", campaign), ("Runs", runs), ("Back pressure", bp), ("Throttles", throttle),
            ("Shared vLLM engine", engine)]


def _variable(name: str, query: str) -> dict[str, object]:
    return {"name": name, "type": "query", "datasource": "${datasource}", "query": query, "refresh": 2,
            "includeAll": True, "multi": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"}}


def dashboard() -> dict[str, object]:
    panels: list[dict[str, object]] = []
    panel_id, y = 1, 0
    for title, entries in _sections():
        panels.append(_row(panel_id, title, y))
        panel_id, y = panel_id + 1, y + 1
        for i, (panel_title, expr, legend) in enumerate(entries):
            panels.append(_panel(panel_id, panel_title, expr, legend, x=12 * (i % 2), y=y + 8 * (i // 2)))
            panel_id += 1
        y += 8 * ((len(entries) + 1) // 2)
    step = EXPORT_PREFIX + RUN_GAUGE_PREFIX + "step"
    return {
        "title": "retrain-ray campaigns", "uid": "retrain-ray", "schemaVersion": 27, "version": 1,
        "editable": True, "refresh": "10s", "time": {"from": "now-6h", "to": "now"}, "tags": ["retrain-ray", "ray"],
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "current": {}},
            _variable("campaign", f"label_values({step}, campaign)"),
            _variable("run", f'label_values({step}{{campaign=~"$campaign"}}, run)'),
        ]},
        "panels": panels,
    }


def write_dashboard(path: Path = DEFAULT_PATH) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dashboard(), indent=2) + "\n")
    return path


if __name__ == "__main__":
    print(write_dashboard(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PATH))
