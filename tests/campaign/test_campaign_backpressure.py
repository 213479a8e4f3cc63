"""Issue 6 acceptance: central back pressure in a real campaign (Ray Tune trials, the campaign's
back-pressure actor, the shared-endpoint throttle).

Two runs share the remote training API (`[backend] backend = "tinker"` against the LOCAL STAND-IN of
the SDK, so the control plane starts a throttle for the "tinker" endpoint) with `[backpressure]
enabled`, warmup 4, batch sizes 1..16. The reward is `operator.lt(completion, reference)` (a stdlib
function through `[reward] type = "custom"`): the untrained tiny model gets a reward of about 0.25 from
step 0, so RL steps carry signal and write rows without a warm start.

What is asserted:
  * `<campaign_dir>/backpressure.arrows` holds one row per step of each run (skipped steps included);
  * the runs' metrics rows carry the bp_* columns of spec 8, bp_warmup true exactly on steps < 4;
  * batch sizes follow the warmup sweep 1, 2, 4, 8 (rows and log), and after warmup the batch size
    changes only on a throttle/increase decision (the trainer rule; whether the fit issues one on a
    CPU is timing-dependent, so it is not required);
  * the pooled fit pushed its capacity to the throttle: the throttle's capacity is no longer the
    configured `[backend] max_concurrent = 8` (the pooled warmup sweeps 1, 2 for two runs), and the
    pooled controller's upper bound is that configured limit.
"""

from __future__ import annotations

import dataclasses

import pytest
import ray
from helpers import write_campaign

from retrain_ray.actors.backpressure import backpressure_name
from retrain_ray.actors.throttle import get_throttle
from retrain_ray.backpressure.arrow_log import read_decision_log
from retrain_ray.campaign import Campaign
from retrain_ray.campaign.plan import actor_scope

CAPACITY = 8
WARMUP = 4
STEPS = 7
SWEEP = [1, 2, 4, 8]  # warmup_batch_sizes(1, 16)[:WARMUP]
BP_COLUMNS = ("bp_warmup", "bp_action", "bp_regime", "bp_p_star", "bp_sigma", "bp_kappa", "bp_utilization",
              "bp_throughput")

SECTIONS = {
    "model": {"model": "builtin:tiny", "finetune": None, "lora_rank": 4},
    "backend": {"backend": "tinker", "devices": "cpu", "max_concurrent": CAPACITY, "options": {"client": "standin"}},
    "reward": {"type": "custom", "custom_module": "operator", "custom_function": "lt"},
    "training": {"batch_size": 4, "group_size": 8, "max_tokens": 4, "lr": 3e-3, "save_every": 0, "sft_warmup_steps": 0},
    "backpressure": {"enabled": True, "warmup_steps": WARMUP, "min_batch_size": 1, "max_batch_size": 16},
}


@pytest.fixture(scope="module")
def campaign(ray_4cpu_4gpu, tmp_path_factory):
    root = tmp_path_factory.mktemp("bp")
    name = "bp-campaign"
    toml = write_campaign(root / "c.toml", **SECTIONS, logging={"log_dir": f"{root}/logs"}, campaign={
        "name": name, "seeds": [1, 2], "max_steps": STEPS, "parallel": True, "max_workers": 2, "cpus_per_run": 0.5,
        "max_failures": 1, "trial_start_timeout_s": 240})
    results = Campaign.from_toml(toml, root=root).run(progress=False)
    return name, root / name, results


def test_campaign_completes_and_logs_every_decision(campaign):
    _, cdir, results = campaign
    assert [r.status for r in results.runs] == ["completed", "completed"], results.errors
    log = read_decision_log(cdir / "backpressure.arrows").to_pandas()
    assert sorted(log["run"].unique()) == sorted(r.run_name for r in results.runs)
    for run, rows in log.groupby("run"):
        assert sorted(rows["step"]) == list(range(STEPS)), run
        p_S = list(rows.sort_values("step")["p"] / 8)
        assert p_S[:WARMUP] == SWEEP  # the batch each step really used (skipped steps too)
        assert rows["capacity"].notna().all() and rows["pooled_p_star"].notna().all()
        assert set(rows["pooled_phase"]) <= {"sweep", "probe", "steady"} and "sweep" in set(rows["pooled_phase"])


def test_rows_carry_bp_columns_and_follow_the_trainer_rules(campaign):
    _, cdir, results = campaign
    log = read_decision_log(cdir / "backpressure.arrows").to_pandas()
    for r in results.runs:
        history = results.history(r.run_name)
        rl = history[history["phase"] == "rl"]
        assert len(rl) >= 3, f"{r.run_name}: too few RL rows (steps without reward signal write none)"
        for col in BP_COLUMNS:
            assert col in rl.columns and rl[col].notna().all(), col
        assert list(rl["bp_warmup"]) == [s < WARMUP for s in rl["step"]]
        for step, bs in zip(rl["step"], rl["batch_size"], strict=True):
            if step < WARMUP:
                assert bs == SWEEP[step]
        assert rl["batch_size"].nunique() > 1  # the sweep changed it
        mine = log[log["run"] == r.run_name].sort_values("step")
        _assert_changes_only_on_decisions(mine)


def _assert_changes_only_on_decisions(log) -> None:
    """After warmup, step s+1 uses a batch other than step s's only on throttle/increase (not skipped)."""
    rows = log.to_dict("records")
    for prev, nxt in zip(rows, rows[1:], strict=False):
        if prev["step"] < WARMUP - 1:
            continue
        changed = nxt["p"] != prev["p"]
        decided = prev["action"] in ("throttle", "increase") and not prev["skipped"]
        assert not changed or decided, (prev, nxt)
        assert nxt["p"] / 8 == prev["recommended_batch_size"]


def test_pooled_capacity_reaches_the_shared_endpoint_throttle(campaign):
    name, _, results = campaign
    scope = actor_scope(name, results.campaign_dir)
    handle = get_throttle(scope, "tinker", ray.get_runtime_context().namespace)
    stats = dataclasses.asdict(ray.get(handle.stats.remote(), timeout=30))
    print(f"tinker throttle after the campaign: {stats}")
    assert stats["capacity"] != CAPACITY and 1 <= stats["capacity"] <= 2  # pooled warmup for two runs
    bp = ray.get_actor(backpressure_name(scope), namespace=ray.get_runtime_context().namespace)
    settings = ray.get(bp.snapshot.remote(), timeout=30)["settings"]
    assert settings["max_capacity"] == CAPACITY  # bounded by [backend] max_concurrent, not the default 64
    assert stats["granted"] > 0 and stats["in_flight"] == 0
