"""End-to-end campaigns on the session Ray (4 CPUs, 4 fake GPUs): real Tune, real train_run, tiny model."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from helpers import GRPO, write_campaign
from ray import cloudpickle

from retrain_ray.campaign import Campaign
from retrain_ray.cli.results import results_main, status_main
from retrain_ray.logs import read_stream
from retrain_ray.logs.types import RunObserver

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MAXRL = {"advantage_mode": "maxrl", "transform_mode": "none"}


def write_toml(tmp_path: Path, *, name: str, steps: int = 6, sft: int = 6, seeds: tuple[int, ...] = (1,),
               workers: int = 2, stagger: float = 0.0, devices: str = "cpu", two_conditions: bool = True,
               finetune: str = "full", campaign_extra: dict | None = None, **sections: dict) -> Path:
    return write_campaign(
        tmp_path / f"{name.replace('/', '_')}.toml",
        model={"finetune": finetune, "lora_rank": 4}, backend={"devices": devices},
        training={"batch_size": 2, "group_size": 4, "max_tokens": 4, "lr": 3e-3, "save_every": 2,
                  "sft_warmup_steps": sft},
        algorithm=GRPO, logging={"log_dir": f"{tmp_path}/logs/x"}, **sections,
        campaign={"name": name, "seeds": list(seeds), "max_steps": steps, "parallel": True, "max_workers": workers,
                  "stagger_seconds": stagger, "max_failures": 2, **(campaign_extra or {})},
        conditions=[GRPO, MAXRL] if two_conditions else [GRPO])


SUMMARY_SCRIPT = """import json, sys
from pathlib import Path
manifest = json.loads((Path(sys.argv[1]) / "manifest.json").read_text())
(Path(sys.argv[1]) / "summary.json").write_text(json.dumps({"argv": sys.argv[1:], "runs": len(manifest["runs"])}))
print("summary done")
"""


@pytest.mark.slow
def test_cpu_campaign_runs_records_and_resumes_as_noop(ray_4cpu_4gpu, tmp_path, capsys):
    """Also: LoRA runs, then the [squeeze] and summary_script steps after the campaign, and diff."""
    script = tmp_path / "summarize.py"
    script.write_text(SUMMARY_SCRIPT)
    toml = write_toml(tmp_path, name="e2e", finetune="lora",
                      campaign_extra={"summary_script": str(script), "summary_args": ["--fast", "x y"]},
                      squeeze={"min_variance_retention": 0.9})
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    cdir = tmp_path / "campaigns" / "e2e"
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert manifest["status"] == "done"
    assert [(r["status"], r["attempts"]) for r in manifest["runs"]] == [("completed", 1)] * 2
    assert manifest["packages"]["ray"].startswith("2.60")
    df = results.get_dataframe()
    assert list(df["run_name"]) == ["grpo+none_s1", "maxrl+none_s1"]
    for run in df["run_name"]:
        assert list(results.history(run)["step"]) == list(range(6))  # every step once, in order
    assert set(results.summary()["condition"]) == {"grpo+none", "maxrl+none"}
    assert results.get_best_result("loss", mode="min").run_name in set(df["run_name"])
    assert results.errors == []

    again = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)  # finished: not rerun
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert [r["attempts"] for r in manifest["runs"]] == [1, 1] and len(manifest["sessions"]) == 2
    assert list(again.history("grpo+none_s1")["step"]) == list(range(6))
    jsonl = (cdir / "runs" / "grpo+none_s1" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in jsonl] == list(range(6))  # written by the recorder, beside its streams

    capsys.readouterr()
    assert status_main([str(cdir), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)["campaigns"][0]
    assert status["matrix"] == {"grpo+none": {"1": "6 ✓"}, "maxrl+none": {"1": "6 ✓"}}
    assert status["counts"]["completed"] == 2 and status["counts"]["failed"] == 0
    assert results_main([str(cdir), "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("run_name,condition,seed,status,attempts")
    _check_afterwards(cdir, script)
    _check_diff(cdir, results, capsys)


def _check_afterwards(cdir: Path, script: Path) -> None:
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert manifest["summary"]["returncode"] == 0 and manifest["summary"]["script"] == str(script)
    assert json.loads((cdir / "summary.json").read_text()) == {"argv": [str(cdir), "--fast", "x y"], "runs": 2}
    assert "summary done" in (cdir / "summary.log").read_text()
    squeeze = manifest["squeeze"]
    assert squeeze["run"] == "grpo+none_s1" and 1 <= squeeze["recommended_rank"] <= 4
    report = json.loads((cdir / "squeeze" / "squeeze.json").read_text())
    assert report["recommended_rank"] == squeeze["recommended_rank"] and report["min_variance_retention"] == 0.9
    assert report["adapter"].startswith(manifest["runs"][0]["checkpoint"]) and report["source_rank"] == 4
    assert (cdir / "squeeze" / f"adapter_r{squeeze['recommended_rank']}" / "adapter_config.json").is_file()


def _check_diff(cdir: Path, results, capsys) -> None:
    from retrain_ray.cli import main

    capsys.readouterr()
    assert main(["diff", str(cdir), "grpo+none", "maxrl+none", "--json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    df = results.get_dataframe().set_index("condition")
    assert diff["a"]["final"]["loss"] == pytest.approx(df.loc["grpo+none", "last_loss"])
    assert diff["b"]["final"]["loss"] == pytest.approx(df.loc["maxrl+none", "last_loss"])
    assert diff["delta"]["final"]["loss"] == pytest.approx(diff["b"]["final"]["loss"] - diff["a"]["final"]["loss"])
    runs = [str(cdir / "runs" / n) for n in ("grpo+none_s1", "maxrl+none_s1")]
    assert main(["diff", *runs, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["a"]["steps"] == 6
    assert main(["diff", str(cdir), "grpo+none", "nope"]) == 2
    assert "conditions: grpo+none, maxrl+none" in capsys.readouterr().err


def crash_once_runner(config, **kwargs):
    """train_run whose trial process dies (os._exit) at step 4 of its first attempt."""
    from retrain_ray.run.train import train_run

    marker = Path(kwargs["run_dir"]).parent / "crashed_once"

    class Crash(RunObserver):
        def on_step(self, row, **info):
            if row["step"] == 4 and not marker.exists():
                marker.write_text("x")
                os._exit(1)

    kwargs["observers"] = [*kwargs["observers"], Crash()]
    return train_run(config, **kwargs)


@pytest.mark.slow
def test_killed_run_is_retried_from_its_checkpoint_and_logs_each_step_once(ray_4cpu_4gpu, tmp_path):
    toml = write_toml(tmp_path, name="retry", steps=7, sft=7, two_conditions=False)
    results = Campaign.from_toml(toml, root=tmp_path, runner=crash_once_runner).run(progress=False)
    runs = {r.run_name: r for r in results.runs}
    assert all(r.status == "completed" and r.attempts == 2 for r in runs.values())
    for name in runs:
        assert list(results.history(name)["step"]) == list(range(7))
        raw = read_stream(tmp_path / "retry" / "runs" / name, key=None).to_pandas()
        assert set(raw["step"]) == set(range(7))
        # the retry started after the last checkpoint (step index 3), not from scratch
        assert (raw["step"] < 4).sum() == 4


def recording_runner(config, *, run_name, run_dir, observers, **_):
    """Stands in for training in scheduling tests: holds its placement for 1 s and logs what it got."""
    import ray

    from retrain_ray.run.types import RunOutcome

    start = time.time()
    time.sleep(1.0)
    row = {"run": run_name, "step": 0, "phase": "rl", "condition": "c", "mean_reward": 0.0}
    for obs in observers:
        obs.on_step(row)
        obs.close()
    record = {"run": run_name, "start": start, "end": time.time(), "gpus": [str(g) for g in ray.get_gpu_ids()],
              "cuda": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / "record.json").write_text(json.dumps(record))
    return RunOutcome(run_name, "completed", 0)


@pytest.mark.slow
def test_gpu_runs_get_distinct_gpus_bounded_concurrency_and_staggered_starts(ray_4cpu_4gpu, tmp_path):
    toml = write_toml(tmp_path, name="sched", seeds=(1, 2), workers=2, stagger=1.0, devices="gpu:0")
    results = Campaign.from_toml(toml, root=tmp_path, runner=recording_runner).run(progress=False)
    assert all(r.status == "completed" and r.placement == "gpu" for r in results.runs)
    recs = [json.loads((tmp_path / "sched" / "runs" / r.run_name / "work" / "record.json").read_text())
            for r in results.runs]
    assert all(len(r["gpus"]) == 1 and r["cuda"] == r["gpus"][0] for r in recs)
    for a in recs:  # at any run's start, at most max_workers runs are running (itself included)
        running = [b for b in recs if b["start"] <= a["start"] < b["end"]]
        assert len(running) <= 2  # max_workers
        assert len({b["gpus"][0] for b in running}) == len(running)  # distinct GPUs at once
    starts = sorted(r["start"] for r in recs)
    assert all(b - a >= 0.9 for a, b in zip(starts, starts[1:], strict=False))  # stagger_seconds = 1.0


def test_bad_campaign_reports_every_problem_before_ray(tmp_path):
    from retrain_ray.campaign import CampaignError
    from retrain_ray.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="campaign.name = 'bad/name'.*plain directory name"):
        load_config(write_toml(tmp_path, name="bad/name"))
    cfg = load_config(write_toml(tmp_path, name="good"))
    with pytest.raises(CampaignError, match="plain directory name"):
        Campaign(cfg, name="bad/name")  # --name is checked when the campaign is planned
    assert not (tmp_path / "logs").exists()  # nothing written
