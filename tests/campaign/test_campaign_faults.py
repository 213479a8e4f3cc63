"""Issue 34's classes of failure that stopped a campaign silently or with a crash, each on a real campaign:
non-ASCII names (Ray's metric tags are ASCII), SIGTERM to the driver, a dead recorder actor, and an adaptive
campaign with more runs than `max_workers` and several rungs (Tune's actor reuse once hung its rungs)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from campaign_helpers import (
    REPO,
    cli_cmd,
    continue_command,
    manifest_runs,
    own_session,
    read_manifest,
    repo_path,
    rows_logged,
    run_to_end,
    slow_workdir,
    steps_once,
)
from helpers import GRPO, TINY_RUN, wait_for, write_campaign

from retrain_ray.actors.throttle_support import ascii_tag, ascii_tags

ODD_NAME = "ablation-ü"
ODD_GROUP = "ünï漢字🚀 x"


def test_metric_tags_are_ascii_and_one_to_one():
    assert ascii_tag("grpo+none_s1") == "grpo+none_s1"  # ASCII names are left as they are
    tags = ascii_tags({"campaign": ODD_NAME, "condition": ODD_GROUP})
    assert all(v.isascii() for v in tags.values())
    assert tags["campaign"].startswith("ablation-u~")
    assert ascii_tag("a-ü") != ascii_tag("a-ű")  # the same letters once folded, still two tags


def test_run_gauges_take_non_ascii_names(ray_4cpu_4gpu):
    from retrain_ray.campaign.dashboard import RunGauges

    gauges = RunGauges(ODD_NAME, f"grpo+none~{ODD_GROUP}_s1", "grpo+none")
    gauges.on_step({"step": 0, "loss": 0.5})  # raised UnicodeEncodeError in Ray's Cython layer


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_campaign_with_non_ascii_names_runs_and_keeps_them(ray_4cpu_4gpu, tmp_path):
    from retrain_ray.campaign import Campaign

    condition = {**GRPO, "wandb_group": ODD_GROUP}
    toml = write_campaign(tmp_path / "odd.toml", base=TINY_RUN, logging={"log_dir": f"{tmp_path}/logs"},
                          campaign={"name": ODD_NAME, "seeds": [1], "max_steps": 2, "max_failures": 0},
                          conditions=(condition,))
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    cdir = tmp_path / "campaigns" / ODD_NAME
    manifest = json.loads((cdir / "manifest.json").read_text(encoding="utf-8"))
    assert results.errors == [] and manifest["status"] == "done" and manifest["name"] == ODD_NAME
    (run,) = manifest["runs"]
    assert run["status"] == "completed" and run["overrides"]["wandb_group"] == ODD_GROUP
    assert results.runs[0].overrides["wandb_group"] == ODD_GROUP  # the results read the original text


CAMPAIGN = {"name": "termed", "seeds": [1, 2], "max_steps": 6, "parallel": False, "max_failures": 0,
            "trial_start_timeout_s": 120}


@pytest.mark.extended  # about a minute and a half
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("signum", "group"), [(signal.SIGTERM, True), (signal.SIGHUP, True), (signal.SIGTERM, False)],
                         ids=["sigterm_group", "sighup_group", "sigterm_pid"])
def test_sigterm_to_a_campaign_driver_stops_it_like_ctrl_c_and_resume_completes_it(tmp_path, signum, group):
    work = slow_workdir(tmp_path)
    toml = write_campaign(work / "termed.toml", base=TINY_RUN, campaign=CAMPAIGN, conditions=(GRPO,),
                          reward={"type": "slow_reward.make"})
    cdir = tmp_path / "termed"
    log = tmp_path / "driver1.log"
    with own_session(cli_cmd(str(toml), "--root", str(tmp_path)), log=log, prefix="rrt", cwd=work,
                     PYTHONPATH=repo_path()) as (driver, _):
        wait_for(lambda: rows_logged(cdir) >= 2 or driver.poll() is not None, timeout_s=300,
                 what="the campaign's trials to log rows")
        assert driver.poll() is None, log.read_text()[-3000:]
        # a scheduler's stop (`ray job stop`, Kubernetes): the driver and every process of its group, or its pid
        (os.killpg if group else os.kill)(driver.pid, signum)
        rc = driver.wait(timeout=180)
    out = log.read_text()
    assert rc == 128 + signum, out[-3000:]
    assert "SIGTERM received" not in out and "Traceback" not in out, out[-3000:]
    assert f"continue with: retrain-ray resume {cdir}" in out
    manifest = read_manifest(cdir)
    assert manifest is not None and manifest["status"] == "interrupted"

    command = continue_command(out)
    assert command, out[-3000:]
    rc, left = run_to_end(command, log=tmp_path / "driver2.log", prefix="rru", timeout_s=400, cwd=work,
                          PYTHONPATH=repo_path())
    assert rc == 0 and left == [], (tmp_path / "driver2.log").read_text()[-3000:]
    runs = manifest_runs(cdir)
    assert runs is not None and {r["status"] for r in runs.values()} == {"completed"}
    for name in runs:
        assert not steps_once(cdir / "runs" / name, CAMPAIGN["max_steps"])


def _kill_recorder_when_rows(cdir: Path, campaign: str, namespace: str, killed: list[int]) -> None:
    import ray

    from retrain_ray.campaign.plan import actor_scope
    from retrain_ray.campaign.recorder import recorder_name

    deadline = time.monotonic() + 300
    while rows_logged(cdir) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    handle = ray.get_actor(recorder_name(actor_scope(campaign, cdir)), namespace=namespace)
    pid = ray.get(handle.pid.remote(), timeout=60)
    os.kill(pid, signal.SIGKILL)
    killed.append(pid)


@pytest.mark.extended  # about a minute
@pytest.mark.timeout(600)
def test_a_recorder_killed_mid_campaign_costs_no_run_and_no_row(ray_4cpu_4gpu, tmp_path, monkeypatch):
    from retrain_ray.campaign import Campaign

    monkeypatch.chdir(REPO)
    steps = 8
    toml = write_campaign(tmp_path / "rec.toml", base=TINY_RUN, logging={"log_dir": f"{tmp_path}/logs"},
                          reward={"type": "slow_reward.make"}, plugins={"search_paths": ["tests/fixtures/plugins"]},
                          campaign={"name": "rec", "seeds": [1, 2], "max_steps": steps, "parallel": True,
                                    "max_workers": 2, "max_failures": 0},
                          conditions=(GRPO,))
    cdir = tmp_path / "campaigns" / "rec"
    killed: list[int] = []
    namespace = ray_4cpu_4gpu.get_runtime_context().namespace
    killer = threading.Thread(target=_kill_recorder_when_rows, args=(cdir, "rec", namespace, killed), daemon=True)
    killer.start()
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    killer.join(timeout=60)
    assert killed, "the recorder was never killed: the campaign ended first"
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert results.errors == [] and {r["status"] for r in manifest["runs"]} == {"completed"}
    assert {r["attempts"] for r in manifest["runs"]} == {1}  # no run retried: the recorder came back
    assert [r["actor"] for r in manifest["control_restarts"]] == ["recorder"]
    for run in manifest["runs"]:
        assert not steps_once(cdir / "runs" / run["run_name"], steps)  # every row there, once


HOPELESS = {"advantage_mode": "zero_advantage.zero", "transform_mode": "none"}
MAXRL = {"advantage_mode": "maxrl", "transform_mode": "none"}


@pytest.mark.extended  # about two minutes: 6 runs through 2 slots, paused at 2 rungs
@pytest.mark.timeout(900)
def test_an_adaptive_campaign_with_more_runs_than_workers_and_several_rungs_completes(ray_4cpu_4gpu, tmp_path,
                                                                                     monkeypatch):
    """The issue's hang: 3 conditions x 2 seeds through `max_workers = 2`, several rungs. Tune's actor reuse
    put a trial in ERROR at a rung and the rung then waited for it forever."""
    from retrain_ray.campaign import Campaign

    monkeypatch.chdir(REPO)  # [plugins] search_paths = ["configs/plugins"] is relative to it
    toml = write_campaign(
        tmp_path / "shape.toml", base=TINY_RUN, plugins={"search_paths": ["configs/plugins"]},
        logging={"log_dir": f"{tmp_path}/logs"},
        campaign={"name": "shape", "seeds": [1, 2], "max_steps": 6, "parallel": True, "max_workers": 2,
                  "max_failures": 0, "adaptive": {"metric": "rl/nonzero_advantage_action_tokens", "window": 2,
                                                  "rungs": [2, 4], "min_seeds": 2, "max_seeds": 2}},
        conditions=(GRPO, MAXRL, HOPELESS))
    started = time.monotonic()
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    manifest = json.loads((tmp_path / "campaigns" / "shape" / "manifest.json").read_text())
    runs = {r["run_name"]: r for r in manifest["runs"]}
    assert manifest["status"] == "done" and results.errors == [], (time.monotonic() - started, runs)
    assert {r["status"] for r in runs.values()} <= {"completed", "stopped"}
    decisions = manifest["adaptive"]["decisions"]
    assert decisions and decisions[0]["step"] == 2 and manifest["adaptive"]["finished"]
    stopped = {s["condition"] for d in decisions for s in d["stopped"]}
    assert "zero_advantage.zero+none" in stopped
    assert any("paused_at_rung" in r for r in runs.values())  # runs waited at a rung, and said so
