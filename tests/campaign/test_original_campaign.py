"""`configs/original-campaign.toml` (the original's campaign format, with a delight condition) plans and
every one of its conditions trains (issue 28; `explain` on it: tests/config/test_config_explain.py): on CPU, with the built-in model and task in place of its
Hub model and math data, two steps each, through the same override flags a user has."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrain_ray.config import expand_runs, load_config, parse_overrides
from retrain_ray.logs import read_stream
from retrain_ray.run.train import train_run

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = ROOT / "configs" / "original-campaign.toml"
# `operator:lt` (response < reference, as text) splits the untrained model's groups, so each condition's
# transform really shapes an update at both steps.
ON_CPU = ["--model", "builtin:tiny", "--devices", "cpu", "--data-source", "builtin", "--data-task", "first_digit",
          "--max-tokens", "4", "--reward-type", "custom", "--reward-custom-module", "operator:lt",
          "--campaign.max_steps=2", "--campaign.seeds=[42]"]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["gtpo_sepa", "gtpo_sepa+predictive_variance", "delight"])
def test_each_condition_of_the_original_campaign_trains_on_cpu(tmp_path, index):
    cfg = load_config(CAMPAIGN, overrides=parse_overrides(ON_CPU))
    runs = expand_runs(cfg, run_dir=lambda name: tmp_path / "runs" / name)
    assert len(runs) == 3
    run = runs[index]
    run_dir = tmp_path / "runs" / run.run_name
    outcome = train_run(run.config, run_name=run.run_name, run_dir=run_dir)
    assert outcome.status == "completed"
    rows = read_stream(run_dir).to_pylist()
    assert [r["step"] for r in rows] == [0, 1] and all(r["trained"] for r in rows)
    assert {r["transform_mode"] for r in rows} == {run.config.algorithm.transform_mode}
    if run.config.algorithm.transform_mode == "delight":
        etas = [dict(r["extras"]).get("dg_eta") for r in rows]
        assert 0.5 in etas and set(etas) <= {0.5, None}  # the condition's transform_params reach the gate
        assert run.config.training.lr == 5e-5
