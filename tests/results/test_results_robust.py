"""`retrain-ray results` and `CampaignResults.robust`: the mean and IQM with stratified bootstrap intervals and
P(best better), on the recorded campaign (values by hand), and the runs table at 120 columns (issue 39)."""

from __future__ import annotations

import json

import pytest
import recorded_campaign
from recorded_campaign import recorded_campaign_dir

from retrain_ray.cli.results import results_main
from retrain_ray.results.campaign_results import CampaignResults
from retrain_ray.results.robust_stats import robust_conditions, robust_improvements


@pytest.fixture(scope="module")
def campaign_dir(tmp_path_factory):
    return recorded_campaign_dir(tmp_path_factory, "robust")


def test_robust_by_hand(campaign_dir):
    # each run's value: the mean of its last 10 rewards; slow 0.2404, 0.2504, 0.2604 and fast 0.5004 .. 0.5204.
    # 3 runs: the IQM trims floor(3/4) = 0, so it is the mean; a resample of all-lowest (1/27 > 2.5%) and
    # of all-highest puts the 95% interval's ends exactly at the lowest and the highest run.
    conditions, versus_best = CampaignResults.from_dir(campaign_dir).robust("mean_reward")
    rows = {r["condition"]: r for r in conditions.to_dict("records")}
    assert rows["slow"]["runs"] == 3
    for name, low in (("slow", 0.2404), ("fast", 0.5004)):
        for stat in ("mean", "iqm"):
            assert rows[name][stat] == pytest.approx(low + 0.01)
            assert rows[name][f"{stat}_low"] == pytest.approx(low)
            assert rows[name][f"{stat}_high"] == pytest.approx(low + 0.02)
    assert versus_best.to_dict("records") == [
        {"condition": "slow", "best": "fast", "p_best_better": 1.0, "p_low": 1.0, "p_high": 1.0}]


def test_lower_is_better_is_negated(campaign_dir):
    # loss = 1 - reward: fast has the lower loss, so it is the best and beats every slow run
    conditions, versus_best = CampaignResults.from_dir(campaign_dir).robust("loss")
    assert dict(zip(conditions["condition"], conditions["mean"], strict=True)) == pytest.approx(
        {"slow": 1 - 0.2504, "fast": 1 - 0.5104})
    assert list(versus_best["best"]) == ["fast"]
    assert list(versus_best["p_best_better"]) == [1.0]


def test_probability_of_improvement_by_hand():
    # b = 2 beats a = 1, ties 2: 1.5; b = 3: 2.5; b = 4: 3 -> 7/9. Lower-is-better: a beats b with 7/9.
    values = {"a": [1.0, 2.0, 3.0], "b": [2.0, 3.0, 4.0]}
    assert robust_improvements(values, "b")["p_best_better"].iloc[0] == pytest.approx(7 / 9)
    assert robust_improvements(values, "a", mode="min")["p_best_better"].iloc[0] == pytest.approx(7 / 9)
    assert robust_improvements(values, None).empty


def test_seeded_and_invariant_to_run_order():
    values = {"a": [0.1, 0.5, 0.3, 0.9, 0.4], "b": [0.6, 0.2, 0.8, 0.7, 0.75]}
    reordered = {"b": values["b"][::-1], "a": values["a"][::-1]}
    first = robust_conditions(values, reps=2000).set_index("condition")
    again = robust_conditions(reordered, reps=2000).set_index("condition").loc[first.index]
    assert first.equals(again)
    assert robust_improvements(values, "b", reps=2000).equals(robust_improvements(reordered, "b", reps=2000))


def test_intervals_shrink_with_more_seeds():
    few = robust_conditions({"a": [0.1, 0.9, 0.4, 0.6]}).iloc[0]
    many = robust_conditions({"a": [0.1, 0.9, 0.4, 0.6] * 8}).iloc[0]
    assert many["iqm_high"] - many["iqm_low"] < few["iqm_high"] - few["iqm_low"]


@pytest.fixture(scope="module")
def ten_runs(tmp_path_factory):
    """A 10-run campaign (2 conditions x 5 seeds) with a product's run names, through the product's writers."""
    directory = tmp_path_factory.mktemp("ten") / "grpo-vs-maxrl"
    directory.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recorded_campaign, "CONDITIONS", ("grpo+none", "max_rl+none"))
        patch.setattr(recorded_campaign, "SEEDS", (1, 2, 3, 4, 5))
        recorded_campaign.write_campaign(directory, parquet_every_s=3600.0)
    return directory


def test_results_fit_120_columns(ten_runs, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    assert results_main([str(ten_runs)]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 120
    for header in ("run", "condition", "seed", "status", "steps", "first", "last", "best", "verdict",
                   "IQM [95% CI]", "P(best better) [95% CI]"):
        assert f" {header} " in out
    assert "max_rl+none_s5" in out
    assert "attempts" not in out


def test_results_wide_and_columns(ten_runs, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    assert results_main([str(ten_runs), "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "attempts" in wide and "best_step_time_s" in wide and "…" not in wide
    assert results_main([str(ten_runs), "--columns", "run_name,attempts"]) == 0
    runs_table = capsys.readouterr().out.split("by condition")[0]
    assert "attempts" in runs_table and "verdict" not in runs_table
    assert results_main([str(ten_runs), "--columns", "run_name,nope"]) == 2
    assert "--columns nope: no such column" in capsys.readouterr().err


def test_results_json_and_csv_stay_complete(campaign_dir, capsys):
    assert results_main([str(campaign_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "attempts" in data["runs"][0] and "best_step_time_s" in data["runs"][0]
    robust = data["robust"]
    assert (robust["metric"], robust["reps"], robust["seed"]) == ("mean_reward", 10_000, 0)
    assert [c["condition"] for c in robust["conditions"]] == ["slow", "fast"]
    assert robust["conditions"][1]["iqm"] == pytest.approx(0.5104)
    assert robust["versus_best"] == [
        {"condition": "slow", "best": "fast", "p_best_better": 1.0, "p_low": 1.0, "p_high": 1.0}]
    assert results_main([str(campaign_dir), "--csv"]) == 0
    assert "best_step_time_s" in capsys.readouterr().out.splitlines()[0]
