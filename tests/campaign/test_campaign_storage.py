"""Tune storage on a filesystem URI (`[campaign] storage`): pyarrow's local filesystem through `file://`,
the same code path as `s3://` and `gs://` (pyarrow.fs), while the campaign directory stays local."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ray import cloudpickle
from test_campaign_e2e import write_toml

from retrain_ray.campaign import Campaign, CampaignError
from retrain_ray.campaign.plan import build_plan
from retrain_ray.config import load_config

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _config(tmp_path: Path, storage: str):
    toml = write_toml(tmp_path, name="stored", steps=4, sft=0, two_conditions=False,
                      campaign_extra={"storage": storage})
    return toml, load_config(toml)


def test_storage_uri_is_tune_storage_and_the_campaign_dir_stays_local(tmp_path):
    _, cfg = _config(tmp_path, f"file://{tmp_path}/bucket/")
    plan = build_plan(cfg, root=tmp_path / "campaigns")
    assert plan.campaign_dir == (tmp_path / "campaigns" / "stored").resolve()
    assert plan.tune_storage == f"file://{tmp_path}/bucket/stored"
    assert plan.tune_path == f"file://{tmp_path}/bucket/stored/tune"
    _, local = _config(tmp_path, "")
    assert build_plan(local, root=tmp_path).tune_path == f"{(tmp_path / 'stored').resolve()}/tune"


@pytest.mark.parametrize("storage", ["bucket/prefix", "nosuchfs://bucket/x"])
def test_bad_storage_is_an_error_naming_the_key(tmp_path, storage):
    _, cfg = _config(tmp_path, storage)
    with pytest.raises(CampaignError, match=r"\[campaign\].storage"):
        build_plan(cfg, root=tmp_path)


def test_uri_root_is_refused_with_the_storage_key(tmp_path):
    _, cfg = _config(tmp_path, "")
    with pytest.raises(CampaignError, match=r"must be a local path.*\[campaign\].storage = 's3://b/x'"):
        build_plan(cfg, root="s3://b/x")


@pytest.mark.extended
def test_campaign_checkpoints_go_to_the_uri_logs_stay_on_the_driver_and_it_resumes(ray_4cpu_4gpu, tmp_path):
    bucket = tmp_path / "bucket"
    toml, _ = _config(tmp_path, f"file://{bucket}")
    Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    cdir = tmp_path / "campaigns" / "stored"
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert manifest["status"] == "done" and manifest["runs"][0]["status"] == "completed"
    assert not (cdir / "tune").exists(), "Tune's copies belong in the storage URI"
    assert list((bucket / "stored" / "tune").glob("*/checkpoint_*")), "run checkpoints in the storage URI"
    assert (cdir / "runs" / "grpo+none_s1").is_dir() and not (bucket / "stored" / "runs").exists(), \
        "the recorder's logs stay on the driver"
    Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)  # restores from the URI
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert manifest["runs"][0]["attempts"] == 1 and len(manifest["sessions"]) == 2, "finished: not rerun"
    assert not (cdir / "tune").exists()
