"""Unit tests of the campaign's plain parts: placement, stagger clock, manifest, statistics, status cells."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrain_ray.campaign.capacity.placement import check_fits, decide_placement, parse_devices, placement_for
from retrain_ray.campaign.control import StaggerClock
from retrain_ray.campaign.resume.tune_copies import set_aside, torn_state
from retrain_ray.logs.manifest import CampaignRecord, Manifest, read_manifest
from retrain_ray.results.significance import ci95_halfwidth, t95
from retrain_ray.results.status import cell
from retrain_ray.util.secrets import REDACTED, redact


@pytest.mark.parametrize("devices,gpus", [("cpu", 0), ("gpu:0", 1), ("gpu:0,gpu:1", 2), ("cuda:0, cuda:1", 2)])
def test_parse_devices(devices, gpus):
    assert parse_devices(devices) == gpus


@pytest.mark.parametrize("devices", ["", "tpu:0", "cpu,gpu:0"])
def test_parse_devices_rejects_with_the_fix(devices):
    with pytest.raises(ValueError, match="backend.devices"):
        parse_devices(devices)


def test_bundles_per_mode():
    cpu, _ = placement_for("cpu", cpus_per_run=1.0, cluster_gpus=4)
    gpu, _ = placement_for("gpu:0", cpus_per_run=2.0, cluster_gpus=4)
    split, _ = placement_for("gpu:0,gpu:1", cpus_per_run=1.0, cluster_gpus=4)
    assert (cpu.mode, cpu.bundle_dicts) == ("cpu", [{"CPU": 1.0}])
    assert (gpu.mode, gpu.bundle_dicts) == ("gpu", [{"CPU": 2.0, "GPU": 1.0}])
    assert split.bundle_dicts == [{"CPU": 1.0}, {"GPU": 1.0}, {"GPU": 1.0}]
    assert (split.strategy, split.num_gpus) == ("STRICT_PACK", 2)


def test_cpu_fallback_only_when_asked():
    placement, warning = placement_for("gpu:0,gpu:1", cpus_per_run=1.0, cluster_gpus=0, cpu_fallback=True)
    assert placement.mode == "cpu"
    assert "running on CPU" in warning and "cpu_fallback" in warning
    placement, warning = placement_for("gpu:0,gpu:1", cpus_per_run=1.0, cluster_gpus=0)
    assert (placement.mode, placement.num_gpus, warning) == ("split", 2, "")


CPU_HEAD = [{"CPU": 4.0}]
ZERO_CPU_HEAD = [{"CPU": 0.0, "memory": 1e9}]


def test_gpu_run_on_a_cluster_without_gpus_waits_for_the_autoscaler():
    d = decide_placement("gpu:0", cpus_per_run=1.0, nodes=CPU_HEAD, cpu_fallback=False, can_scale=True)
    assert (d.placement.mode, d.placement.bundle_dicts) == ("gpu", [{"CPU": 1.0, "GPU": 1.0}])
    assert not d.problem and not d.warning
    assert "GPU: need 1 on one node, largest node has 0" in d.wait and "autoscaler" in d.wait


def test_head_with_no_cpus_does_not_abort_a_scalable_cluster():
    for devices in ("cpu", "gpu:0", "gpu:0,gpu:1"):
        d = decide_placement(devices, cpus_per_run=1.0, nodes=ZERO_CPU_HEAD, cpu_fallback=False, can_scale=True)
        assert d.wait and not d.problem, devices


def test_gpu_run_on_a_ray_nothing_can_scale_is_an_error_naming_the_fixes():
    d = decide_placement("gpu:0", cpus_per_run=1.0, nodes=CPU_HEAD, cpu_fallback=False, can_scale=False)
    assert d.placement.mode == "gpu" and not d.wait
    assert "GPU: need 1" in d.problem and "cpu_fallback = true" in d.problem and "backend.devices" in d.problem
    asked = decide_placement("gpu:0", cpus_per_run=1.0, nodes=CPU_HEAD, cpu_fallback=True, can_scale=False)
    assert (asked.placement.mode, asked.problem) == ("cpu", "") and "running on CPU" in asked.warning


def test_fitting_gpu_run_needs_no_wait():
    d = decide_placement("gpu:0", cpus_per_run=1.0, nodes=[{"CPU": 0.0}, {"CPU": 4.0, "GPU": 1.0}],
                         cpu_fallback=True, can_scale=True)
    assert (d.placement.mode, d.wait, d.problem, d.warning) == ("gpu", "", "", "")


def test_split_needs_both_gpus_on_one_node():
    split, _ = placement_for("gpu:0,gpu:1", cpus_per_run=1.0, cluster_gpus=2)
    two_one_gpu_nodes = [{"CPU": 4, "GPU": 1}, {"CPU": 4, "GPU": 1}]
    problem = check_fits(split, two_one_gpu_nodes)
    assert "GPU: need 2 on one node, largest node has 1" in problem
    assert check_fits(split, [{"CPU": 1, "GPU": 2}]) == ""


def test_stagger_clock_exact():
    clock = StaggerClock(5.0)
    assert clock.reserve(100.0) == 0.0
    assert clock.reserve(101.0) == 4.0  # slot 105
    assert clock.reserve(101.0) == 9.0  # slot 110
    assert clock.reserve(120.0) == 0.0  # idle long enough


@given(st.floats(0.0, 10.0), st.lists(st.floats(0.0, 50.0), min_size=1, max_size=20))
def test_stagger_slots_are_spaced(stagger, gaps):
    clock, now, slots = StaggerClock(stagger), 0.0, []
    for g in gaps:
        now += g
        slots.append(now + clock.reserve(now))
    assert all(b - a >= stagger - 1e-9 for a, b in zip(slots, slots[1:], strict=False))


def test_redact_hides_secrets_and_keeps_the_rest():
    cfg = {"model": {"base_url": "http://x", "api_key": "sk-123"}, "logging": {"wandb_token": ""},
           "x": [{"hf_token": "abc"}], "training": {"lr": 0.1, "max_tokens": 10, "sft_max_tokens": 5}}
    out = redact(cfg)
    assert out["model"] == {"base_url": "http://x", "api_key": REDACTED}
    assert out["logging"]["wandb_token"] == ""
    assert out["x"][0]["hf_token"] == REDACTED
    assert out["training"] == {"lr": 0.1, "max_tokens": 10, "sft_max_tokens": 5}


def test_manifest_records_every_change_at_once(tmp_path):
    m = Manifest.create(tmp_path, {"name": "c"}, [{"run_name": "a"}, {"run_name": "b"}])
    m.update_run("a", status="running", attempts=1)
    on_disk = read_manifest(tmp_path)  # the run's change is an appended event (logs/manifest_events.py)
    assert on_disk.runs[0].status == "running" and on_disk.runs[1].status == "pending"
    m.update_run("a", status="failed")
    m.update_run("b", status="completed")
    m.finish()
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk["status"] == "partial" and on_disk["counts"]["failed"] == 1
    with pytest.raises(ValueError, match="run status"):
        m.update_run("a", status="weird")


# a manifest as the dict-based writer before the records wrote it: an adaptive campaign, a run with every
# field, one added and stopped, an extension, squeeze and summary, and a key no version of the records knows
OLD_MANIFEST = {
    "name": "c", "campaign_dir": "/x/c", "campaign_toml": "c.toml", "conditions": ["a", "b"], "seeds": [1],
    "max_steps": 4, "num_runs": 2, "max_concurrent": 2, "stagger_seconds": 0.0, "max_failures": 1,
    "config": {"training": {"lr": 0.1, "max_steps": 4}, "logging": {"wandb_token": "***"}},
    "adaptive": {"plan": {"metric": "mean_reward", "rungs": [2, 4]}, "finished": "every run has ended",
                 "decisions": [{"step": 2, "at": 1.5, "leader": "a", "seeds": {"a": 1, "b": 1},
                                "values": {"a": [0.5], "b": [0.1]}, "stopped": [{"condition": "b", "reason": "worse"}],
                                "added": [], "comparisons": [{"condition": "b", "p_value": 0.01}]}]},
    "status": "done", "created": "2026-01-01T00:00:00Z", "packages": {"ray": "2.60.0"},
    "runs": [
        {"run_name": "a_s1", "condition": "a", "seed": 1, "overrides": {"lr": 0.1}, "run_dir": "/x/c/runs/a_s1",
         "placement": "", "max_steps": 4, "status": "completed", "attempts": 2,
         "result": {"step": 3, "mean_reward": float("nan"), "run_status": "done", "ok": True}, "error": "",
         "started_at": 10.0, "finished_at": 20.0, "checkpoint": "/x/ckpt", "rung_values": {"2": 0.5}},
        {"run_name": "b_s2", "condition": "b", "seed": 2, "overrides": {}, "run_dir": "/x/c/runs/b_s2",
         "placement": "colocate", "max_steps": 4, "added": True, "add_reason": "undecided", "status": "stopped",
         "attempts": 1, "result": {}, "error": "", "stop_reason": "worse", "stopped_at": 15.0},
    ],
    "updated": "2026-01-01T01:00:00Z", "sessions": [{"host": "h", "pid": 1, "started": 1.0, "process_started_at": 0.5}],
    "counts": {"completed": 1, "stopped": 1}, "extended": [{"from": 2, "to": 4, "runs": ["a_s1"], "at": "t"}],
    "squeeze": {"run": "a_s1", "recommended_rank": 2}, "summary": {"returncode": 0}, "from_a_newer_version": [1],
}


def test_manifest_records_read_and_write_the_same_json(tmp_path):
    """An existing campaign directory's manifest loads as records and is written back with the same keys
    and values (NaN included); a minimal old manifest loads with defaults and gains no keys."""
    (tmp_path / "manifest.json").write_text(json.dumps(OLD_MANIFEST, indent=2))
    record = read_manifest(tmp_path)
    assert record.runs[1].added and record.adaptive is not None and record.adaptive.decisions[0].stopped[0].condition == "b"
    assert record.runs[0].last_step == 3 and record.sessions[0].host == "h"
    record.write(tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text())
    assert json.dumps(again, sort_keys=True) == json.dumps(OLD_MANIFEST, sort_keys=True)
    (tmp_path / "manifest.json").write_text(json.dumps({"runs": [{"run_name": "a", "status": "running"}]}))
    old = read_manifest(tmp_path)
    assert (old.name, old.max_concurrent, old.runs[0].attempts, old.runs[0].last_step) == ("", 1, 0, -1)
    old.write(tmp_path / "old.json")
    assert json.loads((tmp_path / "old.json").read_text()) == {"runs": [{"run_name": "a", "status": "running"}]}


def test_manifest_updates_are_new_records(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(OLD_MANIFEST))
    record = read_manifest(tmp_path)
    changed = record.with_run("a_s1", status="failed", error="boom")
    assert (record.run("a_s1").status, changed.run("a_s1").status, changed.run("a_s1").error) == ("completed", "failed", "boom")
    with pytest.raises(ValueError, match="run status"):
        record.with_run("a_s1", status="finished")
    with pytest.raises(KeyError, match="no run 'zz'"):
        record.run("zz")
    with pytest.raises(Exception, match="frozen"):
        record.runs[0].status = "failed"  # type: ignore[misc]


def test_a_damaged_manifest_is_a_clear_error(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"runs": [{"condition": "a"}]}))
    with pytest.raises(ValueError, match=r"manifest.json is not a retrain-ray manifest \(runs.0.run_name: Field required"):
        CampaignRecord.load(tmp_path / "manifest.json")


def test_ci95_hand_computed():
    # values 1, 2, 3: mean 2, sample std 1, t(2) = 4.303 -> 4.303 / sqrt(3)
    assert ci95_halfwidth([1.0, 2.0, 3.0]) == pytest.approx(4.303 / math.sqrt(3))
    assert math.isnan(ci95_halfwidth([1.0]))
    assert t95(1) == 12.706 and t95(1000) == 1.96


@pytest.mark.parametrize("state,text", [
    ({"step": 9, "status": "completed", "max_steps": 10}, "10 ✓"),
    ({"step": 3, "status": "failed", "max_steps": 10}, "4 ✗"),
    ({"step": 3, "status": "running", "max_steps": 10}, "4/10"),
    ({"step": 3, "status": "stale", "max_steps": 10}, "4 stale"),
    ({"step": None, "status": "pending", "max_steps": 10}, "—"),
])
def test_status_cells(state, text):
    assert cell(state) == text


def test_status_finds_campaigns_under_their_log_dir(tmp_path):
    from retrain_ray.results.status import find_campaigns

    for path in ("logs/smoke/campaign_a", "logs/other/campaign_b", "logs/direct"):
        (tmp_path / path).mkdir(parents=True)
        (tmp_path / path / "manifest.json").write_text("{}")
    (tmp_path / "logs/smoke/campaign_a/runs/r1").mkdir(parents=True)
    found = [p.relative_to(tmp_path / "logs").as_posix() for p in find_campaigns(tmp_path / "logs")]
    assert found == ["direct", "other/campaign_b", "smoke/campaign_a"]
    assert find_campaigns(tmp_path / "logs/smoke/campaign_a") == [tmp_path / "logs/smoke/campaign_a"]


def _tune_dir(tmp_path):
    """The files a Tune experiment leaves in `<campaign>/tune` (searcher state and Tuner are pickles)."""
    from ray import cloudpickle

    tune_dir = tmp_path / "tune"
    for run in ("grpo+none_s1", "grpo+none_s2"):
        (tune_dir / run / "checkpoint_000000").mkdir(parents=True)
    (tune_dir / "experiment_state-2026-11-23_23-33-19.json").write_text(json.dumps({"trial_data": []}))
    (tune_dir / "basic-variant-state-2026-11-23_23-33-19.json").write_bytes(cloudpickle.dumps({"_iterators": []}))
    (tune_dir / "tuner.pkl").write_bytes(cloudpickle.dumps({"param_space": {}}))
    return tune_dir


def test_whole_tune_state_is_not_torn(tmp_path):
    assert torn_state(_tune_dir(tmp_path)) == ""
    assert torn_state(tmp_path / "absent") == ""


@pytest.mark.parametrize("name,content", [
    ("basic-variant-state-2026-11-23_23-33-19.json", b""),  # seen: a driver killed while Tune copied it
    ("basic-variant-state-2026-11-23_23-33-19.json", b"\x80\x05\x95"),  # cut short
    ("experiment_state-2026-11-23_23-33-19.json", b'{"trial_data": ['),
    ("tuner.pkl", b""),
])
def test_a_torn_tune_state_file_is_named(tmp_path, name, content):
    tune_dir = _tune_dir(tmp_path)
    (tune_dir / name).write_bytes(content)
    assert str(tune_dir / name) in torn_state(tune_dir)


def test_a_torn_tune_state_is_set_aside_with_the_unfinished_runs_only(tmp_path):
    tune_dir = _tune_dir(tmp_path)
    (tune_dir / "basic-variant-state-2026-11-23_23-33-19.json").write_bytes(b"")
    aside = set_aside(tune_dir, ["grpo+none_s2"])
    assert sorted(p.name for p in tune_dir.iterdir()) == [aside.name, "grpo+none_s1"]
    assert (tune_dir / "grpo+none_s1" / "checkpoint_000000").is_dir()  # the manifest names it
    assert sorted(p.name for p in aside.iterdir()) == [
        "basic-variant-state-2026-11-23_23-33-19.json", "experiment_state-2026-11-23_23-33-19.json",
        "grpo+none_s2", "tuner.pkl"]
