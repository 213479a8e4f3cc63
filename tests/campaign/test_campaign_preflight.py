"""Campaign preflight (issue 12): every condition is built and probed in the driver, and all problems are
reported at once before any Ray process starts."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import GRPO, write_campaign

from retrain_ray.campaign import Campaign, CampaignError
from retrain_ray.config import load_config


@pytest.fixture
def campaign_file(tmp_path):
    return write_campaign(
        tmp_path / "campaign.toml", model={"finetune": None}, data=None, algorithm=GRPO,
        training={"batch_size": 2, "group_size": 2, "max_steps": 1}, logging={"log_dir": str(tmp_path / "logs")},
        campaign={"seeds": [1]}, conditions=[{"advantage_mode": "grpo", "transform_mode": "no_such_plugin_module.transform"}])


def test_unknown_transform_fails_before_ray_starts_naming_condition_and_key(campaign_file, tmp_path):
    import ray

    was_connected = ray.is_initialized()
    campaign = Campaign(load_config(campaign_file))
    with pytest.raises(CampaignError) as info:
        campaign.run(progress=False)
    text = str(info.value)
    assert "condition 'grpo+no_such_plugin_module.transform'" in text
    assert "transform_mode" in text and "no_such_plugin_module" in text
    assert ray.is_initialized() == was_connected  # no Ray was started (nor stopped) for it
    assert not campaign.campaign_dir.exists()  # nothing was written either


def test_explain_reports_the_same_problem(campaign_file):
    out = subprocess.run([sys.executable, "-m", "retrain_ray.cli.explain", str(campaign_file)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "grpo+no_such_plugin_module.transform" in out.stderr and "transform_mode" in out.stderr
