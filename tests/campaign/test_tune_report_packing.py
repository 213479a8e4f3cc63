"""A run's last report packs its final metrics beyond those Tune reads into one JSON string (Tune keeps about 1 KB
of window and analysis per numeric key per trial in its experiment state); the manifest's result unpacks them."""

from __future__ import annotations

import numbers

from retrain_ray.campaign.tracking import RUN_METRICS, _result_summary
from retrain_ray.campaign.trial import KEPT, packed

FINAL = {"step": 9, "mean_reward": 0.5, "loss": 0.1, "adaptive_value": 0.4, "first_step_at": 1.7e9,
         **{f"extra/metric_{i}": float(i) for i in range(60)}}
FIXED = {"run_done": True, "run_status": "completed", "process_runs": 2, "trial_id": "t1"}


def test_tune_sees_only_the_kept_numbers_and_the_manifest_all_of_them():
    report = {**packed(FINAL), **FIXED}
    tracked = [k for k, v in report.items() if isinstance(v, numbers.Number)]  # what Tune analyses per key
    assert set(tracked) <= {*KEPT, *FIXED}
    assert isinstance(report[RUN_METRICS], str)
    assert _result_summary(report) == _result_summary({**FINAL, **FIXED})
    assert _result_summary(report)["extra/metric_59"] == 59.0 and RUN_METRICS not in _result_summary(report)


def test_a_report_without_packed_metrics_or_with_a_damaged_string_still_summarises():
    assert _result_summary({**FINAL, **FIXED})["loss"] == 0.1
    assert _result_summary({"step": 3, RUN_METRICS: "{not json"}) == {"step": 3}
