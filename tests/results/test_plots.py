"""Seed bands (exact values), PNG/SVG curves and the HTML report of a campaign written by our recorder."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recorded_campaign import SEEDS, STEPS, recorded_campaign_dir, reward

from retrain_ray.cli import main
from retrain_ray.results.campaign_results import CampaignResults
from retrain_ray.results.plots import plot_profile, seed_bands

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def campaign_dir(tmp_path_factory):
    return recorded_campaign_dir(tmp_path_factory, "plots")


def test_seed_bands_exact(campaign_dir):
    long = CampaignResults.from_dir(campaign_dir).history(metrics=("mean_reward",))
    bands = seed_bands(long, "mean_reward")
    row = bands[(bands["condition"] == "fast") & (bands["step"] == 3)].iloc[0]
    values = [reward("fast", s, 3) for s in SEEDS]  # spread 0.01 between seeds: std 0.01
    half = 4.303 * 0.01 / math.sqrt(3)
    assert row["mean"] == pytest.approx(sum(values) / 3)
    assert (row["low"], row["high"], row["n"]) == (pytest.approx(row["mean"] - half), pytest.approx(row["mean"] + half), 3)
    assert len(bands) == 2 * STEPS
    smoothed = seed_bands(long, "mean_reward", smooth=2)
    row = smoothed[(smoothed["condition"] == "slow") & (smoothed["step"] == 5)].iloc[0]
    assert row["mean"] == pytest.approx(sum(reward("slow", s, 4) + reward("slow", s, 5) for s in SEEDS) / 6)


def test_a_skipped_step_keeps_the_seed_in_the_band():
    import pandas as pd

    long = pd.DataFrame({"run": ["a", "a", "b", "b", "b"], "condition": "c", "seed": [1, 1, 2, 2, 2],
                         "step": [0, 2, 0, 1, 2], "metric": "m", "value": [1.0, 3.0, 2.0, 2.0, 2.0]})
    bands = seed_bands(long, "m").set_index("step")
    assert list(bands["n"]) == [2, 2, 2]  # run a skipped step 1: its step-0 value stands in
    assert bands.loc[1, "mean"] == pytest.approx(1.5)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=1, max_size=6))
def test_band_contains_mean_and_vanishes_for_one_seed(values):
    import pandas as pd

    long = pd.DataFrame({"run": [f"r{i}" for i in range(len(values))], "condition": "c", "seed": range(len(values)),
                         "step": 0, "metric": "m", "value": values})
    row = seed_bands(long, "m").iloc[0]
    assert row["mean"] == pytest.approx(sum(values) / len(values))
    if len(values) == 1:
        assert math.isnan(row["low"]) and math.isnan(row["high"])
    else:
        assert row["low"] <= row["mean"] + 1e-12 <= row["high"] + 2e-12


def test_plot_writes_png_and_svg_with_a_line_and_band_per_condition(campaign_dir, tmp_path):
    results = CampaignResults.from_dir(campaign_dir)
    figure = results.plot("mean_reward", out=tmp_path / "reward")
    ax = figure.axes[0]
    slow, fast_label = [t.get_text() for t in ax.get_legend().get_texts()]
    assert slow.startswith("slow (3 seeds): worse than fast, p=") and fast_label == "fast (3 seeds): best"
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "mean reward"
    assert len(ax.collections) == 2  # one band per condition
    fast = ax.lines[1].get_ydata()
    assert fast[-1] > fast[0]  # reward rises
    assert (tmp_path / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in (tmp_path / "reward.svg").read_text()[:500]
    with pytest.raises(ValueError, match="not logged"):
        results.plot("never_logged")


def test_cli_plot_and_html_report(campaign_dir, capsys):
    assert main(["plot", str(campaign_dir), "--metric", "mean_reward", "--metric", "kl", "--html"]) == 0
    printed = capsys.readouterr().out.split()
    assert {p.rsplit("/", 1)[-1] for p in printed} >= {"mean_reward.png", "mean_reward.svg", "kl.svg", "report.html"}
    page = (campaign_dir / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 4  # reward, correct rate, loss, kl, eval, ...
    assert "Run matrix" in page and "fast_s3" in page and "0.781 ± 0.025" in page
    assert "http://" not in page and "https://" not in page  # self-contained
    assert main(["plot", str(campaign_dir), "--metric", "nothing"]) == 2
    assert "choose from" in capsys.readouterr().err


def test_performance_profile_by_hand(campaign_dir, tmp_path):
    # slow's runs score 0.2404, 0.2504, 0.2604 and fast's 0.5004 .. 0.5204 (mean of the last 10 rewards):
    # between them every fast run and no slow run is above the threshold
    figure = plot_profile(CampaignResults.from_dir(campaign_dir), "mean_reward", out=tmp_path / "profile")
    ax = figure.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["slow (3 runs)", "fast (3 runs)"]
    slow, fast = ax.lines
    middle = [i for i, tau in enumerate(slow.get_xdata()) if 0.27 < tau < 0.49]
    assert middle and all(slow.get_ydata()[i] == 0.0 and fast.get_ydata()[i] == 1.0 for i in middle)
    assert ax.get_ylabel() == "fraction of runs above τ" and len(ax.collections) == 2
    assert (tmp_path / "profile.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    loss = plot_profile(CampaignResults.from_dir(campaign_dir), "loss").axes[0]
    assert loss.get_ylabel() == "fraction of runs below τ"  # lower is better: fast's losses are below
    assert all(loss.lines[1].get_ydata()[i] == 1.0 for i, tau in enumerate(loss.lines[1].get_xdata())
               if 0.51 < tau < 0.73)


def test_cli_profile_and_the_report_states_robust_results_and_compute(campaign_dir, capsys):
    assert main(["plot", str(campaign_dir), "--profile"]) == 0
    printed = {p.rsplit("/", 1)[-1] for p in capsys.readouterr().out.split()}
    assert {"profile_mean_reward.png", "profile_mean_reward.svg"} <= printed
    assert main(["plot", str(campaign_dir), "--html"]) == 0
    page = (campaign_dir / "report.html").read_text()
    assert "IQM [95% CI]" in page and "0.5104 [0.5004, 0.5204]" in page and "performance profile" in page
    assert "compute spent:" in page
