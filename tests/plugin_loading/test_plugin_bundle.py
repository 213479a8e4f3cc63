"""Plugins shipped to a campaign's trials (issue 12, campaign/plugin_bundle.py): what the driver packs for
the plugins a config names, the size limit, and a real campaign whose trial can only import its reward
plugin from the shipped bundle (the driver's folder is renamed away before the run starts)."""

from __future__ import annotations

import importlib
import io
import json
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import GRPO, SHIPPED_REWARD, write_campaign, write_config
from ray import cloudpickle

from retrain_ray.campaign import Campaign, CampaignError
from retrain_ray.campaign.plugin_bundle import MAX_BUNDLE_BYTES, build_bundle, shipment
from retrain_ray.config import load_config

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def driver_dir(tmp_path, monkeypatch):
    """The driver's working directory, with a plugins/ folder, other files beside it, and no stale modules."""
    cwd = tmp_path / "driver"
    (cwd / "plugins" / "__pycache__").mkdir(parents=True)
    (cwd / "plugins" / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"x")
    (cwd / "notes.py").write_text("NOT_SHIPPED = 1\n")
    (cwd / "data.bin").write_bytes(b"\0" * 1000)
    _forget_plugin_modules()
    monkeypatch.setattr(sys, "path", [*sys.path])  # plugin lookups add the working directory to it
    monkeypatch.chdir(cwd)
    yield cwd
    _forget_plugin_modules()  # not restored: the next test's plugins/ is another folder


def _forget_plugin_modules() -> None:
    for name in [m for m in sys.modules if m.split(".")[0] in {"plugins", "toplevel_reward", "extra"}]:
        del sys.modules[name]
    importlib.invalidate_caches()


def _reward_config(cwd: Path, reward: str, **sections) -> Path:
    return write_config(cwd / "run.toml", reward={"type": reward}, algorithm=GRPO, **sections)


def _names(bundle) -> list[str]:
    return sorted(zipfile.ZipFile(io.BytesIO(bundle.data)).namelist())


def test_a_search_path_folder_is_shipped_without_the_working_directory(driver_dir, tmp_path):
    (driver_dir / "plugins" / "shipped_reward.py").write_text(SHIPPED_REWARD.format(report=str(tmp_path / "r.txt")))
    (driver_dir / "plugins" / "helper_data.json").write_text("{}")
    cfg = load_config(_reward_config(driver_dir, "shipped_reward:make"))
    bundle = build_bundle([cfg])
    assert bundle is not None
    assert _names(bundle) == ["plugins/helper_data.json", "plugins/shipped_reward.py"]
    assert bundle.units == (("plugins", str(driver_dir / "plugins")),)
    assert build_bundle([cfg]).digest == bundle.digest  # the same code packs to the same bytes
    root = bundle.unpack(tmp_path / "cache")
    assert root == tmp_path / "cache" / bundle.digest[:16]
    assert (root / "plugins" / "shipped_reward.py").read_text() == (driver_dir / "plugins" / "shipped_reward.py"
                                                                     ).read_text()
    marker = root / "plugins" / "shipped_reward.py"
    marker.write_text("# left as it was\n")  # a second unpack would write the file again
    assert bundle.unpack(tmp_path / "cache") == root  # unpacked once per node
    assert marker.read_text() == "# left as it was\n"


def test_a_top_level_module_ships_alone_and_a_nested_search_path_keeps_its_packages(driver_dir, tmp_path):
    (driver_dir / "toplevel_reward.py").write_text(SHIPPED_REWARD.format(report=str(tmp_path / "r.txt")))
    (driver_dir / "extra" / "plugs").mkdir(parents=True)
    (driver_dir / "extra" / "__init__.py").write_text("")
    (driver_dir / "extra" / "unrelated.py").write_text("")
    (driver_dir / "extra" / "plugs" / "detector.py").write_text(
        "class D:\n    def detect(self, tokens):\n        return [0] * len(tokens)\n\n\ndef make(config):\n"
        "    return D()\n")
    cfg = load_config(write_config(driver_dir / "run.toml", reward={"type": "toplevel_reward:make"},
                                   planning={"detector": "detector.make"}, plugins={"search_paths": ["extra/plugs"]},
                                   algorithm=GRPO))
    bundle = build_bundle([cfg])
    assert bundle is not None
    assert _names(bundle) == ["extra/__init__.py", "extra/plugs/detector.py", "toplevel_reward.py"]


def test_no_plugins_or_installed_ones_ship_nothing(driver_dir):
    assert build_bundle([load_config(_reward_config(driver_dir, "match"))]) is None
    assert build_bundle([load_config(_reward_config(driver_dir, "json:loads"))]) is None  # the standard library


def test_a_plugin_folder_over_the_limit_is_refused_naming_it(driver_dir):
    (driver_dir / "plugins" / "shipped_reward.py").write_text(SHIPPED_REWARD.format(report=str(driver_dir / "r.txt")))
    with open(driver_dir / "plugins" / "weights.bin", "wb") as sparse:
        sparse.truncate(MAX_BUNDLE_BYTES + 1)
    toml = write_campaign(driver_dir / "c.toml", reward={"type": "shipped_reward:make"}, algorithm=GRPO,
                          training={"max_tokens": 8}, campaign={"name": "big", "seeds": [1], "max_steps": 1})
    with pytest.raises(CampaignError) as info:
        Campaign.from_toml(toml, root=driver_dir / "campaigns").run(progress=False)
    assert f"[plugins] {driver_dir / 'plugins'}: 100.0 MiB" in str(info.value) and "100 MiB limit" in str(info.value)
    assert not (driver_dir / "campaigns" / "big").exists()  # refused before the campaign started


def test_shipment_describes_what_build_bundle_packs(driver_dir, tmp_path):
    """`retrain-ray explain`'s "plugins shipped" part: the same units, files and bytes as the bundle."""
    (driver_dir / "plugins" / "shipped_reward.py").write_text(SHIPPED_REWARD.format(report=str(tmp_path / "r.txt")))
    (driver_dir / "plugins" / "helper_data.json").write_text("{}")
    cfg = load_config(_reward_config(driver_dir, "shipped_reward:make"))
    shipped = shipment([cfg, cfg])
    bundle = build_bundle([cfg])
    assert bundle is not None
    raw = sum(f.stat().st_size for f in (driver_dir / "plugins").iterdir() if f.is_file())
    assert shipped == {"status": "shipped", "files": 2, "raw_bytes": raw, "zipped_bytes": len(bundle.data),
                       "digest": bundle.digest[:16],
                       "units": [{"name": "plugins", "source": str(driver_dir / "plugins"), "files": 2, "bytes": raw}]}


def test_shipment_says_none_and_why(driver_dir):
    assert shipment([load_config(_reward_config(driver_dir, "match"))]) == {"status": "none",
                                                                          "reason": "no plugin named"}
    installed = shipment([load_config(_reward_config(driver_dir, "json:loads"))])
    assert installed == {"status": "none", "reason": "only installed plugins named (on every node already)"}


def test_shipment_reports_the_drivers_size_refusal(driver_dir):
    (driver_dir / "plugins" / "shipped_reward.py").write_text(SHIPPED_REWARD.format(report=str(driver_dir / "r.txt")))
    with open(driver_dir / "plugins" / "weights.bin", "wb") as sparse:
        sparse.truncate(MAX_BUNDLE_BYTES + 1)
    cfg = load_config(_reward_config(driver_dir, "shipped_reward:make"))
    shipped = shipment([cfg])
    assert shipped["status"] == "refused"
    assert shipped["error"].startswith(f"[plugins] {driver_dir / 'plugins'}: 100.0 MiB")
    with pytest.raises(ValueError) as info:
        build_bundle([cfg])
    assert str(info.value) == shipped["error"]


def make_renaming_runner(folder: str):
    """A trial runner that renames the driver's plugin folder away before the run imports anything."""

    def runner(config, **kwargs):
        from retrain_ray.run.train import train_run

        if Path(folder).exists():
            Path(folder).rename(folder + ".gone")
        return train_run(config, **kwargs)

    return runner


@pytest.mark.slow
def test_a_trial_imports_its_plugin_from_the_shipped_bundle(ray_4cpu_4gpu, driver_dir, tmp_path):
    report = tmp_path / "imported_from.txt"
    (driver_dir / "plugins" / "shipped_reward.py").write_text(SHIPPED_REWARD.format(report=str(report)))
    toml = write_campaign(
        driver_dir / "c.toml", reward={"type": "shipped_reward:make"}, algorithm=GRPO,
        training={"batch_size": 2, "group_size": 4, "max_tokens": 4, "save_every": 0},
        campaign={"name": "shipped", "seeds": [1], "max_steps": 2, "max_failures": 0})
    campaign = Campaign.from_toml(toml, root=tmp_path / "campaigns",
                                  runner=make_renaming_runner(str(driver_dir / "plugins")))
    results = campaign.run(progress=False)
    assert not (driver_dir / "plugins").exists() and (driver_dir / "plugins.gone").exists()
    (run,) = results.runs
    assert run.status == "completed", results.errors
    history = results.history(run.run_name)
    assert list(history["step"]) == [0, 1]
    assert all(1000.0 <= r < 1001.0 for r in history["mean_reward"])  # the plugin scored every completion
    imported = report.read_text().split()
    trial_files = imported[1:]  # the first import is the driver's preflight
    assert imported[0] == str(driver_dir / "plugins" / "shipped_reward.py")
    assert trial_files and all("retrain-ray-plugins" in f and not f.startswith(str(driver_dir)) for f in trial_files)
    manifest = json.loads((tmp_path / "campaigns" / "shipped" / "manifest.json").read_text())
    assert manifest["status"] == "done"
