"""Significance wherever results are read (issue 25, deliverable 3): `results`, `summary()`, the HTML
report and `plot` state each condition against the best, on a campaign written by our own recorder
(tests/recorded_campaign.py: "fast" beats "slow" by 0.26 reward, seed offsets 0.01 apart)."""

from __future__ import annotations

import json
import math

import pytest
from recorded_campaign import recorded_campaign_dir, write_campaign

from retrain_ray.cli import main
from retrain_ray.results.campaign_results import CampaignResults
from retrain_ray.results.significance import t_quantile, t_sf2


@pytest.fixture(scope="module")
def campaign_dir(tmp_path_factory):
    return recorded_campaign_dir(tmp_path_factory, "significance")


def test_significance_by_hand(campaign_dir):
    # each run's value: mean of its last 10 rewards (steps 2..11; 8..11 written by the resumed recorder, +0.001)
    # = 0.1 + rate * 6.5 + 0.01 seed + 0.0004; fast - slow = 0.04 * 6.5 = 0.26; seed variance 1e-4 both sides,
    # so se = sqrt(2e-4 / 3), df = 4; one pair, so Holm leaves p as it is.
    res = CampaignResults.from_dir(campaign_dir)
    values = res.run_values("mean_reward")
    assert values["fast"] == pytest.approx([0.4904 + 0.01 * s for s in (1, 2, 3)])
    row = res.significance("mean_reward").iloc[0]
    se = math.sqrt(2e-4 / 3)
    assert (row["condition"], row["best"], row["verdict"], row["test"]) == ("slow", "fast", "worse", "welch-holm")
    assert (row["seeds"], row["best_seeds"]) == (3, 3)
    assert row["diff"] == pytest.approx(-0.26)
    assert row["p_value"] == pytest.approx(t_sf2(0.26 / se, 4), rel=1e-6)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((-0.26 - t_quantile(0.975, 4) * se, -0.26 + t_quantile(0.975, 4) * se))
    # lower loss is better: on loss "fast" is still the best, and "slow" worse
    loss = res.significance("loss").iloc[0]
    assert (loss["best"], loss["verdict"]) == ("fast", "worse") and loss["diff"] > 0


def test_summary_states_each_condition_against_the_best(campaign_dir):
    summary = CampaignResults.from_dir(campaign_dir).summary().set_index("condition")
    assert summary.loc["fast", "verdict"] == "best" and summary.loc["slow", "verdict"] == "worse"
    assert summary.loc["slow", "vs_best"] == "fast" and summary.loc["slow", "seeds"] == 3
    assert summary.loc["slow", "diff_ci95_low"] < summary.loc["slow", "diff"] < summary.loc["slow", "diff_ci95_high"]
    assert "verdict" not in CampaignResults.from_dir(campaign_dir).summary(significance=None)


def test_the_runs_table_and_values_are_read_once_and_handed_out_as_copies(campaign_dir):
    # `results` asks for the runs table and each run's value several times: computed once per CampaignResults
    res = CampaignResults.from_dir(campaign_dir)
    table = res.get_dataframe()
    values = res.run_values("mean_reward")
    table["condition"] = "changed"
    values["fast"].append(99.0)
    assert res._table is not None and res.get_dataframe() is not res._table
    assert set(res.get_dataframe()["condition"]) == {"fast", "slow"}
    assert 99.0 not in res.run_values("mean_reward")["fast"]
    assert res.run_values("mean_reward", window=2) != res.run_values("mean_reward")  # its own window, not the cache
    assert list(res._values) == [("mean_reward", 10), ("mean_reward", 2)]


def test_cli_results_prints_verdicts_with_p_values_and_seeds(campaign_dir, capsys):
    assert main(["results", str(campaign_dir)]) == 0
    out = capsys.readouterr().out
    assert "each condition against the best on mean_reward" in out
    line = next(ln for ln in out.splitlines() if "welch-holm" in ln)
    assert "slow" in line and "fast" in line and "worse" in line and "-0.26" in line
    assert main(["results", str(campaign_dir), "--json", "--metric", "correct_rate", "--window", "1"]) == 0
    verdicts = json.loads(capsys.readouterr().out)["significance"]
    assert [(v["condition"], v["best"], v["verdict"], v["seeds"], v["best_seeds"]) for v in verdicts] == [
        ("slow", "fast", "worse", 3, 3)]
    assert verdicts[0]["p_value"] < 0.05 and verdicts[0]["metric"] == "correct_rate"
    assert main(["results", str(campaign_dir), "--window", "0"]) == 2
    assert "window=0" in capsys.readouterr().err


def test_one_seed_or_one_condition_is_undecided(tmp_path, capsys):
    directory = tmp_path / "one_seed"
    directory.mkdir()
    write_campaign(directory, parquet_every_s=3600.0)
    res = CampaignResults.from_dir(directory)
    for entry in res.runs:   # keep one seed of "slow": failed runs are left out of the comparison
        if entry.condition == "slow" and entry.seed != 1:
            res.manifest = res.manifest.with_run(entry.run_name, status="failed")
    row = res.significance().iloc[0]
    assert (row["verdict"], row["p_value"], row["seeds"]) == ("undecided", 1.0, 1)
    assert math.isinf(row["ci_low"]) and math.isinf(row["ci_high"])


def test_report_and_plot_state_the_verdict(campaign_dir):
    pytest.importorskip("matplotlib")
    assert main(["plot", str(campaign_dir), "--metric", "mean_reward", "--html"]) == 0
    page = (campaign_dir / "report.html").read_text()
    assert "Each condition against the best" in page and "welch-holm" in page and ">worse<" in page


def test_a_finished_campaign_prints_its_verdicts(campaign_dir, capsys):
    from retrain_ray.cli.campaign import _finish

    assert _finish(CampaignResults.from_dir(campaign_dir)) == 0
    out = capsys.readouterr().out
    assert "slow: worse than fast by -0.26 (95% CI -0.2827..-0.2373), p=" in out and "3 vs 3 seeds" in out
