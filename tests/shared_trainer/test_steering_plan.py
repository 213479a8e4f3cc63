"""`explain` says when the pooled back pressure steers the shared trainer's batched step (and not otherwise)."""

from __future__ import annotations

import json

import pytest
from helpers import config_toml

from retrain_ray.cli.explain import explain_main


def _explain(tmp_path, capsys, backpressure: dict[str, bool]) -> dict:
    data = {"model": {"model": "builtin:tiny", "finetune": "lora"}, "backend": {"devices": "cpu"},
            "training": {"max_steps": 2, "batch_size": 2, "group_size": 4, "max_tokens": 8},
            "logging": {"log_dir": str(tmp_path)}, "backpressure": backpressure,
            "campaign": {"seeds": [1, 2, 3], "max_steps": 2, "shared_trainer": True, "parallel": True,
                         "max_workers": 3, "conditions": [{"advantage_mode": "grpo", "transform_mode": "none"}]}}
    path = tmp_path / "c.toml"
    path.write_text(config_toml(base={}, **data))
    assert explain_main([str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["campaign"]["shared_trainer"]


@pytest.mark.parametrize(("backpressure", "steered"), [
    ({"enabled": True}, True), ({"enabled": True, "pooled": False}, False), ({"enabled": False}, False)])
def test_explain_says_whether_back_pressure_sets_the_members_per_batched_step(tmp_path, capsys, backpressure, steered):
    shared = _explain(tmp_path, capsys, backpressure)
    assert shared["steered_by_backpressure"] is steered
    lines = [line for line in shared["plan"] if "back pressure" in line]
    assert lines == ([
        "  back pressure (pooled) sets how many of the 3 members one batched step takes: it sweeps 1, 2, 4, ... "
        "and keeps the peak of the pooled tokens/s (bp_capacity in the runs' rows)"] if steered else [])
    assert shared["plan"][1].startswith("  estimated per trainer")  # the memory line stays second


def test_a_members_back_pressure_resource_is_the_name_of_its_trainer():
    from retrain_ray.actors.shared_trainer import trainer_name
    from retrain_ray.campaign.shared_trainers import trainer_for, trainer_resource

    trainers = {"a": ("t0", "t1"), "b": ("t2",)}
    for run in (f"run{i}" for i in range(8)):
        slot = trainers["a"].index(trainer_for(trainers, run, "a"))
        assert trainer_resource(trainers, "scope", run, "a") == trainer_name("scope", "a", slot)
    assert trainer_resource(trainers, "scope", "run1", "b") == "scope/shared_trainer/b/0"
    with pytest.raises(RuntimeError, match="no shared trainer on node z"):
        trainer_resource(trainers, "scope", "run1", "z")
