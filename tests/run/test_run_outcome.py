"""The outcome contract end to end: a run that fails raises, Tune retries it, the campaign reports it.

A custom reward that always raises (`operator.truediv` on two strings: a TypeError, and importable
in every Ray worker) drives one run through a real campaign on the session Ray:
Tune retries it once ([campaign] max_failures = 1), then the manifest marks it failed with the
reward's message and `CampaignResults.errors` names it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import GRPO, write_campaign

from retrain_ray.campaign import Campaign
from retrain_ray.results.campaign_results import RunError

FAILURE = "unsupported operand type(s) for /: 'str' and 'str'"



@pytest.mark.extended
def test_failing_run_is_retried_then_reported(ray_4cpu_4gpu, tmp_path: Path) -> None:
    toml = write_campaign(
        tmp_path / "outcome.toml", algorithm=GRPO, reward={"type": "custom", "custom_module": "operator:truediv"},
        training={"batch_size": 2, "group_size": 2, "max_tokens": 4, "sft_warmup_steps": 0},
        logging={"log_dir": f"{tmp_path}/logs/x"},
        campaign={"name": "outcome", "seeds": [1], "max_steps": 2, "max_failures": 1})

    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)

    manifest = json.loads((tmp_path / "campaigns" / "outcome" / "manifest.json").read_text())
    [run] = manifest["runs"]
    assert run["status"] == "failed"
    assert run["attempts"] == 2  # the first try and Tune's one retry
    assert FAILURE in run["error"]
    assert [type(e) for e in results.errors] == [RunError]
    assert results.errors[0].run_name == run["run_name"]
    assert FAILURE in str(results.errors[0])
