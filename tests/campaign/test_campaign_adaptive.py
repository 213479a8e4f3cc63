"""Adaptive campaigns (`[campaign.adaptive]`, campaign/adaptive/scheduler.py): real Tune, real train_run, tiny model.

The hopeless condition is `configs/plugins/zero_advantage.py` (every advantage 0: no step trains). The metric
the tests compare on is `rl/nonzero_advantage_action_tokens`: 0 at every step of the hopeless condition,
about 4 tokens x 32 completions at every step of a learning one, so one rung separates them for sure with
2 seeds (Welch's t with Holm, results/significance.py), without waiting for rewards to move on CPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from campaign_helpers import REPO, kill_campaign_when, manifest_runs, resume_campaign
from helpers import GRPO, TINY_RUN, write_campaign

from retrain_ray.campaign.adaptive.plan import adaptive_plan
from retrain_ray.campaign.plan import build_plan
from retrain_ray.config import ConfigError, load_config

HOPELESS = {"advantage_mode": "zero_advantage.zero", "transform_mode": "none"}
METRIC = "rl/nonzero_advantage_action_tokens"


def write_adaptive(tmp_path: Path, *, name: str, adaptive: dict[str, Any] | None = None,
                   conditions: tuple[dict[str, Any], ...] = (GRPO, HOPELESS), seeds: tuple[int, ...] = (1, 2),
                   steps: int = 6, training: dict[str, Any] | None = None) -> Path:
    return write_campaign(
        tmp_path / f"{name}.toml", base=TINY_RUN, plugins={"search_paths": ["configs/plugins"]},
        training=training or {},
        logging={"log_dir": f"{tmp_path}/logs"},
        campaign={"name": name, "seeds": list(seeds), "max_steps": steps, "parallel": True, "max_workers": 2,
                  "max_failures": 0, "adaptive": {"metric": METRIC, "window": 2, "rungs": [4], "min_seeds": 2,
                                                  "max_seeds": 2, **(adaptive or {})}},
        conditions=list(conditions))


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # [plugins] search_paths = ["configs/plugins"] is relative to it


def test_the_plan_starts_min_seeds_and_reserves_the_rest(tmp_path):
    toml = write_adaptive(tmp_path, name="p", seeds=(1, 2, 3, 5), adaptive={"max_seeds": 3})
    plan = build_plan(load_config(toml), root=tmp_path)
    assert [r.run_name for r in plan.runs] == ["grpo+none_s1", "grpo+none_s2", "zero_advantage.zero+none_s1",
                                               "zero_advantage.zero+none_s2"]
    assert [r.run_name for r in plan.reserve] == ["grpo+none_s3", "zero_advantage.zero+none_s3"]
    adaptive = plan.adaptive
    assert adaptive is not None and adaptive.rungs == (4,) and adaptive.spare_seeds == (3,)
    assert (adaptive.best_case_steps, adaptive.worst_case_steps, adaptive.grid_steps) == (2 * (6 + 4), 36, 24)


def test_adaptive_is_off_without_its_table(tmp_path):
    toml = write_campaign(tmp_path / "grid.toml", base=TINY_RUN, campaign={"seeds": [1, 2]}, conditions=[GRPO])
    config = load_config(toml)
    assert config.campaign is not None and config.campaign.adaptive is None and adaptive_plan(config.campaign) is None
    assert build_plan(config, root=tmp_path).reserve == []


@pytest.mark.parametrize(("adaptive", "key", "words"), [
    ({"rungs": [4, 8]}, "campaign.adaptive.rungs", "past [campaign].max_steps = 6"),
    ({"rungs": [4, 2]}, "campaign.adaptive.rungs", "strictly increasing"),
    ({"metric": "mean_rewad"}, "campaign.adaptive.metric", "did you mean `mean_reward`"),
    ({"max_seeds": 3}, "campaign.adaptive.max_seeds", "lists only 2 seeds"),
    ({"min_seeds": 3, "max_seeds": 2}, "campaign.adaptive", "below min_seeds"),
    ({"mode": "biggest"}, "campaign.adaptive.mode", "max"),
    ({"alpha": 1.5}, "campaign.adaptive.alpha", "1"),
    ({"budget_steps": 10}, "campaign.adaptive.budget_steps", "at least 24"),
])
def test_bad_adaptive_settings_name_the_key(tmp_path, adaptive, key, words):
    toml = write_adaptive(tmp_path, name="bad", adaptive=adaptive)
    with pytest.raises(ConfigError) as info:
        load_config(toml)
    assert any(loc.startswith(key) for loc in info.value.locations), str(info.value)
    assert words in str(info.value)


def test_a_rung_between_checkpoints_is_accepted_and_each_run_checkpoints_there(tmp_path):
    """Issue 34.6: a rung need not be a multiple of save_every; the matrix makes it a checkpoint step of every run."""
    from retrain_ray.config.matrix import expand_runs

    config = load_config(REPO / "tests" / "fixtures" / "campaign_adaptive_rung_between_checkpoints.toml")
    assert config.training.save_every == 10 and config.training.checkpoint_steps == []
    runs = expand_runs(config)
    assert len(runs) == 10 and all(r.config.training.checkpoint_steps == [15, 40] for r in runs)  # 5 default conditions x 2 seeds
    toml = write_adaptive(tmp_path, name="odd", adaptive={"rungs": [3]})  # TINY_RUN: save_every = 2
    assert load_config(toml).campaign.adaptive.rungs == [3]


def test_a_run_checkpoints_at_its_checkpoint_steps_besides_save_every(tmp_path):
    """run/loop.py: save_every = 2 and checkpoint_steps = [3] over 4 steps checkpoint after steps 2 and 3."""
    from helpers import write_config

    from retrain_ray.run.train import train_run

    path = write_config(tmp_path / "run.toml", base=TINY_RUN,
                        training={**TINY_RUN["training"], "max_steps": 4, "checkpoint_steps": [3],
                                  "sft_warmup_steps": 0, "keep_last_checkpoints": 0})
    outcome = train_run(load_config(path), run_name="r", run_dir=tmp_path / "run")
    assert outcome.status == "completed"
    names = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("checkpoint_step_*"))
    assert names == ["checkpoint_step_2", "checkpoint_step_3"]


@pytest.mark.extended  # over 20 s: the default suite keeps under 15 minutes
@pytest.mark.slow
def test_an_adaptive_campaign_decides_at_a_rung_between_checkpoints(ray_4cpu_4gpu, tmp_path, monkeypatch):
    """A real campaign whose rung (3) is no multiple of save_every (2) stops the hopeless condition there."""
    from retrain_ray.campaign import Campaign

    monkeypatch.chdir(REPO)  # [plugins] search_paths = ["configs/plugins"] is relative to it
    toml = write_adaptive(tmp_path, name="odd", adaptive={"rungs": [3]})  # TINY_RUN: save_every = 2
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    manifest = json.loads((tmp_path / "campaigns" / "odd" / "manifest.json").read_text())
    decision = manifest["adaptive"]["decisions"][0]
    assert decision["step"] == 3 and decision["leader"] == "grpo+none"
    assert [s["condition"] for s in decision["stopped"]] == ["zero_advantage.zero+none"]
    runs = {r["run_name"]: r for r in manifest["runs"]}
    assert all(runs[f"zero_advantage.zero+none_s{seed}"]["rung_values"]["3"] == 0.0 for seed in (1, 2))
    assert manifest["status"] == "done" and results.errors == []


def test_explain_shows_the_rungs_and_the_step_budgets(tmp_path, capsys):
    from retrain_ray.cli.explain import explain_main

    toml = write_adaptive(tmp_path, name="x")
    assert explain_main([str(toml), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["campaign"]["adaptive"]
    assert plan["rungs"] == [4] and plan["best_case_steps"] == 2 * (6 + 4) and plan["worst_case_steps"] == 24
    assert explain_main([str(toml)]) == 0
    text = capsys.readouterr().out
    assert "at steps [4]" in text and "best case 20" in text and "worst case 24" in text


def _stopped(campaign_dir: Path) -> dict[str, dict] | None:
    runs = manifest_runs(campaign_dir)
    if runs is None or not any(r["status"] == "stopped" for r in runs.values()):
        return None
    return runs


@pytest.mark.extended  # over 20 s: the default suite keeps under 15 minutes
@pytest.mark.slow
def test_an_adaptive_campaign_stops_the_hopeless_condition_at_its_rung(ray_4cpu_4gpu, tmp_path, monkeypatch):
    from retrain_ray.campaign import Campaign

    monkeypatch.chdir(REPO)  # [plugins] search_paths = ["configs/plugins"] is relative to it
    toml = write_adaptive(tmp_path, name="ad")
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    cdir = tmp_path / "campaigns" / "ad"
    manifest = json.loads((cdir / "manifest.json").read_text())
    runs = {r["run_name"]: r for r in manifest["runs"]}
    for seed in (1, 2):
        hopeless, good = runs[f"zero_advantage.zero+none_s{seed}"], runs[f"grpo+none_s{seed}"]
        assert hopeless["status"] == "stopped" and good["status"] == "completed"
        assert hopeless["stop_reason"].startswith("worse than grpo+none at step 4 (diff ")
        assert "CI" in hopeless["stop_reason"] and "p = " in hopeless["stop_reason"]
        assert hopeless["rung_values"]["4"] == 0.0 and good["rung_values"]["4"] > 0
        assert hopeless["result"]["step"] < 5 and good["result"]["step"] == 5  # ended before the last step
    decision = manifest["adaptive"]["decisions"][0]
    assert decision["step"] == 4 and decision["leader"] == "grpo+none"
    assert [s["condition"] for s in decision["stopped"]] == ["zero_advantage.zero+none"]
    assert manifest["status"] == "done" and results.errors == []


@pytest.mark.extended
def test_an_undecided_last_rung_adds_seeds_to_the_leader_and_the_runner_up(ray_4cpu_4gpu, tmp_path):
    """Two conditions that differ only in lr, compared on their first step (sampled before any update): equal
    for each seed, so undecided: each gets seed 3 (a new run, recorded as added), then max_seeds ends it."""
    from retrain_ray.campaign import Campaign

    slow_lr = {**GRPO, "lr": 1e-3}
    toml = write_adaptive(tmp_path, name="add", conditions=(GRPO, slow_lr), seeds=(1, 2, 3), steps=1,
                          training={"sft_warmup_steps": 0}, adaptive={"rungs": [1], "window": 1, "max_seeds": 3})
    Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    manifest = json.loads((tmp_path / "campaigns" / "add" / "manifest.json").read_text())
    runs = {r["run_name"]: r for r in manifest["runs"]}
    added = sorted(name for name, r in runs.items() if r.get("added"))
    assert added == ["grpo+none_s3", "grpo+none~lr=0.001_s3"], sorted(runs)
    assert all(runs[n]["add_reason"].startswith("undecided at step 1") for n in added)
    assert all(r["status"] == "completed" for r in runs.values()) and manifest["status"] == "done"
    decisions = manifest["adaptive"]["decisions"]
    assert [len(d["added"]) for d in decisions] == [2, 0] and decisions[1]["seeds"] == {
        "grpo+none": 3, "grpo+none~lr=0.001": 3}


@pytest.mark.extended
def test_a_stop_survives_a_driver_kill_and_resume(tmp_path):
    """The driver is killed after the manifest records the stop; `retrain-ray resume` finishes the others and
    never starts a stopped run again."""
    root = tmp_path / "root"
    root.mkdir()
    toml = write_adaptive(tmp_path, name="kr", steps=10)
    cdir = root / "kr"
    kill_campaign_when(lambda: _stopped(cdir), toml, root, 0.5, prefix="/tmp/adk", timeout_s=600,
                       what="the adaptive campaign to stop its hopeless condition")
    before = manifest_runs(cdir)
    assert before is not None
    rc, left, log = resume_campaign(cdir, root, prefix="/tmp/adr", timeout_s=900)
    assert rc == 0 and left == [], log[-3000:]
    after = manifest_runs(cdir)
    assert after is not None
    for name in ("zero_advantage.zero+none_s1", "zero_advantage.zero+none_s2"):
        assert after[name]["status"] == "stopped" and after[name]["attempts"] == before[name]["attempts"]
        assert after[name]["stop_reason"].startswith("worse than grpo+none at step 4")
    assert all(after[f"grpo+none_s{s}"]["status"] == "completed" for s in (1, 2))
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert [d["step"] for d in manifest["adaptive"]["decisions"]] == [4]  # not decided again
    assert "zero_advantage.zero+none_s1: started" not in log


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


@pytest.mark.extended  # a real adaptive campaign; the scheduler's wiring is in test_adaptive_test_choice.py
def test_a_sequential_campaign_decides_by_its_spending_plan_and_says_so(ray_4cpu_4gpu, tmp_path, capfd):
    """`test = "sequential"`: the rung's decision is `sequential.decide`'s on the recorded values, the manifest
    records the test and its level, and the console states each decision with its p-value and nothing of Tune's
    start table (its unbounded trial count) or error lines."""
    from retrain_ray.campaign import Campaign
    from retrain_ray.campaign.adaptive import sequential

    toml = write_adaptive(tmp_path, name="seq", adaptive={"test": "sequential"})
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=True)
    console = capfd.readouterr()
    manifest = json.loads((tmp_path / "campaigns" / "seq" / "manifest.json").read_text())
    adaptive = manifest["adaptive"]
    assert adaptive["plan"]["test"] == "sequential" and results.errors == [] and manifest["status"] == "done"
    decision = adaptive["decisions"][0]
    pure = sequential.decide(4, decision["values"], seeds_by_condition=decision["seeds"], mode="max", alpha=0.05,
                             max_seeds=2, last_rung=True, can_add_seeds=False, rungs=[4], min_seeds=2)
    assert [s["condition"] for s in decision["stopped"]] == [pc.condition for pc in pure.stop]
    assert [c["p_value"] for c in decision["comparisons"]] == [pc.p_value for pc in pure.comparisons]
    assert {c["adaptive_test"] for c in decision["comparisons"]} == {"sequential"}
    assert decision["comparisons"][0]["test_level"] == pytest.approx(pure.alpha_per_look)
    p = pure.comparisons[0].p_value
    told = (f"stop zero_advantage.zero+none (p = {p:.2g} against grpo+none)" if pure.stop
            else f"zero_advantage.zero+none undecided (p = {p:.2g})")
    line = f"[campaign] adaptive: rung 4 (sequential, level {pure.alpha_per_look:.2g}): leader grpo+none; {told}"
    assert line in console.out, console.out
    both = console.out + console.err
    assert "9223372036854775807" not in both and "Number of trials" not in both
    assert "ERROR" not in both, both
