"""A LoRA campaign with `[campaign] shared_trainer = true` on the session Ray (real Tune, real train_run, the
tiny built-in model): its runs train and sample on one shared trainer actor, their trials hold no model."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import ray
from campaign_helpers import rows_logged, steps_once
from helpers import GRPO, write_campaign
from ray import cloudpickle

from retrain_ray.campaign import Campaign

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MAXRL = {"advantage_mode": "maxrl", "transform_mode": "none"}


def shared_toml(tmp_path: Path, *, name: str, steps: int = 4, seeds=(1, 2), shared: bool = True) -> Path:
    return write_campaign(
        tmp_path / f"{name}.toml",
        model={"finetune": "lora", "lora_rank": 4}, backend={"devices": "cpu"},
        training={"batch_size": 2, "group_size": 8, "max_tokens": 4, "lr": 3e-3, "save_every": 2},
        reward={"type": "custom", "custom_module": "operator:lt"},  # splits the groups: every step trains
        algorithm=GRPO, logging={"log_dir": f"{tmp_path}/logs/x"},
        campaign={"name": name, "seeds": list(seeds), "max_steps": steps, "parallel": True, "max_workers": 4,
                  "max_failures": 2, "shared_trainer": shared},
        conditions=[GRPO, MAXRL])


@pytest.mark.extended  # about 70 s on the loaded 2-core machine
def test_a_four_run_lora_campaign_trains_on_one_shared_trainer(ray_4cpu_4gpu, tmp_path):
    toml = shared_toml(tmp_path, name="shared4")
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    cdir = tmp_path / "campaigns" / "shared4"
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert manifest["status"] == "done"
    assert [(r["status"], r["attempts"]) for r in manifest["runs"]] == [("completed", 1)] * 4
    for run in results.get_dataframe()["run_name"]:
        rows = results.history(run)
        assert list(rows["step"]) == list(range(4))
        assert rows["loss"].notna().all() and list(rows["weights_version"]) == [0, 1, 2, 3]
        checkpoint = cdir / "runs" / run / "work" / "checkpoints" / "final"
        assert (checkpoint / "adapter" / "adapter_model.safetensors").is_file()
        assert (checkpoint / "optimizer.pt").is_file()


def _kill_trainer_after_rows(cdir: Path, campaign: str, namespace: str, killed: list[int]) -> None:
    from retrain_ray.actors.shared_trainer import trainer_name
    from retrain_ray.campaign.plan import actor_scope

    deadline = time.monotonic() + 300
    while rows_logged(cdir) < 6 and time.monotonic() < deadline:
        time.sleep(0.2)
    name = trainer_name(actor_scope(campaign, cdir), ray.get_runtime_context().get_node_id())
    handle = ray.get_actor(name, namespace=namespace)
    pid = int(ray.get(handle.figures.remote(), timeout=60)["pid"])
    os.kill(pid, signal.SIGKILL)
    killed.append(pid)


@pytest.mark.extended  # two campaigns' worth of steps on shared cores
@pytest.mark.timeout(900)
def test_a_trainer_killed_mid_campaign_restarts_and_its_members_retry_from_their_checkpoints(ray_4cpu_4gpu, tmp_path):
    name = "shared-kill"
    toml = shared_toml(tmp_path, name=name, steps=8, seeds=(1,))
    cdir = tmp_path / "campaigns" / name
    killed: list[int] = []
    namespace = ray.get_runtime_context().namespace
    killer = threading.Thread(target=_kill_trainer_after_rows, args=(cdir, name, namespace, killed), daemon=True)
    killer.start()
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    killer.join(timeout=60)
    assert killed, "the trainer was never killed: the campaign ended first"
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert results.errors == [] and {r["status"] for r in manifest["runs"]} == {"completed"}
    assert max(r["attempts"] for r in manifest["runs"]) >= 2  # a member retried, counted as any retry
    assert [r["actor"] for r in manifest["control_restarts"]] == [
        f"{actor_scope_of(name, cdir)}/shared_trainer/{ray.get_runtime_context().get_node_id()}/0"]
    for run in manifest["runs"]:
        assert not steps_once(cdir / "runs" / run["run_name"], 8)
        assert run_history_steps(results, run["run_name"]) == list(range(8))


def actor_scope_of(name: str, cdir: Path) -> str:
    from retrain_ray.campaign.plan import actor_scope

    return actor_scope(name, cdir)


def run_history_steps(results, run_name: str) -> list[int]:
    return list(results.history(run_name)["step"])
