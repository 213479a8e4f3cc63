"""Two campaigns of one name on one cluster at once keep their actors, logs and Tune state apart: each
campaign's named actors are registered under its name and its directory's digest
(`CampaignPlan.actor_scope`). Before, the second driver found the first one's recorder by name
(`get_if_exists`) in the shared `retrain-ray` namespace, and its runs' rows went to the first directory.

The scenario runs in a child process (tests/two_campaigns_scenario.py) with its own Ray temp dir."""

from __future__ import annotations

import pytest
from campaign_helpers import run_scenario

from retrain_ray.campaign.plan import actor_scope


@pytest.mark.extended
@pytest.mark.cluster
@pytest.mark.timeout(720)
def test_two_campaigns_of_one_name_on_one_cluster_complete_apart(tmp_path):
    result = run_scenario("two_campaigns_scenario.py", tmp_path, prefix="rr2", timeout_s=660)
    assert result["codes"] == {"a": 0, "b": 0}, [(tmp_path / f"{w}.log").read_text()[-3000:] for w in "ab"]
    for which in ("a", "b"):
        runs = result["runs"][which]
        assert sorted(runs) == ["grpo+none_s1", "grpo+none_s2"], runs
        for run, outcome in runs.items():
            assert outcome["status"] == "completed", (which, run, outcome)
            assert outcome["steps"] == list(range(result["steps"])), (which, run, outcome)  # each step once, here


def test_campaigns_of_one_name_in_two_directories_have_two_actor_scopes(tmp_path):
    a, b = tmp_path / "a" / "twin", tmp_path / "b" / "twin"
    assert actor_scope("twin", a) != actor_scope("twin", b)
    assert actor_scope("twin", a) == actor_scope("twin", tmp_path / "a" / ".." / "a" / "twin")  # a resume: same names
    assert actor_scope("twin", a).startswith("twin@")
