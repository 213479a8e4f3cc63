"""The Grafana dashboard is generated from the gauge definitions; every query names an exported metric."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

from retrain_ray.campaign.dashboard import (
    DEFAULT_PATH,
    EXPORT_PREFIX,
    RunGauges,
    dashboard,
    exported_metric_names,
    run_gauge_names,
)
from retrain_ray.campaign.experiment import trial_name

METRIC = re.compile(r"\bray_retrain_[a-z_]+")


def _queries(board: dict) -> list[str]:
    panels = [p for p in board["panels"] if p["type"] != "row"]
    return [t["expr"] for p in panels for t in p["targets"]] + \
        [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]


def test_committed_dashboard_is_the_generated_one():
    assert json.loads(DEFAULT_PATH.read_text()) == dashboard(), \
        "regenerate it: python -m retrain_ray.campaign.dashboard"


def test_every_query_names_an_exported_metric_and_every_metric_has_a_panel():
    board = json.loads(DEFAULT_PATH.read_text())
    exported = exported_metric_names()
    named = set()
    for query in _queries(board):
        found = METRIC.findall(query)
        assert found, f"query names no retrain metric: {query}"
        assert set(found) <= exported, f"{query} names {set(found) - exported}, which nothing exports"
        named |= set(found)
    assert named == exported
    assert {EXPORT_PREFIX + n for n in run_gauge_names()} <= exported
    assert {"ray_retrain_run_loss", "ray_retrain_run_kl", "ray_retrain_run_clip_fraction",
            "ray_retrain_run_eval_correct_rate", "ray_retrain_run_sync_time_s", "ray_retrain_bp_p_star",
            "ray_retrain_throttle_in_flight"} <= exported
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


def test_run_gauges_register_the_catalogued_names(ray_4cpu_4gpu):
    gauges = RunGauges("dash", "grpo+none_s1", "grpo+none")
    assert sorted(g._name for g in gauges._gauges.values()) == sorted(run_gauge_names())
    gauges.on_step({"step": 3, "loss": 0.5, "policy/abs_kl": 0.01, "clip_fraction": 0.1, "phase": "rl"})
    gauges.on_eval({"step": 3, "eval_correct_rate": 0.4})


def test_trials_are_named_after_their_runs():
    assert trial_name(SimpleNamespace(config={"run_name": "maxrl+gtpo_s3"})) == "maxrl+gtpo_s3"
