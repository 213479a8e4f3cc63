"""A campaign run's SFT file named relative to where the campaign was started (campaign/driver_paths.py): its
trial, which runs in Ray Tune's trial directory, reads the file the driver meant (before: "no such file")."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from retrain_ray.campaign import Campaign
from retrain_ray.campaign.driver_paths import with_driver_paths
from retrain_ray.campaign.plan import RunPlan
from retrain_ray.config import load_config

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "configs" / "digit-chain-campaign.toml"


def _plan(training: dict[str, object]) -> RunPlan:
    cfg = load_config(None, {"training": training})
    return RunPlan(run_name="r", condition="grpo+none", seed=1, overrides={}, config=cfg, run_dir=Path("/tmp/r"),
                   work_dir=Path("/tmp/r/work"), devices="cpu")


def test_relative_sft_files_join_the_driver_dir_and_absolute_ones_stay():
    plan = _plan({"sft_data_path": "data/sft.jsonl", "sft_audit_path": "/abs/audit.md",
                  "sft_token_audit_path": "~/tokens.md"})
    moved = with_driver_paths(plan, "/home/me/project")
    t = moved.config.training
    assert t.sft_data_path == "/home/me/project/data/sft.jsonl"
    assert (t.sft_audit_path, t.sft_token_audit_path) == ("/abs/audit.md", "~/tokens.md")
    assert plan.config.training.sft_data_path == "data/sft.jsonl"  # the driver's plan is not changed
    assert moved.run_name == plan.run_name and moved.work_dir == plan.work_dir
    untouched = _plan({"sft_data_path": ""})
    assert with_driver_paths(untouched, "/x") is untouched


def test_relative_data_files_join_the_driver_dir_too():
    cfg = load_config(None, {"data": {"source": "file", "path": "data/train.jsonl", "eval_path": "/abs/eval.jsonl"}})
    plan = RunPlan(run_name="r", condition="grpo+none", seed=1, overrides={}, config=cfg, run_dir=Path("/tmp/r"),
                   work_dir=Path("/tmp/r/work"), devices="cpu")
    moved = with_driver_paths(plan, "/home/me/project").config
    assert (moved.data.path, moved.data.eval_path) == ("/home/me/project/data/train.jsonl", "/abs/eval.jsonl")
    assert moved.data.source == "file" and plan.config.data.path == "data/train.jsonl"


@pytest.mark.extended  # a campaign of one run: Tune's trial runs in its own directory
def test_the_digit_chain_recipe_runs_as_a_campaign_from_the_repository_root(ray_4cpu_4gpu, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the recipe's sft_data_path is relative to the repository root
    text = "[[campaign.conditions]]".join(RECIPE.read_text().split("[[campaign.conditions]]")[:2])  # one condition
    text = re.sub(r"(?m)^seeds = .*$", "seeds = [1]", text)
    text = re.sub(r"(?m)^max_steps = 80$", "max_steps = 3", text)
    text = re.sub(r"(?m)^sft_warmup_steps = 15$", "sft_warmup_steps = 1", text)
    text = re.sub(r"(?m)^eval_every = 10$", "eval_every = 0", text)
    text = re.sub(r'(?m)^log_dir = .*$', f'log_dir = "{tmp_path}/logs"', text)
    toml = tmp_path / "chain.toml"
    toml.write_text(text)
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    [manifest_path] = (tmp_path / "campaigns").glob("*/manifest.json")
    status = {r["run_name"]: r["status"] for r in json.loads(manifest_path.read_text())["runs"]}
    assert status == {"grpo+none_s1": "completed"}, results.errors
    history = results.history("grpo+none_s1")
    assert list(history["step"]) == [0, 1, 2]
