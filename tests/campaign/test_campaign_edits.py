"""Edits between runs of a named campaign (issue 26, classes 4 and 6).

A raised `[campaign] max_steps` extends a finished campaign: every run continues after its final
checkpoint and ends exactly as a run trained to the new count directly. Every other change to a
campaign that already holds runs is refused before Ray starts, naming the key, and nothing on disk
changes. A run name that would escape its directory (a `/` or `..` from a condition) is refused when the
config loads, before anything is written or Ray starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from campaign_helpers import segment_steps, steps_once
from fault_scenarios import final_weights, same_weights
from helpers import GRPO, TINY_RUN, write_campaign

from retrain_ray.campaign import Campaign, CampaignError
from retrain_ray.campaign.resume.edits import Extension, changed_keys
from retrain_ray.cli import main as cli_main
from retrain_ray.logs import read_stream
from retrain_ray.logs.stream import segment_paths

CAMPAIGN = {"name": "ext", "seeds": [1, 2], "max_steps": 4, "parallel": False, "max_failures": 0,
            "trial_start_timeout_s": 240}
RUNS = ("grpo+none_s1", "grpo+none_s2")
MEASURED = ("time", "_share", "per_second", "rss_mb")  # clocks and memory: they differ between any two runs


def _toml(tmp: Path, name: str = "ext", **campaign) -> Path:
    training = campaign.pop("training", {})
    return write_campaign(tmp / f"{name}.toml", base=TINY_RUN, logging={"log_dir": str(tmp / "logs")},
                          training={**TINY_RUN["training"], **training}, campaign={**CAMPAIGN, "name": name, **campaign})


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _rows(run_dir: Path) -> list[dict]:
    """Every logged value of the run's steps except clocks and memory (extras: the `*_s` timings)."""
    rows = read_stream(run_dir).to_pylist()
    for row in rows:
        for key in [k for k in row if any(m in k for m in MEASURED)]:
            del row[key]
        row["extras"] = [(k, v) for k, v in row["extras"] if not k.endswith("_s")]
    return rows


def _manifest(cdir: Path) -> dict:
    return json.loads((cdir / "manifest.json").read_text())


@pytest.mark.extended  # about a minute: `make test-extended` (CI) runs it
@pytest.mark.timeout(600)
def test_raising_max_steps_extends_every_finished_run_exactly(ray_4cpu_4gpu, tmp_path, capsys):
    root = tmp_path / "campaigns"
    assert not Campaign.from_toml(_toml(tmp_path), root=root).run(progress=False).errors
    cdir = root / "ext"
    before = _manifest(cdir)
    assert before["status"] == "done" and before["max_steps"] == 4

    results = Campaign.from_toml(_toml(tmp_path, max_steps=7), root=root).run(progress=True)
    assert not results.errors
    out = capsys.readouterr().out
    assert "extending ext from 4 to 7 steps: 2 finished run(s)" in out
    manifest = _manifest(cdir)
    assert manifest["status"] == "done" and manifest["max_steps"] == 7
    assert manifest["config"]["campaign"]["max_steps"] == 7
    (record,) = manifest["extended"]
    assert (record["from"], record["to"], sorted(record["runs"])) == (4, 7, list(RUNS)) and record["at"]
    for run in manifest["runs"]:
        assert (run["status"], run["max_steps"], run["attempts"], run["result"]["step"]) == ("completed", 7, 2, 6)
        assert f"{run['run_name']}: completed at step 6 (extended: continued after its final checkpoint of step 3)" in out
        run_dir = cdir / "runs" / run["run_name"]
        assert not steps_once(run_dir, 7)  # one row per step
        first, second = (segment_steps(p) for p in segment_paths(run_dir, "metrics"))
        assert (first, second) == ([0, 1, 2, 3], [4, 5, 6])  # the first 4 steps were not trained again
        state = json.loads((run_dir / "work" / "checkpoints" / "final" / "trainer_state.json").read_text())
        assert state["step"] == 6  # `final` rewritten at the new end
    assert list((cdir / "tune").glob(".extended-*"))  # Tune's finished experiment, set aside

    # the twin: the same campaign trained to 7 steps directly
    assert not Campaign.from_toml(_toml(tmp_path, "direct", max_steps=7), root=root).run(progress=False).errors
    for run in RUNS:
        extended, direct = cdir / "runs" / run, root / "direct" / "runs" / run
        assert same_weights(final_weights(extended / "work"), final_weights(direct / "work"))
        assert _rows(extended) == _rows(direct)


def _campaign_dir(tmp_path: Path) -> tuple[Path, Path]:
    """A campaign directory as a first start leaves it (manifest, resume snapshot), no run started."""
    toml = _toml(tmp_path)
    campaign = Campaign.from_toml(toml, root=tmp_path / "campaigns")
    campaign._open_dir()
    return toml, campaign.campaign_dir


@pytest.mark.parametrize(("change", "named"), [
    ({"training": {"lr": 1e-3}}, "[training].lr changed: 0.003 -> 0.001"),
    ({"seeds": [1, 3]}, "[campaign].seeds changed: [1, 2] -> [1, 3]"),
    ({"max_steps": 2}, "[campaign].max_steps lowered: 4 -> 2; a campaign cannot be shortened"),
    ({"training": {"max_steps": 9}}, "raise [campaign].max_steps to extend the campaign"),
    ({"cpus_per_run": 2.0}, "[campaign].cpus_per_run changed: 1.0 -> 2.0"),
])
def test_a_changed_campaign_is_refused_naming_the_key_and_nothing_changes(tmp_path, capsys, change, named):
    toml, cdir = _campaign_dir(tmp_path)
    before = _snapshot(tmp_path)
    _toml(tmp_path, **change)  # the same file, edited
    rc = cli_main([str(toml), "--root", str(tmp_path / "campaigns")])
    err = capsys.readouterr().err
    assert rc == 2 and named in err and "Traceback" not in err
    assert f"{cdir} already holds the runs of campaign 'ext'" in err
    assert "Fix: run the new config as a new campaign (another [campaign].name, or --name), or revert" in err
    assert "starting" not in err and "resuming" not in err
    assert _snapshot(tmp_path) == {**before, "ext.toml": toml.read_bytes()}


def test_what_may_change_and_what_extends(tmp_path):
    toml, _ = _campaign_dir(tmp_path)
    root = tmp_path / "campaigns"
    # scheduling keys may change: a resume with more workers or retries is the same campaign
    _toml(tmp_path, parallel=True, max_workers=2, max_failures=3)
    assert Campaign.from_toml(toml, root=root)._existing()[1] is None
    _toml(tmp_path, max_steps=10)
    assert Campaign.from_toml(toml, root=root)._existing()[1] == Extension(4, 10)
    _toml(tmp_path, max_steps=10, training={"lr": 1e-2})  # an extension with another change: refused whole
    with pytest.raises(CampaignError, match=r"\[training\].lr changed"):
        Campaign.from_toml(toml, root=root)._existing()


def test_a_key_a_newer_version_added_counts_as_unchanged_at_its_default():
    from retrain_ray.config import CampaignSection, RetrainConfig

    current = RetrainConfig(campaign=CampaignSection()).model_dump(mode="json")
    recorded = json.loads(json.dumps(current))
    del recorded["training"]["lr"]  # as a manifest written before `lr` existed
    assert changed_keys(recorded, current) == []
    current["training"]["lr"] = 0.5
    assert [key for key, _, _ in changed_keys(recorded, current)] == ["training.lr"]


# ---- names that escape (class 6) -----------------------------------------------------------------
ESCAPING = {**GRPO, "wandb_project": "../../elsewhere"}


def test_a_run_name_that_escapes_is_refused_by_explain_and_by_a_campaign(tmp_path, capsys):
    import ray

    toml = write_campaign(tmp_path / "esc.toml", base=TINY_RUN, logging={"log_dir": str(tmp_path / "logs")},
                          campaign={**CAMPAIGN, "name": "esc"}, conditions=[GRPO, ESCAPING])
    was_up = ray.is_initialized()
    for argv in (["explain", str(toml)], [str(toml), "--root", str(tmp_path / "campaigns")]):
        rc = cli_main(argv)
        err = capsys.readouterr().err
        assert rc == 2 and "Traceback" not in err, err
        assert "campaign.conditions[1] ('grpo+none~wandb_project=../../elsewhere'): `wandb_project` puts '/', '..'" in err
        assert "Fix: give `wandb_project` a value without them" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["esc.toml"]  # no campaign directory, no logs
    assert ray.is_initialized() == was_up  # Ray was not started


def test_a_campaign_name_that_escapes_is_refused(tmp_path, capsys):
    toml = write_campaign(tmp_path / "ok.toml", base=TINY_RUN, logging={"log_dir": str(tmp_path / "logs")},
                          campaign={**CAMPAIGN, "name": "ok"})
    rc = cli_main([str(toml), "--name", "..", "--root", str(tmp_path / "campaigns")])
    err = capsys.readouterr().err
    assert rc == 2 and "campaign name '..' cannot be a directory name: it contains '..'" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.toml"]
