"""Tune's copy of a run checkpoint is a pointer to the run's own (campaign/resume/pointer.py): the resume
decision follows it, falls back to the run's own newest checkpoint when it dangles, and a real campaign's
directory holds each checkpoint once (at most 1.25x the size of its runs' own directories)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from helpers import GRPO, TINY_RUN, write_campaign
from ray import cloudpickle
from test_own_checkpoint import _run_dir
from test_resume_point import Setup

from retrain_ray.campaign import Campaign
from retrain_ray.campaign.resume.own_checkpoint import tune_copy
from retrain_ray.campaign.resume.pointer import POINTER_FILE, pointer_target, resolve, write_pointer
from retrain_ray.util.secrets import redact

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_a_pointer_resolves_to_its_checkpoint_and_a_dangling_one_to_none(tmp_path):
    target = tmp_path / "work" / "checkpoints" / "checkpoint_step_3"
    target.mkdir(parents=True)
    write_pointer(tmp_path / "copy", run_name="r", step=3, target=target)
    assert resolve(tmp_path / "copy") == target.resolve()
    assert resolve(target) == target  # a checkpoint itself stands for itself
    shutil.rmtree(target)
    assert resolve(tmp_path / "copy") is None
    (tmp_path / "copy" / POINTER_FILE).write_text("{}")
    assert resolve(tmp_path / "copy") is None
    with pytest.raises(ValueError, match=r"pointer\.json: a checkpoint pointer without a 'path'"):
        pointer_target(tmp_path / "copy")


def test_tunes_pointer_resumes_from_the_runs_own_checkpoint(tmp_path):
    s = Setup(tmp_path)
    s.log_steps([0, 1, 2, 3, 4, 5])
    _run_dir(s.work, s.name, s.config, steps=(1, 3, 5))
    copy = s.tune / s.name / "checkpoint_000001"
    write_pointer(copy, run_name=s.name, step=3, target=s.work / "checkpoints" / "checkpoint_step_3")
    point = s.decide(copy)
    assert (point.source, point.step, point.path) == ("tune", 3, (s.work / "checkpoints" / "checkpoint_step_3").resolve())
    # the run pruned the checkpoint the (stale) Tune state names: its own newest logged one instead
    shutil.rmtree(s.work / "checkpoints" / "checkpoint_step_3")
    point = s.decide(copy)
    assert (point.source, point.step) == ("own", 5)


def test_a_set_aside_pointer_stands_for_the_checkpoint_it_names(tmp_path):
    s = Setup(tmp_path)
    _run_dir(s.work, s.name, s.config, steps=(1, 3))
    copy = s.tune / ".torn-20261124T010000" / s.name / "checkpoint_000001"
    write_pointer(copy, run_name=s.name, step=3, target=s.work / "checkpoints" / "checkpoint_step_3")
    (copy / ".metadata.json").write_text(json.dumps({"run_name": s.name, "config": redact(s.config)}))
    found = tune_copy(s.tune, tmp_path / "elsewhere", s.name, s.config, logged_through=5)
    assert found == ((s.work / "checkpoints" / "checkpoint_step_3").resolve(), 3)


def _size(path: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


@pytest.mark.slow
def test_a_campaign_stores_each_checkpoint_once(ray_4cpu_4gpu, tmp_path):
    toml = write_campaign(tmp_path / "once.toml", base=TINY_RUN, conditions=[GRPO],
                          training={"save_every": 1, "keep_last_checkpoints": 2},
                          campaign={"name": "once", "seeds": [1, 2], "max_steps": 4, "parallel": True,
                                    "max_workers": 2, "max_failures": 0})
    Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    cdir = tmp_path / "campaigns" / "once"
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["completed"] * 2
    for run in manifest["runs"]:  # the manifest names the run's own final checkpoint, not a pointer
        assert Path(run["checkpoint"]).name == "final" and (Path(run["checkpoint"]) / "CHECKSUMS.json").is_file()
    copies = list((cdir / "tune").glob("*/checkpoint_*"))
    assert copies and all((c / POINTER_FILE).is_file() and _size(c) < 16384 for c in copies)
    runs = _size(cdir / "runs")
    assert _size(cdir) <= 1.25 * runs, f"campaign {_size(cdir)} B vs its runs' {runs} B"
