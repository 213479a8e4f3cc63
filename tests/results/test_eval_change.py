"""Held-out evaluation before and after training per condition (results/eval_change.py), from a campaign
directory written by our recorder, through `CampaignResults.eval_change` and `retrain-ray results`."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrain_ray.campaign.recorder import RecorderCore
from retrain_ray.cli.results import results_main
from retrain_ray.logs.manifest import Manifest
from retrain_ray.results.campaign_results import CampaignResults
from retrain_ray.results.eval_change import condition_changes, run_changes
from retrain_ray.results.significance import t95

# per condition and seed: accuracy before (step -1) and after (step 9); "up" rises on every seed
ACCURACY = {("up", 1): (0.50, 0.75), ("up", 2): (0.55, 0.70), ("up", 3): (0.60, 0.90),
            ("flat", 1): (0.50, 0.45), ("flat", 2): (0.55, 0.60), ("flat", 3): (0.60, 0.60)}


def _campaign(tmp_path):
    runs = [{"run_name": f"{c}_s{s}", "condition": c, "seed": s, "max_steps": 10} for c, s in ACCURACY]
    Manifest.create(tmp_path, {"name": "evals", "conditions": ["up", "flat"], "seeds": [1, 2, 3], "max_steps": 10,
                               "max_concurrent": 2}, runs)
    recorder = RecorderCore(tmp_path, parquet_every_s=3600.0)
    for (c, s), (before, after) in ACCURACY.items():
        rows = [{"step": step, "eval_mean_reward": value, "eval_correct_rate": value, "num_examples": 20}
                for step, value in ((-1, before), (4, (before + after) / 2), (9, after))]
        recorder.append(f"{c}_s{s}", "eval", rows)
    recorder.close()
    return tmp_path


def test_before_and_after_per_condition_with_the_paired_interval(tmp_path):
    changes = CampaignResults.from_dir(_campaign(tmp_path)).eval_change().set_index("condition")
    up = [after - before for (c, _), (before, after) in ACCURACY.items() if c == "up"]
    mean = sum(up) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in up) / 2)
    assert changes.loc["up", "before"] == pytest.approx(0.55) and changes.loc["up", "after"] == pytest.approx(0.7833333)
    assert changes.loc["up", "change"] == pytest.approx(mean)
    assert changes.loc["up", "ci95_low"] == pytest.approx(mean - t95(2) * sd / math.sqrt(3))
    assert (changes.loc["up", "first_step"], changes.loc["up", "last_step"]) == (-1, 9)
    assert changes.loc["up", "verdict"] == "rises" and changes.loc["flat", "verdict"] == "unclear"
    assert list(changes.index) == ["up", "flat"]  # the manifest's order


def test_results_prints_the_held_out_table_and_json(tmp_path, capsys):
    directory = _campaign(tmp_path)
    assert results_main([str(directory), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["condition"], r["verdict"]) for r in out["eval_change"]] == [("up", "rises"), ("flat", "unclear")]
    assert results_main([str(directory)]) == 0
    text = capsys.readouterr().out
    assert "held-out eval_correct_rate" in text and "-1 -> 9" in text and "rises" in text


def test_a_run_evaluated_once_has_no_change():
    evals = pd.DataFrame({"run": ["a", "b", "b"], "step": [3, -1, 3], "eval_correct_rate": [0.5, 0.2, 0.4]})
    changes = run_changes(evals)
    assert list(changes["run"]) == ["b"] and changes["change"].iloc[0] == pytest.approx(0.2)
    one_seed = condition_changes(changes, pd.DataFrame({"run": ["a", "b"], "condition": ["x", "x"]}))
    assert one_seed["seeds"].iloc[0] == 1 and one_seed["verdict"].iloc[0] == "unclear"
    assert math.isnan(one_seed["ci95_low"].iloc[0])


values = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(values, values), min_size=2, max_size=6))
def test_the_change_is_after_minus_before_and_the_verdict_follows_the_interval(pairs):
    runs = [f"r{i}" for i in range(len(pairs))]
    evals = pd.DataFrame({"run": [r for r in runs for _ in range(2)], "step": [-1, 5] * len(pairs),
                          "eval_correct_rate": [v for pair in pairs for v in pair]})
    (row,) = condition_changes(run_changes(evals), pd.DataFrame({"run": runs, "condition": ["c"] * len(runs)}))\
        .to_dict("records")
    assert row["change"] == pytest.approx(row["after"] - row["before"], abs=1e-12)
    assert row["ci95_low"] <= row["change"] + 1e-12 <= row["ci95_high"] + 2e-12
    assert (row["verdict"] == "rises") == (row["ci95_low"] > 0)
    assert (row["verdict"] == "falls") == (row["ci95_high"] < 0)


def test_conditions_compare_on_their_last_evaluation(tmp_path, capsys):
    """`results --metric eval_correct_rate` reads the eval stream: a run's value is its last evaluation (never the
    before-training row), so conditions compare on held-out accuracy after training."""
    results = CampaignResults.from_dir(_campaign(tmp_path))
    values = results.run_values("eval_correct_rate")
    assert values == {"up": [0.75, 0.70, 0.90], "flat": [0.45, 0.60, 0.60]}
    assert results.significance("eval_correct_rate").iloc[0]["best"] == "up"
    assert results_main([str(tmp_path), "--metric", "eval_correct_rate"]) == 0
    assert "each run's last evaluation" in capsys.readouterr().out
