"""A campaign whose conditions run `trainer = "command"` (issue 28): the command's rows reach the campaign's
logs and results, and a command that fails marks its run failed with its exit code and stderr."""

from __future__ import annotations

import json
import sys

import pytest
from helpers import GRPO, write_campaign

from retrain_ray.campaign import Campaign

SCRIPT = """
import json, sys
from pathlib import Path
config = json.loads(Path(sys.argv[1]).read_text())
with (Path(sys.argv[2]) / "metrics.jsonl").open("w") as out:
    for step in range(config["max_steps"]):
        out.write(json.dumps({"step": step, "loss": 1.0, "mean_reward": config["lr"]}) + "\\n")
Path(sys.argv[3]).mkdir(parents=True, exist_ok=True)
if config["lr"] > 0.5:
    print("diverged: lr too high", file=sys.stderr)
    sys.exit(4)
"""


@pytest.mark.extended  # about 50 s on 2 shared cores (two Tune trials)
def test_a_campaign_runs_command_conditions_and_marks_a_failing_one_failed(ray_4cpu_4gpu, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    command = {"trainer": "command",
               "trainer_command": f"{sys.executable} {script} {{config_path}} {{log_dir}} {{adapter_path}}"}
    toml = write_campaign(
        tmp_path / "cmd.toml", training={"batch_size": 2, "group_size": 4, "max_tokens": 4, **command},
        logging={"log_dir": f"{tmp_path}/logs/x"}, backend={"devices": "cpu", "adapter_path": f"{tmp_path}/adapters"},
        campaign={"name": "cmd", "seeds": [1], "max_steps": 3, "parallel": True, "max_workers": 2,
                  "max_failures": 0},
        conditions=[{**GRPO, "lr": 0.01}, {"advantage_mode": "maxrl", "transform_mode": "none", "lr": 0.9}])
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    manifest = json.loads((tmp_path / "campaigns" / "cmd" / "manifest.json").read_text())
    status = {r["run_name"]: r["status"] for r in manifest["runs"]}
    assert status == {"grpo+none~lr=0.01_s1": "completed", "maxrl+none~lr=0.9_s1": "failed"}
    assert list(results.history("grpo+none~lr=0.01_s1")["step"]) == [0, 1, 2]
    assert list(results.history("grpo+none~lr=0.01_s1")["mean_reward"]) == [0.01] * 3
    [error] = results.errors
    assert error.run_name == "maxrl+none~lr=0.9_s1" and "exited with status 4" in error.message
    assert "diverged: lr too high" in error.message
